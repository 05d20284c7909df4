//! The protocol against a simulated host: clocks the test moves, a "disk" that can fail or crash
//! between writing and publishing, a lock another caller can hold, and waits that stop.

use super::*;
use crate::clock::Sample;
use crate::layout::{decompose, stamp, Parts, MAX_MS};
use crate::lease::{resume_from, start, LastStop, StateFile, LEASE_WINDOW_MS};
use std::cell::{Cell, RefCell};
use std::rc::Rc;

const EPOCH: i64 = 1_767_225_600_000;
const T0: i64 = EPOCH + 100_000_000;
const LEAD: u64 = 1000;

#[derive(Debug, PartialEq, Eq)]
struct DiskFull;

/// A simulated machine. Time moves only when the test, or a wait, moves it.
struct Host {
    mono: Cell<i64>,
    wall_offset: Cell<i64>,
    /// The durable record, as a restart would find it.
    disk: RefCell<Option<Record>>,
    /// Every record persisted, in order.
    persisted: RefCell<Vec<Record>>,
    lock: Rc<Cell<bool>>,
    fail_persist: Cell<bool>,
    /// Runs inside `persist`, before the record is durable: another caller racing the writer.
    during_persist: RefCell<Option<Box<dyn Fn()>>>,
    /// How many waits may still pass before a wait is "cancelled".
    waits_left: Cell<u32>,
    waited: RefCell<Vec<u64>>,
    events: RefCell<Vec<Event>>,
}

struct Writer(Rc<Cell<bool>>);

impl Drop for Writer {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

impl Host {
    fn new() -> Host {
        Host {
            mono: Cell::new(1_000),
            wall_offset: Cell::new(T0 - 1_000),
            disk: RefCell::new(None),
            persisted: RefCell::new(Vec::new()),
            lock: Rc::new(Cell::new(false)),
            fail_persist: Cell::new(false),
            during_persist: RefCell::new(None),
            waits_left: Cell::new(u32::MAX),
            waited: RefCell::new(Vec::new()),
            events: RefCell::new(Vec::new()),
        }
    }

    fn now(&self) -> Sample {
        Sample {
            mono_ms: self.mono.get(),
            wall_ms: self.wall_ms(),
        }
    }

    fn advance(&self, ms: i64) {
        self.mono.set(self.mono.get() + ms);
    }

    /// Shared state as a start-up from this host's disk would build it.
    fn restart(&self) -> Shared {
        let found = Ok(self.disk.borrow().map(StateFile::running));
        let last_stop = LastStop {
            clean: false,
            checkpoint_lsn: 0,
        };
        Shared::start(self.now(), &start(found, EPOCH, last_stop))
    }
}

impl Clock for Host {
    fn monotonic_ms(&self) -> i64 {
        self.mono.get()
    }
    fn wall_ms(&self) -> i64 {
        self.mono.get() + self.wall_offset.get()
    }
}

impl LeaseStore for Host {
    type Error = DiskFull;
    type Guard = Writer;

    fn try_lock(&self) -> Option<Writer> {
        if self.lock.get() {
            return None;
        }
        self.lock.set(true);
        Some(Writer(self.lock.clone()))
    }

    fn persist(&self, record: &Record) -> Result<(), DiskFull> {
        if let Some(racer) = self.during_persist.borrow().as_ref() {
            racer();
        }
        if self.fail_persist.get() {
            return Err(DiskFull);
        }
        *self.disk.borrow_mut() = Some(*record);
        self.persisted.borrow_mut().push(*record);
        Ok(())
    }
}

impl Wait for Host {
    fn wait(&self, ms: u64) -> Result<(), Interrupted> {
        self.waited.borrow_mut().push(ms);
        if self.waits_left.get() == 0 {
            return Err(Interrupted);
        }
        self.waits_left.set(self.waits_left.get() - 1);
        self.advance(ms as i64);
        Ok(())
    }
}

impl Report for Host {
    fn report(&self, event: Event) {
        self.events.borrow_mut().push(event);
    }
}

fn shard(n: i32) -> Shard {
    Shard::new(n).unwrap()
}

fn generator<'a>(shared: &'a Shared, host: &'a Host) -> Generator<'a, Host> {
    Generator::new(shared, host, EPOCH, LEAD)
}

fn ms_of(id: i64) -> u64 {
    decompose(id).unwrap().ms
}

fn now_ms(host: &Host) -> u64 {
    (host.wall_ms() - EPOCH) as u64
}

#[test]
fn the_first_id_makes_a_lease_durable_before_it_is_issued() {
    let host = Host::new();
    let shared = host.restart();
    let id = generator(&shared, &host).next_id(shard(5)).unwrap();
    let disk = host.disk.borrow().unwrap();
    assert_eq!(ms_of(id), now_ms(&host));
    assert!(ms_of(id) < disk.end_ms_under(EPOCH).unwrap());
    assert_eq!(
        disk,
        Record::extended(EPOCH, T0, now_ms(&host)),
        "the lease covers the ID and a window, recorded with the time base"
    );
    assert_eq!(shared.lease.end_ms(), disk.end_ms_under(EPOCH).unwrap());
    assert_eq!(shared.lease.writes(), 1);
    assert_eq!(shared.lease.persisted_base_unix_ms(), T0);
}

#[test]
fn after_a_restart_the_first_stamp_is_exactly_the_first_past_the_lease() {
    let host = Host::new();
    let shared = host.restart();
    let before = generator(&shared, &host).next_id(shard(3)).unwrap();
    let end_ms = host.disk.borrow().unwrap().end_ms_under(EPOCH).unwrap();

    // Restart with the clock set back an hour: only the lease keeps the order.
    host.wall_offset.set(host.wall_offset.get() - 3_600_000);
    let shared = host.restart();
    let g = Generator::new(&shared, &host, EPOCH, 10 * LEASE_WINDOW_MS);
    let first = g.next_id(shard(3)).unwrap();
    assert_eq!(
        first,
        id_from_stamp(stamp(end_ms, 0), shard(3)),
        "exactly the first stamp past the lease"
    );
    assert!(first > before);
    let other = g.next_id(shard(4)).unwrap();
    assert_eq!(ms_of(other), end_ms, "every shard resumes past the lease");
}

#[test]
fn a_restart_waits_for_the_time_base_to_come_within_the_lead_of_the_lease() {
    let host = Host::new();
    let shared = host.restart();
    generator(&shared, &host).next_id(shard(1)).unwrap();
    let end_ms = host.disk.borrow().unwrap().end_ms_under(EPOCH).unwrap();
    let shared = host.restart();
    let id = generator(&shared, &host).next_id(shard(1)).unwrap();
    assert_eq!(ms_of(id), end_ms);
    let waited: u64 = host.waited.borrow().iter().sum();
    assert_eq!(
        waited,
        LEASE_WINDOW_MS + 1 - LEAD,
        "waits out the window beyond the lead"
    );
}

#[test]
fn a_persist_failure_issues_nothing_past_the_durable_lease() {
    let host = Host::new();
    let shared = host.restart();
    let g = generator(&shared, &host);
    let first = g.next_id(shard(2)).unwrap();
    let durable_end = host.disk.borrow().unwrap().end_ms_under(EPOCH).unwrap();

    host.fail_persist.set(true);
    let mut issued = vec![first];
    let refused = loop {
        match g.next_id(shard(2)) {
            Ok(id) => issued.push(id),
            Err(e) => break e,
        }
        host.advance(1);
    };
    assert_eq!(refused, Refused::Persist(DiskFull));
    assert!(issued.iter().all(|&id| ms_of(id) < durable_end));
    assert_eq!(shared.lease.end_ms(), durable_end, "nothing was published");
    assert!(
        !host.lock.get(),
        "the writer's lock is given back on failure"
    );

    // A restart from the disk resumes above everything issued.
    host.fail_persist.set(false);
    let shared = host.restart();
    let after = generator(&shared, &host).next_id(shard(2)).unwrap();
    assert!(after > *issued.iter().max().unwrap());
}

#[test]
fn a_caller_racing_the_writer_cannot_use_the_lease_before_it_is_durable() {
    // The writer is inside `persist` (an fsync in progress) when another caller asks for an ID
    // on a shard that has used up the lease. That caller must not get an ID the disk does not
    // cover yet: it finds the lock taken and waits (here, the wait is cancelled).
    let host = Rc::new(Host::new());
    let shared = Rc::new(host.restart());
    generator(&shared, &host).next_id(shard(7)).unwrap();
    let end_ms = shared.lease.end_ms();
    shared
        .shard(shard(8))
        .raise_floor(stamp(end_ms - 1, MAX_SEQ as u64));
    shared
        .shard(shard(7))
        .raise_floor(stamp(end_ms - 1, MAX_SEQ as u64));

    let racer_saw = Rc::new(RefCell::new(Vec::new()));
    {
        let (host2, shared2, saw) = (host.clone(), shared.clone(), racer_saw.clone());
        *host.during_persist.borrow_mut() = Some(Box::new(move || {
            host2.waits_left.set(0);
            let result =
                Generator::new(&shared2, &*host2, EPOCH, 10 * LEASE_WINDOW_MS).next_id(shard(8));
            saw.borrow_mut().push(result);
            host2.waits_left.set(u32::MAX);
        }));
    }
    let g = Generator::new(&shared, &*host, EPOCH, 10 * LEASE_WINDOW_MS);
    let id = g.next_id(shard(7)).unwrap();
    assert_eq!(ms_of(id), end_ms);
    assert_eq!(
        racer_saw.borrow().as_slice(),
        [Err(Refused::Interrupted)],
        "the racing caller waited instead of issuing past the durable lease"
    );
}

#[test]
fn renewal_ahead_of_need_keeps_other_callers_from_waiting() {
    let host = Host::new();
    let shared = host.restart();
    let g = generator(&shared, &host);
    g.next_id(shard(1)).unwrap();
    let end_ms = shared.lease.end_ms();

    // Another backend holds the writer's lock (its fsync is slow). Callers past the renewal
    // point keep getting IDs without waiting, right up to the lease's end.
    host.lock.set(true);
    host.advance((end_ms - RENEW_AHEAD_MS - now_ms(&host)) as i64);
    for _ in 0..100 {
        g.next_id(shard(1)).unwrap();
    }
    assert!(host.waited.borrow().is_empty());
    assert_eq!(shared.lease.end_ms(), end_ms);

    // Once the lock is free, the next caller past the renewal point renews, ahead of need.
    host.lock.set(false);
    let id = g.next_id(shard(1)).unwrap();
    assert!(ms_of(id) < end_ms);
    assert!(shared.lease.end_ms() > end_ms, "renewed before running out");
    assert_eq!(shared.lease.writes(), 2);
    assert!(host.waited.borrow().is_empty());
    assert!(!host.lock.get());
}

#[test]
fn renewal_happens_only_near_the_end() {
    let host = Host::new();
    let shared = host.restart();
    let g = generator(&shared, &host);
    g.next_id(shard(1)).unwrap();
    let renew_at = shared.lease.end_ms() - RENEW_AHEAD_MS;
    host.advance((renew_at - now_ms(&host)) as i64 - 1);
    g.next_id(shard(1)).unwrap();
    assert_eq!(shared.lease.writes(), 1, "not yet");
    host.advance(1);
    g.next_id(shard(1)).unwrap();
    assert_eq!(shared.lease.writes(), 2, "at the renewal point");
}

#[test]
fn callers_at_the_end_of_the_lease_wait_for_the_writer_interruptibly() {
    let host = Host::new();
    let shared = host.restart();
    let g = generator(&shared, &host);
    g.next_id(shard(1)).unwrap();
    host.advance(LEASE_WINDOW_MS as i64 + 5);
    host.lock.set(true);
    host.waits_left.set(3);
    assert_eq!(g.next_id(shard(1)), Err(Refused::Interrupted));
    assert_eq!(host.waited.borrow().as_slice(), [1, 1, 1, 1]);
}

#[test]
fn a_burst_borrows_then_waits_at_the_lead() {
    let host = Host::new();
    let shared = host.restart();
    let g = generator(&shared, &host);
    let mut last = 0;
    for _ in 0..(LEAD + 2) * 1024 {
        let id = g.next_id(shard(9)).unwrap();
        assert!(id > last);
        last = id;
    }
    assert!(
        !host.waited.borrow().is_empty(),
        "the burst reached the lead"
    );
    assert!(ms_of(last) <= now_ms(&host) + LEAD);
    assert_eq!(
        shared.shard(shard(9)).waits(),
        host.waited.borrow().len() as u64
    );
    assert_eq!(shared.shard(shard(9)).issued(), (LEAD + 2) * 1024);
}

#[test]
fn a_clock_before_the_epoch_and_the_end_of_time_are_refused() {
    let host = Host::new();
    host.wall_offset.set(EPOCH - 10_000 - host.mono.get());
    let shared = host.restart();
    assert_eq!(
        generator(&shared, &host).next_id(shard(0)),
        Err(Refused::ClockBeforeEpoch {
            base_unix_ms: EPOCH - 10_000
        })
    );

    let host = Host::new();
    host.wall_offset
        .set(EPOCH + MAX_MS as i64 + 1 - host.mono.get());
    let shared = host.restart();
    assert_eq!(
        generator(&shared, &host).next_id(shard(0)),
        Err(Refused::Exhausted)
    );
}

#[test]
fn a_released_shard_is_refused_and_others_are_not() {
    let host = Host::new();
    let shared = host.restart();
    let g = generator(&shared, &host);
    let last = g.next_id(shard(5)).unwrap();
    assert_eq!(g.release(shard(5)), last);
    assert_eq!(g.next_id(shard(5)), Err(Refused::Released));
    assert!(g.next_id(shard(6)).is_ok());
}

#[test]
fn clock_reports_are_rate_limited_and_use_a_fresh_sample() {
    let host = Host::new();
    let shared = host.restart();
    let g = generator(&shared, &host);
    g.next_id(shard(1)).unwrap();
    host.advance(20);
    g.next_id(shard(1)).unwrap();
    host.wall_offset.set(host.wall_offset.get() - 5_000);
    host.advance(20);
    g.next_id(shard(1)).unwrap();
    assert_eq!(
        host.events.borrow().as_slice(),
        [
            Event::ClockSteppedBack {
                ms: 5_000,
                behind_ms: 5_000
            },
            Event::RunningAhead { behind_ms: 5_000 }
        ]
    );
    host.wall_offset.set(host.wall_offset.get() - 5_000);
    host.advance(20);
    g.next_id(shard(1)).unwrap();
    assert_eq!(
        host.events.borrow().len(),
        2,
        "at most one of each a minute"
    );
    host.advance(REPORT_EVERY_MS);
    g.next_id(shard(1)).unwrap();
    assert_eq!(
        host.events.borrow().len(),
        3,
        "the gap is still there a minute later"
    );
    assert!(matches!(
        host.events.borrow()[2],
        Event::RunningAhead { .. }
    ));
}

/// A host whose wall-clock read takes long (the process is descheduled in the middle).
struct Descheduled(Host);

impl Clock for Descheduled {
    fn monotonic_ms(&self) -> i64 {
        self.0.monotonic_ms()
    }
    fn wall_ms(&self) -> i64 {
        let wall = self.0.wall_ms();
        self.0.advance(50);
        wall
    }
}
impl LeaseStore for Descheduled {
    type Error = DiskFull;
    type Guard = Writer;
    fn try_lock(&self) -> Option<Writer> {
        self.0.try_lock()
    }
    fn persist(&self, record: &Record) -> Result<(), DiskFull> {
        self.0.persist(record)
    }
}
impl Wait for Descheduled {
    fn wait(&self, ms: u64) -> Result<(), Interrupted> {
        self.0.wait(ms)
    }
}
impl Report for Descheduled {
    fn report(&self, event: Event) {
        self.0.report(event)
    }
}

#[test]
fn a_descheduled_comparer_neither_moves_the_base_ahead_nor_reports_a_step() {
    let host = Descheduled(Host::new());
    let shared = host.0.restart();
    let g = Generator::new(&shared, &host, EPOCH, LEAD);
    for _ in 0..20 {
        g.next_id(shard(1)).unwrap();
        host.0.advance(11);
    }
    let (base, _) = shared.time_base.read(host.0.mono.get());
    assert!(
        base <= host.0.wall_ms(),
        "the base did not run ahead of the wall clock: {}",
        base - host.0.wall_ms()
    );
    assert!(host.0.events.borrow().is_empty());
    assert_eq!(shared.time_base.steps_back(), 0);
}

#[test]
fn replay_raises_the_lease_the_base_and_every_shard() {
    let host = Host::new();
    let shared = host.restart();
    let g = generator(&shared, &host);
    g.next_id(shard(1)).unwrap();

    // A record from the old primary, whose time base ran a minute ahead of this clock.
    let replayed = Record::extended(EPOCH, T0 + 60_000, (T0 + 60_500 - EPOCH) as u64);
    shared.replay(&replayed, EPOCH, host.now());
    let end_ms = replayed.end_ms_under(EPOCH).unwrap();
    assert_eq!(shared.lease.end_ms(), end_ms);
    assert!(shared.time_base.read(host.mono.get()).0 >= T0 + 60_000);
    assert_eq!(shared.lease.persisted_base_unix_ms(), T0 + 60_000);
    for n in [0, 1, 8191] {
        assert_eq!(
            shared.shard(shard(n)).last().0,
            stamp(end_ms - 1, MAX_SEQ as u64)
        );
    }
    let g = Generator::new(&shared, &host, EPOCH, 10 * LEASE_WINDOW_MS);
    assert_eq!(ms_of(g.next_id(shard(1)).unwrap()), end_ms);

    // An older record changes nothing.
    shared.replay(&Record::extended(EPOCH, T0, 5), EPOCH, host.now());
    assert!(shared.lease.end_ms() > end_ms);

    // A record from an epoch earlier than this server's stops generation: under this server's
    // later epoch, new IDs would sort below the ones the record covers.
    shared.replay(&Record::extended(EPOCH - 1, T0, 5), EPOCH, host.now());
    assert_eq!(
        shared.lease.not_generating(),
        Some(NotGenerating::EpochMovedLater {
            recorded_epoch_unix_ms: EPOCH - 1
        })
    );
}

#[test]
fn a_server_that_refuses_explains_why_and_issues_nothing() {
    let host = Host::new();
    for (start, why) in [
        (
            Start::EpochMovedLater {
                recorded_epoch_unix_ms: EPOCH - 5,
            },
            NotGenerating::EpochMovedLater {
                recorded_epoch_unix_ms: EPOCH - 5,
            },
        ),
        (
            Start::Unreadable {
                reason: crate::lease::LeaseError::ChecksumMismatch,
            },
            NotGenerating::StateUnreadable,
        ),
        (
            Start::Stale {
                sealed_at_lsn: None,
                checkpoint_lsn: 8,
            },
            NotGenerating::StateStale,
        ),
    ] {
        let shared = Shared::start(host.now(), &start);
        assert_eq!(shared.lease.not_generating(), Some(why));
        assert_eq!(
            generator(&shared, &host).next_id(shard(1)),
            Err(Refused::NotGenerating(why))
        );
        assert!(host.disk.borrow().is_none(), "nothing was written");
    }
}

fn parts(id: i64) -> Parts {
    decompose(id).unwrap()
}

#[test]
fn resuming_above_an_id_from_elsewhere_needs_no_waiting_and_survives_a_restart() {
    // Another server's clock runs ten minutes ahead of this one; its last ID for shard 5 must
    // be below this server's next ones, at once.
    let host = Host::new();
    let shared = host.restart();
    let g = generator(&shared, &host);
    let theirs = crate::layout::compose(now_ms(&host) + 600_000, 5, 77).unwrap();
    let floor = g.resume_above(parts(theirs)).unwrap();
    assert_eq!(floor, EPOCH + ms_of(theirs) as i64 + 1);
    assert!(
        shared.lease.end_ms() > (floor - EPOCH) as u64,
        "the durable lease covers the new floor"
    );
    let mine = g.next_id(shard(5)).unwrap();
    assert_eq!(
        host.persisted.borrow().len(),
        1,
        "the next ID needed no second lease write"
    );
    assert!(mine > theirs);
    let other = g.next_id(shard(6)).unwrap();
    assert!(
        ms_of(other) > ms_of(theirs),
        "every shard resumes after its millisecond"
    );
    assert!(host.waited.borrow().is_empty(), "no waiting on clocks");

    // Persisted before returning: a restart with the clock still behind resumes above it.
    let shared = host.restart();
    let g = Generator::new(&shared, &host, EPOCH, 10 * LEASE_WINDOW_MS);
    assert!(g.next_id(shard(5)).unwrap() > mine);
    assert!(shared.time_base.read(host.mono.get()).0 >= floor);
}

#[test]
fn resuming_takes_back_a_released_shard_and_keeps_its_own_order() {
    let host = Host::new();
    let shared = host.restart();
    let g = generator(&shared, &host);
    let last = g.next_id(shard(5)).unwrap();
    g.release(shard(5));
    let older = crate::layout::compose(ms_of(last) - 100, 5, 0).unwrap();
    g.resume_above(parts(older)).unwrap();
    assert!(g.next_id(shard(5)).unwrap() > last);
}

#[test]
fn resuming_refuses_a_typo_that_would_spend_the_id_space() {
    let host = Host::new();
    let shared = host.restart();
    let g = generator(&shared, &host);
    let far = crate::layout::compose(now_ms(&host) + 2 * MAX_RESUME_AHEAD_MS as u64, 0, 0).unwrap();
    assert!(matches!(
        g.resume_above(parts(far)),
        Err(Refused::TooFarAhead { .. })
    ));
    assert!(host.disk.borrow().is_none());
    // The floor is the millisecond after the ID's: exactly a day ahead is allowed, a day and a
    // millisecond is not.
    let over = crate::layout::compose(now_ms(&host) + MAX_RESUME_AHEAD_MS as u64, 0, 0).unwrap();
    assert!(matches!(
        g.resume_above(parts(over)),
        Err(Refused::TooFarAhead { .. })
    ));
    let limit =
        crate::layout::compose(now_ms(&host) + MAX_RESUME_AHEAD_MS as u64 - 1, 0, 0).unwrap();
    assert!(g.resume_above(parts(limit)).is_ok());
}

#[test]
fn resuming_is_the_way_out_of_an_untrusted_file_but_not_of_a_later_epoch() {
    let host = Host::new();
    let stale = Shared::start(
        host.now(),
        &Start::Stale {
            sealed_at_lsn: None,
            checkpoint_lsn: 1,
        },
    );
    let g = generator(&stale, &host);
    let above = crate::layout::compose(now_ms(&host), 3, 3).unwrap();
    g.resume_above(parts(above)).unwrap();
    assert_eq!(stale.lease.not_generating(), None);
    assert!(g.next_id(shard(3)).unwrap() > above);

    let later = Shared::start(
        host.now(),
        &Start::EpochMovedLater {
            recorded_epoch_unix_ms: EPOCH - 1,
        },
    );
    assert!(matches!(
        generator(&later, &host).resume_above(parts(above)),
        Err(Refused::NotGenerating(
            NotGenerating::EpochMovedLater { .. }
        ))
    ));
}

#[test]
fn a_replayed_record_resumes_like_the_file_would() {
    let record = Record::extended(EPOCH, T0, 1234);
    assert_eq!(
        resume_from(&record, EPOCH),
        Start::Resume {
            base_floor_unix_ms: T0,
            lease_end_ms: 1234 + LEASE_WINDOW_MS + 1
        }
    );
}

#[test]
fn every_shard_has_its_own_cell_in_shard_order() {
    let host = Host::new();
    let shared = host.restart();
    assert_eq!(shared.shards().len(), crate::layout::SHARD_COUNT);
    generator(&shared, &host).next_id(shard(4097)).unwrap();
    assert_eq!(shared.shards()[4097].issued(), 1);
    assert!(std::ptr::eq(
        &shared.shards()[4097],
        shared.shard(shard(4097))
    ));
    assert_eq!(shared.shards()[4096].issued(), 0);
}

#[test]
fn running_ahead_is_reported_only_past_the_lead() {
    for (behind, reported) in [(LEAD as i64, false), (LEAD as i64 + 1, true)] {
        let host = Host::new();
        let shared = host.restart();
        let g = generator(&shared, &host);
        g.next_id(shard(1)).unwrap();
        host.wall_offset.set(host.wall_offset.get() - behind);
        host.advance(20);
        g.next_id(shard(1)).unwrap();
        let ahead = host
            .events
            .borrow()
            .iter()
            .any(|e| matches!(e, Event::RunningAhead { .. }));
        assert_eq!(ahead, reported, "the wall clock {behind} ms behind");
    }
}

#[test]
fn every_wait_at_the_lead_is_counted() {
    let host = Host::new();
    let shared = host.restart();
    let g = Generator::new(&shared, &host, EPOCH, 0);
    g.next_id(shard(9)).unwrap();
    host.waited.borrow_mut().clear();
    // With no lead, a millisecond holds 1,024 IDs: 3,072 more from a frozen clock wait three
    // times, a millisecond each.
    for _ in 0..3 * 1024 {
        g.next_id(shard(9)).unwrap();
    }
    assert_eq!(host.waited.borrow().as_slice(), [1, 1, 1]);
    assert_eq!(shared.shard(shard(9)).waits(), 3);
    assert_eq!(shared.shard(shard(9)).issued(), 3 * 1024 + 1);
}
