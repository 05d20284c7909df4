//! Model-checked races: every interleaving of a few threads on the real code, with loom.
//!
//! `RUSTFLAGS="--cfg loom" cargo test -p snowid-core --test loom --release`
//! (scripts/test runs it). Without `--cfg loom` this file is empty.
#![cfg(loom)]

use loom::sync::atomic::AtomicU64;
use loom::sync::Arc;
use loom::thread;
use snowid_core::clock::Sample;
use snowid_core::layout::stamp;
use snowid_core::shard_state::{issue, release, Refusal};
use snowid_core::time_base::TimeBase;

const T0: i64 = 1_800_000_000_000;
const NO_LEASE: u64 = u64::MAX;

/// Explores every interleaving with up to three preemptions: enough for each race below (a
/// lost update needs one), and it keeps the weak CAS's spurious failures from exploding the
/// search.
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(f);
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
/// fetch_max): a comparer holding an old sample must not undo a newer comparer's forward step,
/// and a caller issuing meanwhile sees the base only move forward.
#[test]
fn overlapping_comparisons_never_move_the_base_back() {
    model(|| {
        let base = Arc::new(TimeBase::starting_at(
            Sample {
                mono_ms: 0,
                wall_ms: T0,
            },
            0,
        ));
        let cell = Arc::new(AtomicU64::new(0));
        // The first comparer's sample is due at 10; the second's, a forward step of a second,
        // at 20, once the first has claimed its interval.
        let old = {
            let base = base.clone();
            thread::spawn(move || {
                base.compare(Sample {
                    mono_ms: 10,
                    wall_ms: T0 + 10,
                })
            })
        };
        let new = {
            let base = base.clone();
            thread::spawn(move || {
                base.compare(Sample {
                    mono_ms: 20,
                    wall_ms: T0 + 1_020,
                })
            })
        };
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
            assert_eq!(base.read(20).0, T0 + 1_020, "old={old_ran}");
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
