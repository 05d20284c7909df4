//! The issuing protocol: how a caller gets the next ID for a shard, how the shared state comes
//! from the durable one, and how the durable state changes.
//!
//! The fast path, [`Shared::try_issue`], is one monotonic clock read (the caller's), the time
//! base (two loads), the lease end (one load), the shard's stamp (one load) and one CAS, plus
//! the arithmetic. It never writes anything but the stamp, never waits and never fails: anything
//! out of the ordinary sends the caller to [`Generator::next_id`], the slow path, which:
//! - compares the time base with the wall clock when that is due (every 10 ms, one caller);
//! - loads the durable state into shared memory, once after every start or crash restart;
//! - refuses while the state is fenced, or when `snowid.epoch` is later than the earliest epoch;
//! - makes a longer lease durable when the next stamp is not covered, or waits interruptibly
//!   for the caller already doing so;
//! - waits for the clock when the shard has run `max_lead` ahead of the time base.
//!
//! A caller whose stamp comes within [`RENEW_AHEAD_MS`] of the lease's end renews the lease
//! ([`Generator::renew_ahead`]) if nobody else is, so that the others never wait for the write.
//!
//! The first load after a start is [`crate::startup`]'s plan, carried out by the host: it
//! creates the state where it must, records a promotion (a new WAL timeline, with the margin
//! [`Generator::with_promotion_margin`] sets), and says whether the server generates.
//!
//! Changes of the durable state (a lease, a release, a resume, the state's creation) are made by
//! the holder of the writer's claim, one shared atomic taken by CAS: a caller that finds it held
//! never blocks on it. A change is made durable ([`DurableStore::persist`]) before it is
//! published to other callers, and no stamp past the published lease is ever issued. A change
//! that only restricts (a resume's higher floor, a fence lifted, a shard taken back, a release)
//! is in force here as soon as it is flushed, before the wait for the synchronous standbys, as a
//! commit is: a cancelled wait cannot undo it. A lease, which lets IDs be handed out, is
//! published only once the standbys have it. After a
//! failed change the claim backs off (10 ms, doubling to a second), so that a failing store is
//! tried by one caller at a time, not by every caller.

use crate::clock::{self, Sample};
use crate::durable::{Change, DurableState, Fence};
use crate::host::{Clock, DurableStore, Event, Interrupted, Report, Wait};
#[cfg(not(loom))]
use crate::layout::SHARD_COUNT;
use crate::layout::{id_from_stamp, stamp, stamp_ms, Parts, Shard, MAX_MS, MAX_SEQ, SEQ_BITS};
use crate::shard_state::{self, issue, Refusal, ShardCell, ShardTally};
pub use crate::startup::Status;
use crate::startup::{self, Context, Occasion, Write};
use crate::sync::{AtomicI64, AtomicU32, AtomicU64, AtomicU8};
use crate::time_base::{Forward, TimeBase};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// How much time beyond what is needed one lease covers.
pub const LEASE_WINDOW_MS: u64 = 1500;
/// How long before the lease runs out an issuing caller renews it, so that the others never wait
/// for the write. Under sustained load that is one write per `LEASE_WINDOW_MS - RENEW_AHEAD_MS`.
pub const RENEW_AHEAD_MS: u64 = 500;
const _: () = assert!(RENEW_AHEAD_MS < LEASE_WINDOW_MS);
/// At most one report of each kind of [`Event`] per this many milliseconds.
pub const REPORT_EVERY_MS: i64 = 60_000;
/// How far ahead of the clock [`Generator::resume_above`] may move the time base: far enough for
/// a server whose clock is hours behind, not so far that a typo spends years of the ID space.
pub const MAX_RESUME_AHEAD_MS: i64 = 86_400_000;
/// The back-off after a failed change: the first, and the longest.
pub const BACKOFF_FIRST_MS: i64 = 10;
pub const BACKOFF_MAX_MS: i64 = 1000;
/// The longest a caller sleeps for the writer's claim before looking again, should a wake-up be
/// missed (its holder is woken for, not polled).
pub const CLAIM_WAIT_MS: u64 = 10;
/// The exclusive upper bound of every lease: the first millisecond that would set the sign bit.
const END_OF_TIME_MS: u64 = MAX_MS + 1;
/// Shard cells in the shared state: one per shard, or a handful in the model-checked tests,
/// whose every atomic loom tracks.
#[cfg(not(loom))]
const CELLS: usize = SHARD_COUNT;
#[cfg(loom)]
const CELLS: usize = 4;
const _: () = assert!(CELLS.is_power_of_two());

/// Why no ID was issued, or no change made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused<E> {
    /// The next ID would need the sign bit.
    Exhausted,
    /// The time base reads earlier than the epoch.
    ClockBeforeEpoch { base_unix_ms: i64 },
    /// The shard was released, here or on the server whose WAL this one replayed.
    Released,
    /// Generation is fenced until a superuser resumes above the IDs already issued.
    Fenced(Fence),
    /// `snowid.epoch` is later than the earliest epoch IDs were issued under.
    EpochMovedLater { recorded_epoch_unix_ms: i64 },
    /// The durable state could not be read or changed, so nothing depending on it was done.
    Persist(E),
    /// A wait was cancelled: by a host whose waits return when cancelled (the simulated ones of
    /// the tests). PostgreSQL's waits raise the cancel's own error instead, so inside the
    /// extension this is never returned.
    Interrupted,
    /// A resume would move the time base more than [`MAX_RESUME_AHEAD_MS`] past the clock.
    TooFarAhead {
        floor_unix_ms: i64,
        now_unix_ms: i64,
    },
    /// A take-back of a shard that this server has not released.
    NotReleased,
}

impl<E> From<Interrupted> for Refused<E> {
    fn from(_: Interrupted) -> Self {
        Refused::Interrupted
    }
}

impl Status {
    /// Why a server in this status refuses to generate or release, if it does.
    pub fn refusal<E>(self) -> Option<Refused<E>> {
        match self {
            Status::Fenced(fence) => Some(Refused::Fenced(fence)),
            Status::EpochMovedLater {
                recorded_epoch_unix_ms,
            } => Some(Refused::EpochMovedLater {
                recorded_epoch_unix_ms,
            }),
            Status::Generating | Status::NotLoaded => None,
        }
    }
}

const NOT_LOADED: u8 = 0;
const GENERATING: u8 = 1;
const FENCED: u8 = 2;
const EPOCH_MOVED_LATER: u8 = 3;

/// The lease as generation sees it: the first two fields are read on every call, the rest
/// only on the slow path.
#[repr(C, align(64))]
pub struct LeaseState {
    /// Exclusive end of the durable lease, as a time field (0: nothing may be issued).
    end_ms: AtomicU64,
    /// An issued stamp at or past this millisecond renews the lease.
    renew_at_ms: AtomicU64,
    status: AtomicU8,
    fence: AtomicU8,
    recorded_epoch_unix_ms: AtomicI64,
    /// The highest time base recorded with a lease, in Unix milliseconds.
    persisted_base_unix_ms: AtomicI64,
    /// Changes made durable since start (the state's creation aside).
    writes: AtomicU64,
}

impl LeaseState {
    /// Exclusive end of the durable lease, as a time field (0: none). An acquire load, paired
    /// with the release in [`LeaseState::publish`]: whoever sees a lease also sees what was
    /// done before it was published (shards seeded, the time base raised).
    #[inline]
    pub fn end_ms(&self) -> u64 {
        self.end_ms.load(Acquire)
    }

    #[inline]
    fn renew_at_ms(&self) -> u64 {
        self.renew_at_ms.load(Relaxed)
    }

    /// Publishes a lease that is already durable. Never lowers anything.
    fn publish(&self, end_ms: u64, base_unix_ms: i64) {
        let end_ms = end_ms.min(END_OF_TIME_MS);
        self.persisted_base_unix_ms.fetch_max(base_unix_ms, Relaxed);
        self.renew_at_ms
            .fetch_max(end_ms.saturating_sub(RENEW_AHEAD_MS), Relaxed);
        self.end_ms.fetch_max(end_ms, Release);
    }

    /// Whether the server generates. An acquire load, paired with the release in
    /// `set_status`.
    pub fn status(&self) -> Status {
        match self.status.load(Acquire) {
            NOT_LOADED => Status::NotLoaded,
            GENERATING => Status::Generating,
            FENCED => Status::Fenced(
                Fence::from_code(self.fence.load(Relaxed)).unwrap_or(Fence::Unreadable),
            ),
            _ => Status::EpochMovedLater {
                recorded_epoch_unix_ms: self.recorded_epoch_unix_ms.load(Relaxed),
            },
        }
    }

    fn set_status(&self, status: Status) {
        let code = match status {
            Status::NotLoaded => NOT_LOADED,
            Status::Generating => GENERATING,
            Status::Fenced(fence) => {
                self.fence.store(fence.code(), Relaxed);
                FENCED
            }
            Status::EpochMovedLater {
                recorded_epoch_unix_ms,
            } => {
                self.recorded_epoch_unix_ms
                    .store(recorded_epoch_unix_ms, Relaxed);
                EPOCH_MOVED_LATER
            }
        };
        self.status.store(code, Release);
    }

    /// The highest time base recorded with a lease, in Unix milliseconds.
    pub fn persisted_base_unix_ms(&self) -> i64 {
        self.persisted_base_unix_ms.load(Relaxed)
    }

    /// Changes made durable since start.
    pub fn writes(&self) -> u64 {
        self.writes.load(Relaxed)
    }
}

/// The right to change the durable state, taken by CAS and never waited on while held.
#[repr(C, align(64))]
struct WriterClaim {
    /// The holder's [`DurableStore::claimer`] number, or 0.
    owner: AtomicU32,
    /// Failed changes in a row, and the monotonic time before which nobody tries again.
    failures: AtomicU32,
    retry_at_ms: AtomicI64,
}

/// The claim, held: released when dropped, and its waiters woken. Dropped while unwinding from
/// an error (PostgreSQL raises errors through it), it counts as a failure.
pub struct Claimed<'a, H: Wait> {
    claim: &'a WriterClaim,
    host: &'a H,
    who: u32,
    mono_ms: i64,
}

impl WriterClaim {
    /// Takes the claim, with acquire ordering: the holder sees everything earlier holders did.
    fn try_take<'a, H: Wait>(
        &'a self,
        host: &'a H,
        who: u32,
        mono_ms: i64,
    ) -> Option<Claimed<'a, H>> {
        self.owner
            .compare_exchange(0, who, Acquire, Relaxed)
            .ok()
            .map(|_| Claimed {
                claim: self,
                host,
                who,
                mono_ms,
            })
    }

    /// How long until the next try after a failure, if that is in the future.
    fn backing_off(&self, mono_ms: i64) -> Option<u64> {
        let wait = self.retry_at_ms.load(Relaxed) - mono_ms;
        (wait > 0).then_some(wait as u64)
    }

    fn failed(&self, mono_ms: i64) {
        let failures = self.failures.fetch_add(1, Relaxed).min(16);
        let backoff = (BACKOFF_FIRST_MS << failures).min(BACKOFF_MAX_MS);
        self.retry_at_ms.store(mono_ms + backoff, Relaxed);
    }

    fn succeeded(&self) {
        self.failures.store(0, Relaxed);
        self.retry_at_ms.store(0, Relaxed);
    }
}

impl<H: Wait> Drop for Claimed<'_, H> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.claim.failed(self.mono_ms);
        }
        let _ = self
            .claim
            .owner
            .compare_exchange(self.who, 0, Release, Relaxed);
        self.host.claim_given_back();
    }
}

/// Rate limits for reports, in monotonic milliseconds of the last one of each kind.
#[repr(C, align(64))]
struct ReportClock {
    last: [AtomicI64; 4],
}

impl ReportClock {
    fn restart(&self) {
        for last in &self.last {
            last.store(i64::MIN / 2, Relaxed);
        }
    }

    /// Whether an event may be reported now: at most one of each kind per [`REPORT_EVERY_MS`].
    fn allow(&self, event: &Event, mono_ms: i64) -> bool {
        let last = &self.last[match event {
            Event::ClockSteppedBack { .. } => 0,
            Event::RunningAhead { .. } => 1,
            Event::ForwardStepFollowed { .. } => 2,
            Event::ForwardGlitchIgnored { .. } => 3,
        }];
        let previous = last.load(Relaxed);
        mono_ms - previous >= REPORT_EVERY_MS
            && last
                .compare_exchange(previous, mono_ms, Relaxed, Relaxed)
                .is_ok()
    }
}

/// Everything snowid shares between processes: plain atomics, valid at any address, and valid
/// when all zero ("nothing loaded yet"), so a host may place it in zeroed memory and call
/// [`Shared::restart`].
#[repr(C)]
pub struct Shared {
    pub time_base: TimeBase,
    pub lease: LeaseState,
    claim: WriterClaim,
    reports: ReportClock,
    shards: [ShardCell; CELLS],
    tallies: Tallies,
}

/// The shards' tallies, starting on a cache line of their own.
#[repr(C, align(64))]
struct Tallies([ShardTally; CELLS]);

/// What the fast path did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FastIssue {
    /// Issued this ID.
    Issued(i64),
    /// Issued this ID, whose stamp is due to renew the lease: call
    /// [`Generator::renew_ahead`].
    Renew(i64),
    /// Issued nothing: call [`Generator::next_id`].
    Slow,
}

/// The stamp just below a lease end: a shard seeded with it issues next at or past the end.
fn floor_below(end_ms: u64) -> u64 {
    match end_ms {
        0 => 0,
        end => stamp(end - 1, MAX_SEQ as u64),
    }
}

impl Shared {
    /// Shared state for a server that has just started: nothing loaded, the time base at the
    /// wall clock.
    pub fn new(now: Sample) -> Shared {
        let shared = Shared {
            time_base: TimeBase::starting_at(now, i64::MIN),
            lease: LeaseState {
                end_ms: AtomicU64::new(0),
                renew_at_ms: AtomicU64::new(0),
                status: AtomicU8::new(NOT_LOADED),
                fence: AtomicU8::new(0),
                recorded_epoch_unix_ms: AtomicI64::new(0),
                persisted_base_unix_ms: AtomicI64::new(0),
                writes: AtomicU64::new(0),
            },
            claim: WriterClaim {
                owner: AtomicU32::new(0),
                failures: AtomicU32::new(0),
                retry_at_ms: AtomicI64::new(0),
            },
            reports: ReportClock {
                last: std::array::from_fn(|_| AtomicI64::new(0)),
            },
            shards: std::array::from_fn(|_| ShardCell::starting_after(0)),
            tallies: Tallies(std::array::from_fn(|_| ShardTally::new())),
        };
        shared.restart(now);
        shared
    }

    /// Sets up state whose memory is all zero, as [`Shared::new`] would leave it.
    pub fn restart(&self, now: Sample) {
        self.time_base.restart(now, i64::MIN);
        self.reports.restart();
    }

    /// A shard's state. (The mask is a no-op for a shard, and spares the fast path a bounds
    /// check that could panic.)
    #[inline]
    pub fn shard(&self, shard: Shard) -> &ShardCell {
        &self.shards[shard.index() & (CELLS - 1)]
    }

    /// Every shard's state, in shard order.
    pub fn shards(&self) -> &[ShardCell] {
        &self.shards
    }

    /// The shards released here, each with its last ID, as this server's memory holds them: the
    /// durable state's released shards, once loaded, and a release stopped but not yet durable.
    pub fn released(&self) -> crate::release_records::Released {
        crate::release_records::Released::from_pairs(self.shards.iter().enumerate().filter_map(
            |(n, cell)| {
                let (stamp, released) = cell.last();
                let shard = Shard::new(n as i32)?;
                released.then(|| (n as i32, id_from_stamp(stamp, shard)))
            },
        ))
    }

    /// Raises the floor of every shard that is not released: each one's next stamp is above
    /// `floor`. Released shards keep their release and their last stamp.
    fn raise_floors(&self, floor: u64) {
        for cell in &self.shards {
            cell.raise_floor(floor);
        }
    }

    /// What a shard has done since start.
    #[inline]
    pub fn tally(&self, shard: Shard) -> &ShardTally {
        &self.tallies.0[shard.index() & (CELLS - 1)]
    }

    /// Every shard's tally, in shard order.
    pub fn tallies(&self) -> &[ShardTally] {
        &self.tallies.0
    }

    /// The fast path: an ID for `shard` if nothing out of the ordinary stands in the way, given
    /// the monotonic clock, the epoch and the permitted lead. No waiting, no error, no write
    /// but the shard's stamp.
    #[inline(always)]
    pub fn try_issue(
        &self,
        shard: Shard,
        mono_ms: i64,
        epoch_unix_ms: i64,
        max_lead_ms: u64,
    ) -> FastIssue {
        // The lease first: its acquire load makes the time base and the shard's stamp read below
        // at least as new as when the lease was published (raised by a load or a resume).
        let end_ms = self.lease.end_ms();
        let (base_unix_ms, compare_due) = self.time_base.read(mono_ms);
        // Before the epoch, the cast wraps far past MAX_MS: one test covers both ends of time.
        let now_ms = base_unix_ms.wrapping_sub(epoch_unix_ms) as u64;
        if compare_due | (now_ms > MAX_MS) {
            return FastIssue::Slow;
        }
        // The first millisecond this call may not use: past the lead, or past the lease (whose
        // end is 0 until the durable state is loaded, and never past the end of time).
        let limit_ms = (now_ms + max_lead_ms + 1).min(end_ms);
        let cell = &self.shard(shard).stamp;
        let mut last = cell.load(Relaxed);
        loop {
            // A released shard's stamp has a bit far above every millisecond: it fails the limit.
            let next = (last + 1).max(now_ms << SEQ_BITS);
            if stamp_ms(next) >= limit_ms {
                return FastIssue::Slow;
            }
            match cell.compare_exchange_weak(last, next, Relaxed, Relaxed) {
                Ok(_) => {
                    let id = id_from_stamp(next, shard);
                    return if stamp_ms(next) >= self.lease.renew_at_ms() {
                        FastIssue::Renew(id)
                    } else {
                        FastIssue::Issued(id)
                    };
                }
                Err(current) => last = current,
            }
        }
    }

    /// Lets go of the writer's claim if `who` holds it: for a process that exits without
    /// unwinding (PostgreSQL's FATAL).
    pub fn release_claim_of(&self, who: u32) {
        let _ = self.claim.owner.compare_exchange(who, 0, Release, Relaxed);
    }

    /// Seeds the shared state from the durable one, and says whether the server generates, as
    /// start-up planned it.
    fn publish_loaded(
        &self,
        state: &DurableState,
        status: Status,
        epoch_unix_ms: i64,
        now: Sample,
    ) {
        let header = &state.header;
        if let Status::EpochMovedLater { .. } = status {
            self.lease.set_status(status);
            return;
        }
        // Every old ID's time field is below the lease end under the earliest epoch, and so
        // below it under this one, which is no later. A fenced state's epoch may be later than
        // its lease end (it was created under an earlier one, and issued nothing): the resume
        // that lifts its fence sets the floor.
        let end_ms = match header.end_ms_under(epoch_unix_ms) {
            Some(end_ms) => end_ms.min(END_OF_TIME_MS),
            None if header.fence.is_some() => 0,
            None => END_OF_TIME_MS,
        };
        self.time_base.raise_to(header.base_unix_ms, now);
        // A released shard issued nothing after its last ID, which its cell keeps, so that
        // snowid_stats() shows it; every other shard resumes past the lease.
        let floor = floor_below(end_ms);
        for (n, cell) in self.shards.iter().enumerate() {
            if header.released.contains(n) {
                let last = crate::layout::decompose(state.last_ids[n])
                    .map_or(0, |p| stamp(p.ms, p.seq as u64));
                cell.mark_released(last);
            } else {
                cell.raise_floor(floor);
            }
        }
        if status == Status::Generating {
            self.lease.publish(end_ms, header.base_unix_ms);
        }
        self.lease.set_status(status);
    }
}

/// The time field of the time base under an epoch, or, for a time base before the epoch, the
/// refusal: what the slow path, and `snowid_info()`'s outlook, decide issuing by.
pub fn time_field<E>(base_unix_ms: i64, epoch_unix_ms: i64) -> Result<u64, Refused<E>> {
    u64::try_from(base_unix_ms.saturating_sub(epoch_unix_ms))
        .map_err(|_| Refused::ClockBeforeEpoch { base_unix_ms })
}

/// A shard that no caller here issues any more, whose release is not yet durable (see
/// [`Generator::stop_issuing`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub struct Stopped {
    pub shard: Shard,
    /// The last ID issued for it here, or the floor it would have issued above.
    pub last_id: i64,
    /// Whether it was released already.
    pub was_released: bool,
}

/// The protocol, bound to the shared state, a host, and the settings of the call.
pub struct Generator<'a, H> {
    shared: &'a Shared,
    host: &'a H,
    epoch_unix_ms: i64,
    max_lead_ms: u64,
    promotion_margin_ms: Option<u64>,
}

impl<'a, H: Clock + DurableStore + Wait + Report> Generator<'a, H> {
    #[inline]
    pub fn new(shared: &'a Shared, host: &'a H, epoch_unix_ms: i64, max_lead_ms: u64) -> Self {
        Generator {
            shared,
            host,
            epoch_unix_ms,
            max_lead_ms,
            promotion_margin_ms: None,
        }
    }

    /// How far past the wall clock plus `max_lead` the time base starts on the first load on a
    /// new timeline; `None` (the default) leaves it where the state says.
    /// The shared state this generator works on.
    pub fn shared(&self) -> &'a Shared {
        self.shared
    }

    pub fn with_promotion_margin(mut self, margin_ms: Option<u64>) -> Self {
        self.promotion_margin_ms = margin_ms;
        self
    }

    /// The next ID for a shard: greater than every ID issued for that shard before it.
    pub fn next_id(&self, shard: Shard) -> Result<i64, Refused<H::Error>> {
        loop {
            let mono_ms = self.host.monotonic_ms();
            match self
                .shared
                .try_issue(shard, mono_ms, self.epoch_unix_ms, self.max_lead_ms)
            {
                FastIssue::Issued(id) => return Ok(id),
                FastIssue::Renew(id) => {
                    self.renew_ahead(id);
                    return Ok(id);
                }
                FastIssue::Slow => {}
            }
            if let Some(id) = self.slow_step(shard, mono_ms)? {
                return Ok(id);
            }
        }
    }

    /// Whatever kept the fast path from issuing: issues if it can, or deals with one obstacle
    /// and returns `None` for the caller to try again.
    #[cold]
    #[inline(never)]
    fn slow_step(&self, shard: Shard, mono_ms: i64) -> Result<Option<i64>, Refused<H::Error>> {
        if self.shared.time_base.read(mono_ms).1 {
            self.compare_with_wall_clock();
        }
        // The status first, with an acquire load: once it says "generating", the time base read
        // after it is at least as new as when that was said.
        let status = self.shared.lease.status();
        if status == Status::NotLoaded {
            self.load()?;
            return Ok(None);
        }
        if let Some(refused) = status.refusal() {
            return Err(refused);
        }
        let (base_unix_ms, _) = self.shared.time_base.read(mono_ms);
        let now_ms = time_field(base_unix_ms, self.epoch_unix_ms)?;
        let cell = self.shared.shard(shard);
        match issue(
            &cell.stamp,
            now_ms,
            self.max_lead_ms,
            self.shared.lease.end_ms(),
        ) {
            Ok(stamp) => {
                let id = id_from_stamp(stamp, shard);
                if stamp_ms(stamp) >= self.shared.lease.renew_at_ms() {
                    self.renew_ahead(id);
                }
                Ok(Some(id))
            }
            Err(Refusal::Ahead { wait_ms }) => {
                self.shared.tally(shard).count_wait();
                self.host.wait(wait_ms)?;
                Ok(None)
            }
            Err(Refusal::BeyondLease { needed_ms }) => {
                self.cover(needed_ms, mono_ms)?;
                Ok(None)
            }
            Err(Refusal::Exhausted) => Err(Refused::Exhausted),
            Err(Refusal::Released) => Err(Refused::Released),
        }
    }

    /// Lets the time base follow the wall clock, and reports (rate-limited) what it found.
    #[cold]
    #[inline(never)]
    fn compare_with_wall_clock(&self) {
        let Some(now) = clock::sample(self.host) else {
            return;
        };
        let Some(found) = self.shared.time_base.compare(now) else {
            return;
        };
        let mut events = [None, None, None];
        if found.stepped_back_ms > 0 {
            events[0] = Some(Event::ClockSteppedBack {
                ms: found.stepped_back_ms,
                behind_ms: found.wall_behind_ms,
            });
        }
        if found.wall_behind_ms > self.max_lead_ms as i64 {
            events[1] = Some(Event::RunningAhead {
                behind_ms: found.wall_behind_ms,
            });
        }
        events[2] = found.forward.map(|forward| match forward {
            Forward::Followed {
                ms,
                confirmed_after_ms,
            } => Event::ForwardStepFollowed {
                ms,
                confirmed_after_ms,
            },
            Forward::Ignored { ms, lasted_ms } => Event::ForwardGlitchIgnored { ms, lasted_ms },
        });
        for event in events.into_iter().flatten() {
            if self.shared.reports.allow(&event, now.mono_ms) {
                self.host.report(event);
            }
        }
    }

    /// The writer's claim, if it is free.
    fn try_claim(&self) -> Option<Claimed<'a, H>> {
        self.shared
            .claim
            .try_take(self.host, self.host.claimer(), self.host.monotonic_ms())
    }

    /// The writer's claim, waiting (interruptibly) while another caller holds it.
    fn claim(&self) -> Result<Claimed<'a, H>, Refused<H::Error>> {
        loop {
            match self.try_claim() {
                Some(claimed) => return Ok(claimed),
                None => self.host.wait_for_claim(CLAIM_WAIT_MS)?,
            }
        }
    }

    /// Makes a change durable, counting the outcome for the back-off; `in_force` runs once the
    /// change holds here (see [`DurableStore::persist`]).
    fn persist(
        &self,
        change: &Change,
        claimed: &Claimed<H>,
        in_force: &mut dyn FnMut(),
    ) -> Result<(), Refused<H::Error>> {
        match self.host.persist(change, in_force) {
            Ok(()) => {
                self.shared.claim.succeeded();
                self.shared.lease.writes.fetch_add(1, Relaxed);
                Ok(())
            }
            Err(e) => {
                self.shared.claim.failed(claimed.mono_ms);
                Err(Refused::Persist(e))
            }
        }
    }

    /// Loads the durable state into shared memory (the store creates it if there is none).
    #[cold]
    fn load(&self) -> Result<(), Refused<H::Error>> {
        let claimed = self.claim()?;
        self.load_claimed(&claimed)
    }

    fn load_claimed(&self, claimed: &Claimed<H>) -> Result<(), Refused<H::Error>> {
        if self.shared.lease.status() != Status::NotLoaded {
            return Ok(());
        }
        let now = clock::sample_patiently(self.host);
        let context = Context {
            epoch_unix_ms: self.epoch_unix_ms,
            max_lead_ms: self.max_lead_ms,
            promotion_margin_ms: self.promotion_margin_ms,
            now_wall_ms: now.wall_ms,
        };
        let plan = self
            .host
            .start(Occasion::Need, &|reading| {
                startup::plan(reading, Occasion::Need, &context)
            })
            .map_err(|e| {
                self.shared.claim.failed(claimed.mono_ms);
                Refused::Persist(e)
            })?;
        if let Write::Change(_) = plan.write {
            self.shared.lease.writes.fetch_add(1, Relaxed);
        }
        self.shared
            .publish_loaded(&plan.state, plan.status, self.epoch_unix_ms, now);
        Ok(())
    }

    /// Renews the lease before it runs out, if no one else is doing so and the last attempt did
    /// not fail a moment ago. `id`'s stamp is already covered, so a failure here is left for the
    /// caller that really needs the longer lease.
    #[cold]
    #[inline(never)]
    pub fn renew_ahead(&self, id: i64) {
        let issued_ms = crate::layout::decompose(id).map_or(0, |p| p.ms);
        if self
            .shared
            .claim
            .backing_off(self.host.monotonic_ms())
            .is_some()
        {
            return;
        }
        if let Some(claimed) = self.try_claim() {
            if issued_ms >= self.shared.lease.renew_at_ms() {
                let _ = self.write_lease(issued_ms, &claimed);
            }
        }
    }

    /// Makes the lease cover `needed_ms`: writes a longer one, unless another caller already
    /// did; while another caller is writing, or after a failure, waits (interruptibly) so that
    /// the loop can retry.
    #[cold]
    #[inline(never)]
    fn cover(&self, needed_ms: u64, mono_ms: i64) -> Result<(), Refused<H::Error>> {
        if let Some(wait_ms) = self.shared.claim.backing_off(mono_ms) {
            return Ok(self.host.wait(wait_ms)?);
        }
        match self.try_claim() {
            Some(claimed) => {
                if self.shared.lease.end_ms() <= needed_ms {
                    self.write_lease(needed_ms, &claimed)?;
                }
                Ok(())
            }
            None => Ok(self.host.wait_for_claim(CLAIM_WAIT_MS)?),
        }
    }

    /// Writes a lease covering `needed_ms` and a window more: durable first, then published.
    fn write_lease(&self, needed_ms: u64, claimed: &Claimed<H>) -> Result<(), Refused<H::Error>> {
        let (base_unix_ms, _) = self.shared.time_base.read(self.host.monotonic_ms());
        let end_ms = needed_ms
            .saturating_add(LEASE_WINDOW_MS + 1)
            .min(END_OF_TIME_MS);
        self.persist(
            &Change::Lease {
                epoch_unix_ms: self.epoch_unix_ms,
                base_unix_ms,
                lease_end_unix_ms: self.epoch_unix_ms + end_ms as i64,
            },
            claimed,
            &mut || {},
        )?;
        self.shared.lease.publish(end_ms, base_unix_ms);
        Ok(())
    }

    /// Whether the server generates, loading the durable state first if it has not been since
    /// the server started.
    pub fn status(&self) -> Result<Status, Refused<H::Error>> {
        if self.shared.lease.status() == Status::NotLoaded {
            self.load()?;
        }
        Ok(self.shared.lease.status())
    }

    /// Resumes above a known ID (given decoded), for IDs issued where this server's state cannot
    /// know them (a `pg_upgrade`, a logical copy, a shard handed over from another server, a
    /// fenced state): afterwards every shard's next ID is dated after `id`'s millisecond, and
    /// the fence, if any, is lifted. Released shards stay released, whatever `id`'s shard: taking
    /// one back is [`Generator::take_back`]. The time base moves forward to the millisecond
    /// after `id`'s if it is behind it, and all of it is durable before this returns. Returns
    /// the time base's new floor in Unix milliseconds.
    pub fn resume_above(&self, above: Parts) -> Result<i64, Refused<H::Error>> {
        self.resume_above_releasing(above, &[], &mut || {})
    }

    /// [`Generator::resume_above`], releasing first, durably, each of `released` (a shard with
    /// the last ID it was released at) that is not released already, or released at a lower
    /// last ID: how a fence lifts with the releases the cluster's databases recorded, which a
    /// lost or re-created state no longer holds. A crash between those releases and the resume
    /// leaves the state fenced, with some of them recorded. `durable` is called once the resume
    /// is durable here (before the wait for the synchronous standbys).
    pub fn resume_above_releasing(
        &self,
        above: Parts,
        released: &[(Shard, i64)],
        durable: &mut dyn FnMut(),
    ) -> Result<i64, Refused<H::Error>> {
        let claimed = self.claim()?;
        self.load_claimed(&claimed)?;
        if let Status::EpochMovedLater {
            recorded_epoch_unix_ms,
        } = self.shared.lease.status()
        {
            return Err(Refused::EpochMovedLater {
                recorded_epoch_unix_ms,
            });
        }
        for &(shard, last_id) in released {
            let (last, is_released) = self.shared.shard(shard).last();
            if !is_released || id_from_stamp(last, shard) < last_id {
                self.release_claimed(shard, last_id, &claimed)?;
            }
        }
        self.raise_past(above, &claimed, false, durable)
    }

    /// Takes back `id`'s shard, released here before, above `id` (its new owner's last ID, given
    /// decoded): as [`Generator::resume_above`], and the shard issues again, above `id`. A
    /// server that refuses to generate (fenced, or under a later epoch) refuses, and so does one
    /// where the shard is not released. `durable` is called once the take-back is durable here
    /// (before the wait for the synchronous standbys).
    pub fn take_back(
        &self,
        above: Parts,
        durable: &mut dyn FnMut(),
    ) -> Result<i64, Refused<H::Error>> {
        let claimed = self.claim()?;
        self.load_claimed(&claimed)?;
        if let Some(refused) = self.shared.lease.status().refusal() {
            return Err(refused);
        }
        let Some(shard) = Shard::new(above.shard) else {
            return Err(Refused::NotReleased);
        };
        if !self.shared.shard(shard).last().1 {
            return Err(Refused::NotReleased);
        }
        self.raise_past(above, &claimed, true, durable)
    }

    /// Makes every later ID dated after `above`'s millisecond, durably: the time base and the
    /// lease past it, every shard that is not released above it, the fence lifted; with
    /// `take_back`, `above`'s shard is taken back too, above `above`. All of it but the lease is
    /// in force here once the change is flushed, before the wait for the synchronous standbys;
    /// the lease is published once they have it, so that an ID under it is never handed out
    /// before then (a caller that needs one sooner writes a lease of its own, and waits).
    fn raise_past(
        &self,
        above: Parts,
        claimed: &Claimed<H>,
        take_back: bool,
        durable: &mut dyn FnMut(),
    ) -> Result<i64, Refused<H::Error>> {
        let floor_unix_ms = self.epoch_unix_ms + above.ms as i64 + 1;
        let now = clock::sample_patiently(self.host);
        let (base_unix_ms, _) = self.shared.time_base.read(now.mono_ms);
        let now_unix_ms = base_unix_ms.max(now.wall_ms);
        if floor_unix_ms - now_unix_ms > MAX_RESUME_AHEAD_MS {
            return Err(Refused::TooFarAhead {
                floor_unix_ms,
                now_unix_ms,
            });
        }
        let new_base = base_unix_ms.max(floor_unix_ms);
        let covered_ms = ((new_base - self.epoch_unix_ms) as u64).max(self.shared.lease.end_ms());
        let end_ms = covered_ms
            .saturating_add(LEASE_WINDOW_MS + 1)
            .min(END_OF_TIME_MS);
        // Parts that came from an ID always make one again.
        let above_id = crate::layout::compose(above.ms, above.shard, above.seq).unwrap_or(0);
        let (epoch_unix_ms, lease_end_unix_ms) =
            (self.epoch_unix_ms, self.epoch_unix_ms + end_ms as i64);
        let change = match take_back {
            false => Change::Resume {
                above_id,
                epoch_unix_ms,
                base_unix_ms: new_base,
                lease_end_unix_ms,
            },
            true => Change::TakeBack {
                above_id,
                epoch_unix_ms,
                base_unix_ms: new_base,
                lease_end_unix_ms,
            },
        };
        self.persist(&change, claimed, &mut || {
            self.shared.time_base.raise_to(new_base, now);
            self.shared.raise_floors(stamp(above.ms, MAX_SEQ as u64));
            if let (true, Some(shard)) = (take_back, Shard::new(above.shard)) {
                shard_state::reclaim(
                    &self.shared.shard(shard).stamp,
                    stamp(above.ms, above.seq as u64),
                );
            }
            self.shared.lease.set_status(Status::Generating);
            durable();
        })?;
        self.shared.lease.publish(end_ms, new_base);
        Ok(new_base)
    }

    /// Releases a shard, durably: from the moment this is called no caller here issues another
    /// ID for it, including callers already running, and once it returns no server that replays
    /// this one's WAL (a standby, a restore, a promoted standby) issues it either, until it is
    /// taken back. Returns the last ID issued for it, or, if none was issued since the server
    /// started, an ID above every one issued before: the floor every shard starts from after a
    /// load, raised by every resume since. A server that cannot know its last ID
    /// (fenced, or configured with a later epoch than its IDs') refuses: the ID it would
    /// return could be below IDs it issued, and the next owner would resume below them.
    pub fn release(&self, shard: Shard) -> Result<i64, Refused<H::Error>> {
        let stopped = self.stop_issuing(shard)?;
        self.make_release_durable(&stopped)
    }

    /// The first half of a release: from now on no caller here issues an ID for `shard`,
    /// including callers already running, and the shard's last ID is known. Nothing is durable
    /// yet: [`Generator::make_release_durable`] makes it so, or [`Generator::resume_issuing`]
    /// undoes it. Between the two a host records the release where it must (see
    /// [`crate::release_records`]). A server that cannot know its last ID (fenced, or configured
    /// with a later epoch than its IDs') refuses, as [`Generator::release`] does.
    pub fn stop_issuing(&self, shard: Shard) -> Result<Stopped, Refused<H::Error>> {
        match self.status()?.refusal() {
            Some(refused) => Err(refused),
            None => {
                let cell = self.shared.shard(shard);
                let (_, was_released) = cell.last();
                let last_id = id_from_stamp(shard_state::release(&cell.stamp), shard);
                Ok(Stopped {
                    shard,
                    last_id,
                    was_released,
                })
            }
        }
    }

    /// The second half of a release: durable, so that no server that replays this one's WAL
    /// issues the shard either. Returns its last ID.
    pub fn make_release_durable(&self, stopped: &Stopped) -> Result<i64, Refused<H::Error>> {
        self.make_release_durable_then(stopped, &mut || {})
    }

    /// [`Generator::make_release_durable`], calling `durable` once the release is durable here
    /// (before the wait for the synchronous standbys): from then on nothing may undo it, whatever
    /// ends the caller.
    pub fn make_release_durable_then(
        &self,
        stopped: &Stopped,
        durable: &mut dyn FnMut(),
    ) -> Result<i64, Refused<H::Error>> {
        let claimed = self.claim()?;
        self.release_claimed_then(stopped.shard, stopped.last_id, &claimed, durable)
    }

    /// Undoes [`Generator::stop_issuing`] before the release was made durable: the shard issues
    /// again, above its last ID and the time base, unless it was released before.
    pub fn resume_issuing(&self, stopped: Stopped) {
        if !stopped.was_released {
            let floor =
                crate::layout::decompose(stopped.last_id).map_or(0, |p| stamp(p.ms, p.seq as u64));
            shard_state::reclaim(&self.shared.shard(stopped.shard).stamp, floor);
        }
    }

    /// Releases a shard with the claim held: no caller issues for it from now on, and the release
    /// is durable before this returns. Its last ID is the last one issued here, or `at_least` if
    /// that is higher (a last ID the cluster recorded before its state was lost).
    fn release_claimed(
        &self,
        shard: Shard,
        at_least: i64,
        claimed: &Claimed<H>,
    ) -> Result<i64, Refused<H::Error>> {
        self.release_claimed_then(shard, at_least, claimed, &mut || {})
    }

    /// [`Generator::release_claimed`], calling `durable` once the release holds here.
    fn release_claimed_then(
        &self,
        shard: Shard,
        at_least: i64,
        claimed: &Claimed<H>,
        durable: &mut dyn FnMut(),
    ) -> Result<i64, Refused<H::Error>> {
        let cell = self.shared.shard(shard);
        let last_id = id_from_stamp(shard_state::release(&cell.stamp), shard).max(at_least);
        if let Some(parts) = crate::layout::decompose(last_id) {
            cell.mark_released(stamp(parts.ms, parts.seq as u64));
        }
        self.persist(&Change::Release { shard, last_id }, claimed, durable)?;
        Ok(last_id)
    }
}

#[cfg(test)]
mod tests;
