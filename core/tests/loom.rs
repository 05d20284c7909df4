//! Model-checked races: every interleaving of a few threads on the real code, with loom.
//!
//! `RUSTFLAGS="--cfg loom" cargo test -p snowid-core --test loom --release`
//! (scripts/test runs it). Without `--cfg loom` this file is empty. Under loom the shared state
//! has four shard cells, not 8,192, so that every atomic in it can be tracked.
#![cfg(loom)]

use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use loom::sync::Arc;
use loom::thread;
use snowid_core::clock::Sample;
use snowid_core::durable::{Change, DurableState, Fence, Header};
use snowid_core::generator::{Generator, Refused, Shared};
use snowid_core::host::{Clock, DurableStore, Event, Interrupted, Report, Wait};
use snowid_core::layout::{compose, decompose, stamp, Shard, MAX_SEQ};
use snowid_core::shard_state::{issue, release, Refusal};
use snowid_core::startup::{Found, Occasion, Plan, Reading, Write};
use snowid_core::time_base::TimeBase;

const T0: i64 = 1_800_000_000_000;
const EPOCH: i64 = T0 - 1_000_000;
const NO_LEASE: u64 = u64::MAX;

/// Explores every interleaving with up to three preemptions: enough for each race below (a
/// lost update needs one), and it keeps the weak CAS's spurious failures from exploding the
/// search.
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(f);
}

/// A host whose clocks stand still, whose "disk" is a few atomics (the lease end made durable,
/// the changes made, and how many times the state was created), and whose waits yield to the
/// other threads, so that a caller that finds the writer's claim taken really waits for its
/// holder, a few times, before its wait is cancelled (which keeps every model finite).
struct Host {
    claimer: u32,
    disk: Arc<Disk>,
    waits_left: std::cell::Cell<u32>,
}

/// How many waits a caller may make before its wait is cancelled.
const WAITS: u32 = 2;

impl Host {
    fn new(claimer: u32, disk: Arc<Disk>) -> Host {
        Host {
            claimer,
            disk,
            waits_left: std::cell::Cell::new(WAITS),
        }
    }
}

#[derive(Default)]
struct Disk {
    /// 1 once the pages hold the state (as `CREATE EXTENSION` leaves them).
    exists: AtomicUsize,
    /// The durable lease end, as a time field.
    end_ms: AtomicU64,
    inits: AtomicUsize,
    releases: AtomicUsize,
    /// 1 while the state is fenced.
    fenced: AtomicUsize,
}

impl Disk {
    /// The disk `CREATE EXTENSION` leaves: a state, fresh.
    fn installed() -> Disk {
        Disk {
            exists: AtomicUsize::new(1),
            ..Disk::default()
        }
    }
}

impl Clock for Host {
    fn monotonic_ms(&self) -> i64 {
        0
    }
    fn wall_ms(&self) -> i64 {
        T0
    }
}

impl DurableStore for Host {
    type Error = ();
    fn claimer(&self) -> u32 {
        self.claimer
    }
    fn start(&self, _occasion: Occasion, plan: &dyn Fn(Reading<'_>) -> Plan) -> Result<Plan, ()> {
        let found = match self.disk.exists.load(SeqCst) {
            0 => Found::Missing,
            _ => Found::State(Box::new(DurableState::new(Header {
                lease_end_unix_ms: EPOCH + self.disk.end_ms.load(SeqCst) as i64,
                fence: (self.disk.fenced.load(SeqCst) == 1).then_some(Fence::Stale),
                ..Header::fresh(EPOCH)
            }))),
        };
        let plan = plan(Reading {
            found,
            witnessed: &|| false,
            timeline: 0,
        });
        match &plan.write {
            Write::Nothing => {}
            Write::State => {
                self.disk.inits.fetch_add(1, SeqCst);
                let fenced = plan.state.header.fence.is_some();
                self.disk.fenced.store(usize::from(fenced), SeqCst);
                self.disk.exists.store(1, SeqCst);
            }
            Write::Change(change) => self.persist(change, &mut || {})?,
        }
        Ok(plan)
    }
    fn persist(&self, change: &Change, in_force: &mut dyn FnMut()) -> Result<(), ()> {
        match change {
            Change::Lease {
                lease_end_unix_ms, ..
            } => {
                self.disk
                    .end_ms
                    .fetch_max((lease_end_unix_ms - EPOCH) as u64, SeqCst);
            }
            Change::Resume {
                lease_end_unix_ms, ..
            }
            | Change::TakeBack {
                lease_end_unix_ms, ..
            } => {
                self.disk
                    .end_ms
                    .fetch_max((lease_end_unix_ms - EPOCH) as u64, SeqCst);
                self.disk.fenced.store(0, SeqCst);
            }
            Change::Release { .. } => {
                self.disk.releases.fetch_add(1, SeqCst);
            }
            Change::Init(_) | Change::Promotion { .. } | Change::Lease020 { .. } => {}
        }
        in_force();
        Ok(())
    }
}

impl Wait for Host {
    fn wait(&self, _ms: u64) -> Result<(), Interrupted> {
        match self.waits_left.get() {
            0 => Err(Interrupted),
            n => {
                self.waits_left.set(n - 1);
                thread::yield_now();
                Ok(())
            }
        }
    }
}

impl Report for Host {
    fn report(&self, _event: Event) {}
}

fn now() -> Sample {
    Sample {
        mono_ms: 0,
        wall_ms: T0,
    }
}

fn shard(n: i32) -> Shard {
    Shard::new(n).unwrap()
}

/// Guards against a lost update in the per-shard step (a load then a store instead of a CAS):
/// two callers racing on one shard never get the same stamp, and each one's stamps increase.
#[test]
fn two_callers_never_share_a_stamp() {
    model(|| {
        let cell = Arc::new(AtomicU64::new(0));
        let racers: Vec<_> = (0..2)
            .map(|_| {
                let cell = cell.clone();
                thread::spawn(move || {
                    let a = issue(&cell, 7, 100, NO_LEASE).unwrap();
                    let b = issue(&cell, 7, 100, NO_LEASE).unwrap();
                    assert!(b > a);
                    [a, b]
                })
            })
            .collect();
        let mut all: Vec<u64> = racers.into_iter().flat_map(|r| r.join().unwrap()).collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 4);
        assert_eq!(all, (0..4).map(|i| stamp(7, i)).collect::<Vec<_>>());
    });
}

/// Guards against the time base going back when two comparisons overlap (a store instead of
/// fetch_max): a comparer holding an old sample must not undo a newer comparer's step forward,
/// and a caller issuing meanwhile sees the base only move forward.
#[test]
fn overlapping_comparisons_never_move_the_base_back() {
    model(|| {
        let base = Arc::new(TimeBase::starting_at(now(), 0));
        let cell = Arc::new(AtomicU64::new(0));
        // The first comparer's sample is due at 10; the second's, drift of 4 ms that is
        // followed at once, at 20, once the first has claimed its interval.
        let comparer = |mono_ms, wall_ms| {
            let base = base.clone();
            thread::spawn(move || base.compare(Sample { mono_ms, wall_ms }))
        };
        let old = comparer(10, T0 + 10);
        let new = comparer(20, T0 + 24);
        let issuer = {
            let (base, cell) = (base.clone(), cell.clone());
            thread::spawn(move || {
                let first = base.read(20).0;
                let a = issue(&cell, (first - T0) as u64, 10_000, NO_LEASE).unwrap();
                let second = base.read(20).0;
                let b = issue(&cell, (second - T0) as u64, 10_000, NO_LEASE).unwrap();
                assert!(second >= first, "the base went back: {first} then {second}");
                assert!(b > a);
            })
        };
        let old_ran = old.join().unwrap().is_some();
        let new_ran = new.join().unwrap().is_some();
        issuer.join().unwrap();
        if new_ran {
            assert_eq!(base.read(20).0, T0 + 24, "old={old_ran}");
        }
    });
}

/// Guards against a caller issuing for a shard after its release returned: whatever the
/// interleaving, every stamp issued is at or below the last one the release reports.
#[test]
fn nothing_is_issued_past_a_release() {
    model(|| {
        let cell = Arc::new(AtomicU64::new(stamp(7, 0)));
        let issuer = {
            let cell = cell.clone();
            thread::spawn(move || {
                (0..2)
                    .filter_map(|_| match issue(&cell, 7, 100, NO_LEASE) {
                        Ok(s) => Some(s),
                        Err(Refusal::Released) => None,
                        Err(other) => panic!("{other:?}"),
                    })
                    .collect::<Vec<_>>()
            })
        };
        let last = release(&cell);
        let issued = issuer.join().unwrap();
        assert!(issued.iter().all(|&s| s <= last), "{issued:?} past {last}");
        assert_eq!(issue(&cell, 7, 100, NO_LEASE), Err(Refusal::Released));
    });
}

/// A loaded shared state whose shard 0 has used up its lease: the next ID needs a new one.
fn at_the_end_of_the_lease(disk: &Arc<Disk>) -> Arc<Shared> {
    let shared = Arc::new(Shared::new(now()));
    let host = Host::new(1, disk.clone());
    Generator::new(&shared, &host, EPOCH, 10_000)
        .next_id(shard(0))
        .unwrap();
    let end = shared.lease.end_ms();
    shared
        .shard(shard(0))
        .raise_floor(stamp(end - 1, MAX_SEQ as u64));
    shared
}

/// Guards against publishing a lease before it is durable, and against two callers writing at
/// once: two callers race past the end of the lease. Whatever the interleaving, every ID lies
/// under the durable lease, and the caller that found the claim taken waited for its holder and
/// then issued too (its waits yield to the holder, and are never used up here).
#[test]
fn no_id_is_issued_past_the_durable_lease() {
    model(|| {
        let disk = Arc::new(Disk::installed());
        let shared = at_the_end_of_the_lease(&disk);
        let first_end = disk.end_ms.load(SeqCst);
        let callers: Vec<_> = (1..=2)
            .map(|claimer| {
                let (shared, disk) = (shared.clone(), disk.clone());
                thread::spawn(move || {
                    let host = Host::new(claimer, disk.clone());
                    let result = Generator::new(&shared, &host, EPOCH, 10_000).next_id(shard(0));
                    if let Ok(id) = result {
                        let ms = decompose(id).unwrap().ms;
                        assert!(
                            ms < disk.end_ms.load(SeqCst),
                            "issued past the durable lease"
                        );
                    }
                    result.is_ok()
                })
            })
            .collect();
        let issued = callers
            .into_iter()
            .map(|c| c.join().unwrap())
            .filter(|&ok| ok)
            .count();
        assert_eq!(
            issued, 2,
            "the waiter issued too, once the claimer was done"
        );
        assert!(disk.end_ms.load(SeqCst) > first_end);
    });
}

/// Guards against loading the durable state twice (two "first" callers each creating it): two
/// callers of a freshly started server whose state is missing race; it is created once, fenced
/// (generation never starts fresh), and both are refused.
#[test]
fn the_state_is_loaded_and_created_once() {
    model(|| {
        let disk = Arc::new(Disk::default());
        let shared = Arc::new(Shared::new(now()));
        let callers: Vec<_> = (1..=2)
            .map(|claimer| {
                let (shared, disk) = (shared.clone(), disk.clone());
                thread::spawn(move || {
                    let host = Host::new(claimer, disk);
                    Generator::new(&shared, &host, EPOCH, 10_000).next_id(shard(1))
                })
            })
            .collect();
        for c in callers {
            assert!(
                matches!(
                    c.join().unwrap(),
                    Err(Refused::Fenced(Fence::Lost)) | Err(Refused::Interrupted)
                ),
                "a missing state never starts fresh"
            );
        }
        assert_eq!(disk.inits.load(SeqCst), 1);
    });
}

/// How many explored interleavings of [`releases_and_resumes_race_callers_safely`] had a caller
/// start after the resume returned: the test checks that some did, so that its check of those
/// callers' IDs cannot pass by never running.
static ISSUED_AFTER_THE_RESUME: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// Guards against a durable release that a racing caller outruns, and against a resume that
/// lets a caller racing it on the fast path issue below the ID it resumed above (a floor raised
/// after the resume returns, or published before the shards are raised): a release races an
/// issuer on shard 2; then a resume races an issuer on shard 1, which is not released, so the
/// issuer takes the fast path. No ID is issued after the release at or above its last ID; every
/// ID for shard 1 from a call that starts after the resume returned is above the ID resumed
/// above, and every ID for it stays above the issuer's; the resume leaves shard 2 released.
#[test]
fn releases_and_resumes_race_callers_safely() {
    model(|| {
        let disk = Arc::new(Disk::installed());
        let shared = Arc::new(Shared::new(now()));
        let host = Host::new(1, disk.clone());
        let g = Generator::new(&shared, &host, EPOCH, 10_000);
        g.next_id(shard(2)).unwrap();
        g.next_id(shard(1)).unwrap();

        let issuer = {
            let (shared, disk) = (shared.clone(), disk.clone());
            thread::spawn(move || {
                let host = Host::new(2, disk);
                Generator::new(&shared, &host, EPOCH, 10_000).next_id(shard(2))
            })
        };
        let last = g.release(shard(2)).unwrap();
        match issuer.join().unwrap() {
            Ok(id) => assert!(id <= last, "{id} issued after the release at {last}"),
            Err(e) => assert_eq!(e, Refused::Released),
        }
        assert_eq!(disk.releases.load(SeqCst), 1);

        let above = compose(decompose(last).unwrap().ms + 3, 2, 0).unwrap();
        let resumed = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let issuer = {
            let (shared, disk, resumed) = (shared.clone(), disk.clone(), resumed.clone());
            thread::spawn(move || {
                let host = Host::new(2, disk);
                let g = Generator::new(&shared, &host, EPOCH, 10_000);
                (0..2)
                    .map(|_| {
                        let after_the_resume = resumed.load(SeqCst);
                        let id = g.next_id(shard(1)).expect("shard 1 is not released");
                        (after_the_resume, id)
                    })
                    .collect::<Vec<_>>()
            })
        };
        g.resume_above(decompose(above).unwrap()).unwrap();
        resumed.store(true, SeqCst);
        let issued = issuer.join().unwrap();
        assert!(issued[1].1 > issued[0].1, "{issued:?}");
        for &(after_the_resume, id) in &issued {
            if after_the_resume {
                ISSUED_AFTER_THE_RESUME.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                assert!(id > above, "{id} issued below the resume above {above}");
            }
        }
        let next = g.next_id(shard(1)).unwrap();
        assert!(
            next > above && next > issued[1].1,
            "{next} after {issued:?}"
        );
        assert_eq!(g.next_id(shard(2)), Err(Refused::Released));
    });
    assert!(
        ISSUED_AFTER_THE_RESUME.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "no explored interleaving had a caller start after the resume returned"
    );
}

/// Guards against a fence that a racing caller slips past: a server loaded fenced refuses
/// everything until the resume, and whatever the interleaving an ID issued meanwhile is above
/// the ID resumed above.
#[test]
fn nothing_is_issued_while_fenced() {
    model(|| {
        let disk = Arc::new(Disk {
            fenced: AtomicUsize::new(1),
            ..Disk::installed()
        });
        let shared = Arc::new(Shared::new(now()));
        let host = Host::new(1, disk.clone());
        let g = Generator::new(&shared, &host, EPOCH, 10_000);
        assert_eq!(g.next_id(shard(3)), Err(Refused::Fenced(Fence::Stale)));
        let above = compose(1_000_000 + 5, 1, 0).unwrap();
        let issuer = {
            let (shared, disk) = (shared.clone(), disk.clone());
            thread::spawn(move || {
                let host = Host::new(2, disk);
                Generator::new(&shared, &host, EPOCH, 10_000).next_id(shard(3))
            })
        };
        g.resume_above(decompose(above).unwrap()).unwrap();
        match issuer.join().unwrap() {
            Ok(id) => assert!(id > above, "{id} issued below {above}"),
            Err(e) => assert!(matches!(e, Refused::Fenced(_)), "{e:?}"),
        }
        assert!(g.next_id(shard(3)).unwrap() > above);
    });
}
