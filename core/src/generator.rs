//! The issuing protocol: how a caller gets the next ID for a shard, and how the shared state is
//! seeded at start-up, raised by WAL replay, and raised on purpose to resume above known IDs.
//!
//! The hot path ([`Generator::next_id`]) is one monotonic clock read, a few loads from
//! read-mostly cache lines, one CAS on the shard's stamp, and the arithmetic. It leaves for a
//! cold path only when:
//! - a comparison of the time base with the wall clock is due (every 10 ms, one caller);
//! - the stamp it got is within [`RENEW_AHEAD_MS`] of the lease's end: that caller renews the
//!   lease if nobody else is already doing so, while everyone else carries on under the current
//!   one;
//! - the next stamp is not covered by the lease (the renewal fell behind, or the server just
//!   started): the caller writes the lease itself, or waits interruptibly for the one writing it;
//! - the shard has run `max_lead` ahead of the time base: the caller waits for the clock.
//!
//! The order that makes restarts safe: a lease is made durable ([`LeaseStore::persist`]) before
//! it is published to other callers, and no stamp past the published lease is ever issued.

use crate::clock::{self, Sample};
use crate::host::{Clock, Event, Interrupted, LeaseStore, Report, Wait};
use crate::layout::{id_from_stamp, stamp, stamp_ms, Parts, Shard, MAX_SEQ, SHARD_COUNT};
use crate::lease::{Record, Start, RENEW_AHEAD_MS};
use crate::shard_state::{self, issue, Refusal, ShardCell};
use crate::sync::{AtomicI64, AtomicU64, AtomicU8};
use crate::time_base::TimeBase;
use std::sync::atomic::Ordering::Relaxed;

/// At most one report of each kind of [`Event`] per this many milliseconds.
pub const REPORT_EVERY_MS: i64 = 60_000;
/// How far ahead of the clock [`Generator::resume_above`] may move the time base: far enough for
/// a server whose clock is hours behind, not so far that a typo spends years of the ID space.
pub const MAX_RESUME_AHEAD_MS: i64 = 86_400_000;

/// Why the server does not generate at all (decided at start-up or by WAL replay).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotGenerating {
    /// `snowid.epoch` is later than the epoch IDs were issued under.
    EpochMovedLater { recorded_epoch_unix_ms: i64 },
    /// The state file could not be read or trusted (the start-up log says why).
    StateUnreadable,
    /// The state file is older than the data directory.
    StateStale,
}

/// Why no ID was issued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused<E> {
    /// The next ID would need the sign bit.
    Exhausted,
    /// The time base reads earlier than the epoch.
    ClockBeforeEpoch {
        base_unix_ms: i64,
    },
    /// The shard was released on this server.
    Released,
    NotGenerating(NotGenerating),
    /// The lease could not be made durable, so nothing past the old one was issued.
    Persist(E),
    /// A wait was cancelled.
    Interrupted,
    /// A resume would move the time base more than [`MAX_RESUME_AHEAD_MS`] past the clock.
    TooFarAhead {
        floor_unix_ms: i64,
        now_unix_ms: i64,
    },
}

impl<E> From<Interrupted> for Refused<E> {
    fn from(_: Interrupted) -> Self {
        Refused::Interrupted
    }
}

/// The lease as generation sees it, on its own cache line.
#[repr(C, align(64))]
pub struct LeaseState {
    /// Exclusive end of the durable lease, in milliseconds since the epoch.
    end_ms: AtomicU64,
    /// An issued stamp at or past this millisecond renews the lease.
    renew_at_ms: AtomicU64,
    /// The highest time base recorded with a lease, in Unix milliseconds.
    persisted_base_unix_ms: AtomicI64,
    /// Leases made durable since start.
    writes: AtomicU64,
    /// 0: generate; otherwise a [`NotGenerating`] code.
    not_generating: AtomicU8,
    /// The epoch of the record that made the server refuse, for the error message.
    recorded_epoch_unix_ms: AtomicI64,
}

const GENERATING: u8 = 0;
const EPOCH_MOVED_LATER: u8 = 1;
const STATE_UNREADABLE: u8 = 2;
const STATE_STALE: u8 = 3;

impl LeaseState {
    /// Exclusive end of the durable lease, in milliseconds since the epoch (0: none yet).
    #[inline]
    pub fn end_ms(&self) -> u64 {
        self.end_ms.load(Relaxed)
    }

    #[inline]
    fn renew_at_ms(&self) -> u64 {
        self.renew_at_ms.load(Relaxed)
    }

    /// Publishes a lease that is already durable. Never lowers anything.
    fn publish(&self, end_ms: u64, base_unix_ms: i64) {
        self.persisted_base_unix_ms.fetch_max(base_unix_ms, Relaxed);
        self.renew_at_ms
            .fetch_max(end_ms.saturating_sub(RENEW_AHEAD_MS), Relaxed);
        self.end_ms.fetch_max(end_ms, Relaxed);
    }

    /// Why the server does not generate, if it does not.
    pub fn not_generating(&self) -> Option<NotGenerating> {
        match self.not_generating.load(Relaxed) {
            GENERATING => None,
            EPOCH_MOVED_LATER => Some(NotGenerating::EpochMovedLater {
                recorded_epoch_unix_ms: self.recorded_epoch_unix_ms.load(Relaxed),
            }),
            STATE_UNREADABLE => Some(NotGenerating::StateUnreadable),
            _ => Some(NotGenerating::StateStale),
        }
    }

    fn refuse(&self, why: NotGenerating) {
        let code = match why {
            NotGenerating::EpochMovedLater {
                recorded_epoch_unix_ms,
            } => {
                self.recorded_epoch_unix_ms
                    .store(recorded_epoch_unix_ms, Relaxed);
                EPOCH_MOVED_LATER
            }
            NotGenerating::StateUnreadable => STATE_UNREADABLE,
            NotGenerating::StateStale => STATE_STALE,
        };
        self.not_generating.store(code, Relaxed);
    }

    /// The highest time base recorded with a lease, in Unix milliseconds.
    pub fn persisted_base_unix_ms(&self) -> i64 {
        self.persisted_base_unix_ms.load(Relaxed)
    }

    /// Leases made durable since start.
    pub fn writes(&self) -> u64 {
        self.writes.load(Relaxed)
    }
}

/// Rate limits for reports, in monotonic milliseconds of the last one of each kind.
#[repr(C, align(64))]
struct ReportClock {
    step_back: AtomicI64,
    ahead: AtomicI64,
}

impl ReportClock {
    fn new() -> Self {
        ReportClock {
            step_back: AtomicI64::new(i64::MIN / 2),
            ahead: AtomicI64::new(i64::MIN / 2),
        }
    }

    /// Whether an event may be reported now: at most one of each kind per [`REPORT_EVERY_MS`].
    fn allow(&self, event: &Event, mono_ms: i64) -> bool {
        let last = match event {
            Event::ClockSteppedBack { .. } => &self.step_back,
            Event::RunningAhead { .. } => &self.ahead,
        };
        let previous = last.load(Relaxed);
        mono_ms - previous >= REPORT_EVERY_MS
            && last
                .compare_exchange(previous, mono_ms, Relaxed, Relaxed)
                .is_ok()
    }
}

/// Everything snowid shares between processes: plain atomics, valid at any address.
#[repr(C)]
pub struct Shared {
    pub time_base: TimeBase,
    pub lease: LeaseState,
    reports: ReportClock,
    shards: [ShardCell; SHARD_COUNT],
}

/// The stamp just below a lease end: a shard seeded with it issues next at or past the end.
fn floor_below(end_ms: u64) -> u64 {
    match end_ms {
        0 => 0,
        end => stamp(end - 1, MAX_SEQ as u64),
    }
}

impl Shared {
    /// The state for a (re)start of shared memory, from what [`crate::lease::start`] decided.
    pub fn start(now: Sample, start: &Start) -> Shared {
        let (base_floor, end_ms, not_generating) = match *start {
            Start::Resume {
                base_floor_unix_ms,
                lease_end_ms,
            } => (base_floor_unix_ms, lease_end_ms, None),
            Start::EpochMovedLater {
                recorded_epoch_unix_ms,
            } => (
                i64::MIN,
                0,
                Some(NotGenerating::EpochMovedLater {
                    recorded_epoch_unix_ms,
                }),
            ),
            Start::Unreadable { .. } => (i64::MIN, 0, Some(NotGenerating::StateUnreadable)),
            Start::Stale { .. } => (i64::MIN, 0, Some(NotGenerating::StateStale)),
        };
        let lease = LeaseState {
            end_ms: AtomicU64::new(0),
            renew_at_ms: AtomicU64::new(0),
            persisted_base_unix_ms: AtomicI64::new(0),
            writes: AtomicU64::new(0),
            not_generating: AtomicU8::new(GENERATING),
            recorded_epoch_unix_ms: AtomicI64::new(0),
        };
        lease.publish(end_ms, base_floor.max(0));
        if let Some(why) = not_generating {
            lease.refuse(why);
        }
        let floor = floor_below(end_ms);
        Shared {
            time_base: TimeBase::starting_at(now, base_floor),
            lease,
            reports: ReportClock::new(),
            shards: std::array::from_fn(|_| ShardCell::starting_after(floor)),
        }
    }

    /// A shard's state.
    #[inline]
    pub fn shard(&self, shard: Shard) -> &ShardCell {
        &self.shards[shard.index()]
    }

    /// Every shard's state, in shard order.
    pub fn shards(&self) -> &[ShardCell] {
        &self.shards
    }

    /// Applies a lease record replayed from WAL (on a standby, in crash recovery, in a restore):
    /// every shard resumes above it and the time base at or above its base, as after a restart.
    /// A record from a later epoch stops generation.
    pub fn replay(&self, record: &Record, epoch_unix_ms: i64, now: Sample) {
        match crate::lease::resume_from(record, epoch_unix_ms) {
            Start::Resume {
                base_floor_unix_ms,
                lease_end_ms,
            } => {
                self.lease.publish(lease_end_ms, base_floor_unix_ms);
                self.time_base.raise_to(base_floor_unix_ms, now);
                let floor = floor_below(lease_end_ms);
                for cell in self.shards.iter() {
                    cell.raise_floor(floor);
                }
            }
            Start::EpochMovedLater {
                recorded_epoch_unix_ms,
            } => self.lease.refuse(NotGenerating::EpochMovedLater {
                recorded_epoch_unix_ms,
            }),
            Start::Unreadable { .. } | Start::Stale { .. } => {
                self.lease.refuse(NotGenerating::StateUnreadable)
            }
        }
    }
}

/// The protocol, bound to the shared state, a host, and the settings of the call.
pub struct Generator<'a, H> {
    shared: &'a Shared,
    host: &'a H,
    epoch_unix_ms: i64,
    max_lead_ms: u64,
}

impl<'a, H: Clock + LeaseStore + Wait + Report> Generator<'a, H> {
    #[inline]
    pub fn new(shared: &'a Shared, host: &'a H, epoch_unix_ms: i64, max_lead_ms: u64) -> Self {
        Generator {
            shared,
            host,
            epoch_unix_ms,
            max_lead_ms,
        }
    }

    /// The next ID for a shard: greater than every ID issued for that shard before it.
    #[inline]
    pub fn next_id(&self, shard: Shard) -> Result<i64, Refused<H::Error>> {
        let cell = self.shared.shard(shard);
        loop {
            let mono_ms = self.host.monotonic_ms();
            let (base_unix_ms, compare_due) = self.shared.time_base.read(mono_ms);
            if compare_due {
                self.compare_with_wall_clock();
            }
            let Ok(now_ms) = u64::try_from(base_unix_ms - self.epoch_unix_ms) else {
                return Err(Refused::ClockBeforeEpoch { base_unix_ms });
            };
            match issue(
                &cell.stamp,
                now_ms,
                self.max_lead_ms,
                self.shared.lease.end_ms(),
            ) {
                Ok(stamp) => {
                    cell.count_issued();
                    let issued_ms = stamp_ms(stamp);
                    if issued_ms >= self.shared.lease.renew_at_ms() {
                        self.renew_ahead(issued_ms);
                    }
                    return Ok(id_from_stamp(stamp, shard));
                }
                Err(Refusal::Ahead { wait_ms }) => {
                    cell.count_wait();
                    self.host.wait(wait_ms)?;
                }
                Err(Refusal::BeyondLease { needed_ms }) => self.cover(needed_ms)?,
                Err(Refusal::Exhausted) => return Err(Refused::Exhausted),
                Err(Refusal::Released) => return Err(Refused::Released),
            }
        }
    }

    /// Lets the time base follow the wall clock, and reports (rate-limited) a backward step or
    /// a base further ahead of the wall clock than the permitted lead.
    #[cold]
    #[inline(never)]
    fn compare_with_wall_clock(&self) {
        let Some(now) = clock::sample(self.host) else {
            return;
        };
        let Some(found) = self.shared.time_base.compare(now) else {
            return;
        };
        let mut events = [None, None];
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
        for event in events.into_iter().flatten() {
            if self.shared.reports.allow(&event, now.mono_ms) {
                self.host.report(event);
            }
        }
    }

    /// Renews the lease before it runs out, if no one else is doing so. The stamp that triggered
    /// it is already covered, so a failure here is left for the caller that really needs the
    /// longer lease, which will meet it as an error.
    #[cold]
    #[inline(never)]
    fn renew_ahead(&self, issued_ms: u64) {
        if let Some(_writer) = self.host.try_lock() {
            if issued_ms >= self.shared.lease.renew_at_ms() {
                let _ = self.write_lease(issued_ms);
            }
        }
    }

    /// Makes the lease cover `needed_ms`: writes a longer one, unless another caller already
    /// did; while another caller is writing, waits a millisecond (interruptibly) so the loop can
    /// retry.
    #[cold]
    #[inline(never)]
    fn cover(&self, needed_ms: u64) -> Result<(), Refused<H::Error>> {
        if let Some(why) = self.shared.lease.not_generating() {
            return Err(Refused::NotGenerating(why));
        }
        match self.host.try_lock() {
            Some(_writer) => {
                if self.shared.lease.end_ms() <= needed_ms {
                    self.write_lease(needed_ms).map_err(Refused::Persist)?;
                }
                Ok(())
            }
            None => Ok(self.host.wait(1)?),
        }
    }

    /// Writes a lease covering `needed_ms` and a window more: durable first, then published.
    /// The caller holds the writer's lock.
    fn write_lease(&self, needed_ms: u64) -> Result<(), H::Error> {
        let (base_unix_ms, _) = self.shared.time_base.read(self.host.monotonic_ms());
        let record = Record::extended(self.epoch_unix_ms, base_unix_ms, needed_ms);
        self.host.persist(&record)?;
        self.publish(&record);
        Ok(())
    }

    fn publish(&self, record: &Record) {
        if let Some(end_ms) = record.end_ms_under(self.epoch_unix_ms) {
            self.shared.lease.publish(end_ms, record.base_unix_ms);
            self.shared.lease.writes.fetch_add(1, Relaxed);
        }
    }

    /// Resumes above a known ID (given decoded), for IDs issued where this server's own lease cannot know them
    /// (a `pg_upgrade`, a logical copy, a shard handed over from another server): afterwards
    /// every shard's next ID is dated after `id`'s millisecond, and `id`'s shard (taken back if
    /// it was released here) issues above `id`. The time base moves forward to the millisecond
    /// after `id`'s if it is behind it, and the new floor is made durable before this returns.
    /// A state file that could not be trusted is trusted again afterwards: this is the way out
    /// of those refusals. Returns the time base's new floor in Unix milliseconds.
    pub fn resume_above(&self, above: Parts) -> Result<i64, Refused<H::Error>> {
        if let Some(why @ NotGenerating::EpochMovedLater { .. }) =
            self.shared.lease.not_generating()
        {
            return Err(Refused::NotGenerating(why));
        }
        let floor_unix_ms = self.epoch_unix_ms + above.ms as i64 + 1;
        let writer = loop {
            match self.host.try_lock() {
                Some(writer) => break writer,
                None => self.host.wait(1)?,
            }
        };
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
        let covered_ms = (new_base - self.epoch_unix_ms) as u64;
        let record = Record::extended(
            self.epoch_unix_ms,
            new_base,
            covered_ms.max(self.shared.lease.end_ms()),
        );
        self.host.persist(&record).map_err(Refused::Persist)?;
        self.shared.time_base.raise_to(new_base, now);
        self.publish(&record);
        if let Some(shard) = Shard::new(above.shard) {
            let floor = stamp(above.ms, above.seq as u64);
            shard_state::reclaim(&self.shared.shard(shard).stamp, floor);
        }
        self.shared.lease.not_generating.store(GENERATING, Relaxed);
        drop(writer);
        Ok(new_base)
    }

    /// Releases a shard on this server: from the moment this returns, no caller issues another
    /// ID for it, including callers already running. Returns the last ID issued for it, or, if
    /// none was issued since the server started, an ID above every one issued before.
    pub fn release(&self, shard: Shard) -> i64 {
        id_from_stamp(shard_state::release(&self.shared.shard(shard).stamp), shard)
    }
}

#[cfg(test)]
mod tests;
