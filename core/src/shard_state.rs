//! The per-shard algorithm: one 64-bit atomic stamp per shard, advanced with compare-and-swap.
//!
//! The cell holds the last stamp issued on the shard (see [`crate::layout`]). The next stamp is
//! the larger of "one more than the last" and "sequence 0 of the current millisecond":
//!
//! - within a millisecond the sequence counts up;
//! - past 1,023 it carries into the next millisecond (a borrow), so it never wraps;
//! - when time has moved on it jumps forward to the current millisecond.
//!
//! Because every stamp comes out of one successful CAS on the cell, no two callers ever get the
//! same stamp, and each caller's stamp is greater than every stamp issued before its CAS.
//!
//! Three bounds apply, and a stamp past any of them is refused before anything is consumed:
//! - the lead: borrowing runs the shard ahead of the time base; a stamp whose millisecond would be
//!   more than `max_lead_ms` ahead of `now_ms` is refused with how long to wait;
//! - the lease: no stamp at or past the durably recorded end of the lease, `lease_end_ms`, may be
//!   handed out, so that a restart can never reissue it; the caller extends the lease and retries;
//! - the sign bit: no stamp needs 2^40 ms or more.
//!
//! A shard can also be *released* ([`release`]): a flag bit above every stamp is set in the same
//! word, so the release and every CAS are ordered, and no CAS that started before the release
//! can land after it. The flag costs the hot path nothing: a flagged word looks like a stamp past
//! the sign bit, which is already checked.

use crate::layout::{stamp, stamp_ms, MAX_MS, MAX_STAMP};
use crate::sync::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

/// The bit that marks a shard as released. Every stamp is at most [`MAX_STAMP`], below it.
pub const RELEASED: u64 = 1 << 62;
const _: () = assert!(MAX_STAMP < RELEASED);

/// Why no stamp was issued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The shard is already `max_lead_ms` ahead of now; wait at least this many milliseconds.
    Ahead { wait_ms: u64 },
    /// The next stamp's millisecond is not covered by the lease; extend it past `needed_ms`.
    BeyondLease { needed_ms: u64 },
    /// The next stamp would need 2^40 ms or more, which would set the sign bit.
    Exhausted,
    /// The shard was released on this server.
    Released,
}

/// One shard's state, alone on its cache line: the last issued stamp, the one word issuing
/// changes. What the shard has done is counted apart, in a [`ShardTally`], so that adding to the
/// counts never writes the line the next issue needs.
#[repr(C, align(64))]
pub struct ShardCell {
    /// The last stamp issued on the shard, possibly with [`RELEASED`] set.
    pub stamp: AtomicU64,
}

/// What a shard has done since start, off the hot path: the IDs issued, which each process
/// counts on its own and adds here when its transaction ends, and the waits at the lead, counted
/// on the slow path. Tallies sit together, four to a cache line, away from every stamp.
#[repr(C)]
pub struct ShardTally {
    issued: AtomicU64,
    waits: AtomicU64,
}

impl ShardTally {
    pub fn new() -> ShardTally {
        ShardTally {
            issued: AtomicU64::new(0),
            waits: AtomicU64::new(0),
        }
    }

    /// Adds IDs a process issued and counted on its own.
    pub fn add_issued(&self, count: u64) {
        self.issued.fetch_add(count, Relaxed);
    }

    /// IDs issued since start, as far as processes have added their counts.
    pub fn issued(&self) -> u64 {
        self.issued.load(Relaxed)
    }

    /// Counts a wait at the lead bound.
    pub fn count_wait(&self) {
        self.waits.fetch_add(1, Relaxed);
    }

    /// Waits at the lead bound since start.
    pub fn waits(&self) -> u64 {
        self.waits.load(Relaxed)
    }
}

impl Default for ShardTally {
    fn default() -> Self {
        ShardTally::new()
    }
}

impl ShardCell {
    /// A cell whose next stamp is above `last`.
    pub fn starting_after(last: u64) -> ShardCell {
        ShardCell {
            stamp: AtomicU64::new(last),
        }
    }

    /// The last stamp issued (or the floor the shard started from), and whether it is released.
    pub fn last(&self) -> (u64, bool) {
        let word = self.stamp.load(Relaxed);
        (word & !RELEASED, word & RELEASED != 0)
    }

    /// Raises the floor: the next stamp is above `floor`. Leaves a release in place.
    pub fn raise_floor(&self, floor: u64) {
        self.stamp.fetch_max(floor, Relaxed);
    }

    /// Marks the shard released, with its last stamp at least `last`: how a released shard
    /// comes back from the durable state.
    pub fn mark_released(&self, last: u64) {
        let mut word = self.stamp.load(Relaxed);
        loop {
            let next = (word & !RELEASED).max(last) | RELEASED;
            match self
                .stamp
                .compare_exchange_weak(word, next, Relaxed, Relaxed)
            {
                Ok(_) => return,
                Err(current) => word = current,
            }
        }
    }
}

/// Issues the next stamp on a shard's cell, given the time base in milliseconds since the epoch,
/// the permitted lead and the (exclusive) end of the lease. Lock-free: one load, then CAS until
/// it lands.
#[inline]
pub fn issue(
    cell: &AtomicU64,
    now_ms: u64,
    max_lead_ms: u64,
    lease_end_ms: u64,
) -> Result<u64, Refusal> {
    if now_ms > MAX_MS {
        return Err(Refusal::Exhausted);
    }
    let floor = stamp(now_ms, 0);
    let limit_ms = now_ms.saturating_add(max_lead_ms);
    // Relaxed is enough: uniqueness and order come from the atomicity of the read-modify-write
    // on this one location; no other memory is published through it.
    let mut last = cell.load(Relaxed);
    loop {
        // `last` is below 2^63, so adding one cannot overflow.
        let next = (last + 1).max(floor);
        let next_ms = stamp_ms(next);
        if next_ms > MAX_MS {
            return Err(if last & RELEASED != 0 {
                Refusal::Released
            } else {
                Refusal::Exhausted
            });
        }
        if next_ms > limit_ms {
            return Err(Refusal::Ahead {
                wait_ms: next_ms - limit_ms,
            });
        }
        if next_ms >= lease_end_ms {
            return Err(Refusal::BeyondLease { needed_ms: next_ms });
        }
        match cell.compare_exchange_weak(last, next, Relaxed, Relaxed) {
            Ok(_) => return Ok(next),
            Err(current) => last = current,
        }
    }
}

/// Releases a shard: from the moment this returns, [`issue`] refuses it, including for callers
/// whose CAS loop had already started. Returns the last stamp issued on it (or the floor it
/// started from, an upper bound of every stamp issued before). Releasing twice is harmless.
pub fn release(cell: &AtomicU64) -> u64 {
    cell.fetch_or(RELEASED, Relaxed) & !RELEASED
}

/// Takes a shard back after a release, with its next stamp above both its own last stamp and
/// `floor`.
pub fn reclaim(cell: &AtomicU64, floor: u64) {
    let mut word = cell.load(Relaxed);
    loop {
        let next = (word & !RELEASED).max(floor);
        match cell.compare_exchange_weak(word, next, Relaxed, Relaxed) {
            Ok(_) => return,
            Err(current) => word = current,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::SEQ_BITS;
    use proptest::prelude::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use std::thread;

    const NO_LEASE: u64 = u64::MAX;

    #[test]
    fn a_tally_adds_up_what_processes_counted() {
        // snowid_stats() reports these: issued IDs as each process flushes its own count, and
        // every wait at the lead.
        let tally = ShardTally::default();
        assert_eq!((tally.issued(), tally.waits()), (0, 0));
        tally.add_issued(3);
        tally.add_issued(1_000);
        tally.count_wait();
        assert_eq!((tally.issued(), tally.waits()), (1_003, 1));
    }

    #[test]
    fn counts_within_a_millisecond_then_borrows_the_next() {
        let cell = AtomicU64::new(0);
        let stamps: Vec<u64> = (0..1025)
            .map(|_| issue(&cell, 100, 1000, NO_LEASE).unwrap())
            .collect();
        assert_eq!(stamps[0], stamp(100, 0));
        assert_eq!(stamps[1023], stamp(100, 1023));
        assert_eq!(
            stamps[1024],
            stamp(101, 0),
            "the 1,025th ID borrows, it does not wrap"
        );
    }

    #[test]
    fn jumps_forward_when_time_moves_on() {
        let cell = AtomicU64::new(0);
        issue(&cell, 100, 1000, NO_LEASE).unwrap();
        assert_eq!(issue(&cell, 5000, 1000, NO_LEASE), Ok(stamp(5000, 0)));
    }

    #[test]
    fn never_goes_below_the_last_stamp_when_time_goes_back() {
        let cell = AtomicU64::new(0);
        let before = issue(&cell, 5000, 1000, NO_LEASE).unwrap();
        let after = issue(&cell, 4500, 1000, NO_LEASE).unwrap();
        assert!(after > before);
    }

    #[test]
    fn refuses_past_the_lead_and_consumes_nothing() {
        let cell = AtomicU64::new(stamp(110, 1023));
        assert_eq!(
            issue(&cell, 100, 10, NO_LEASE),
            Err(Refusal::Ahead { wait_ms: 1 })
        );
        assert_eq!(cell.load(Ordering::Relaxed), stamp(110, 1023));
        assert_eq!(issue(&cell, 101, 10, NO_LEASE), Ok(stamp(111, 0)));
    }

    #[test]
    fn refuses_past_the_lease_and_consumes_nothing() {
        let cell = AtomicU64::new(stamp(100, 1023));
        assert_eq!(
            issue(&cell, 100, 1000, 101),
            Err(Refusal::BeyondLease { needed_ms: 101 })
        );
        assert_eq!(cell.load(Ordering::Relaxed), stamp(100, 1023));
        assert_eq!(issue(&cell, 100, 1000, 102), Ok(stamp(101, 0)));
        assert_eq!(
            issue(&cell, 500, 1000, 102),
            Err(Refusal::BeyondLease { needed_ms: 500 })
        );
        let fresh = AtomicU64::new(0);
        assert_eq!(
            issue(&fresh, 0, 1000, 0),
            Err(Refusal::BeyondLease { needed_ms: 0 })
        );
    }

    #[test]
    fn refuses_at_the_sign_bit() {
        let cell = AtomicU64::new(MAX_STAMP);
        assert_eq!(
            issue(&cell, MAX_MS, 1000, NO_LEASE),
            Err(Refusal::Exhausted)
        );
        assert_eq!(
            issue(&AtomicU64::new(0), MAX_MS + 1, 1000, NO_LEASE),
            Err(Refusal::Exhausted)
        );
        let cell = AtomicU64::new(0);
        assert_eq!(issue(&cell, MAX_MS, 0, NO_LEASE), Ok(stamp(MAX_MS, 0)));
    }

    #[test]
    fn a_released_shard_refuses_until_reclaimed_above_its_last_stamp() {
        let cell = AtomicU64::new(0);
        let last = issue(&cell, 100, 1000, NO_LEASE).unwrap();
        assert_eq!(release(&cell), last);
        assert_eq!(release(&cell), last, "releasing twice reports the same");
        assert_eq!(issue(&cell, 100, 1000, NO_LEASE), Err(Refusal::Released));
        assert_eq!(issue(&cell, 5000, 1000, NO_LEASE), Err(Refusal::Released));

        reclaim(&cell, stamp(90, 0));
        assert_eq!(
            issue(&cell, 100, 1000, NO_LEASE),
            Ok(last + 1),
            "a lower floor keeps the shard's own last stamp"
        );
        release(&cell);
        reclaim(&cell, stamp(300, 7));
        assert_eq!(issue(&cell, 100, 1000, NO_LEASE), Ok(stamp(300, 8)));
    }

    #[test]
    fn raising_the_floor_never_lowers_it_and_keeps_a_release() {
        let cell = ShardCell::starting_after(stamp(50, 0));
        cell.raise_floor(stamp(40, 0));
        assert_eq!(cell.last(), (stamp(50, 0), false));
        cell.raise_floor(stamp(60, 3));
        assert_eq!(cell.last(), (stamp(60, 3), false));
        release(&cell.stamp);
        cell.raise_floor(stamp(70, 0));
        assert_eq!(cell.last(), (stamp(60, 3), true));

        let cell = ShardCell::starting_after(stamp(50, 0));
        cell.mark_released(stamp(40, 1));
        assert_eq!(cell.last(), (stamp(50, 0), true), "never lowered");
        cell.mark_released(stamp(90, 1));
        assert_eq!(cell.last(), (stamp(90, 1), true));
        assert_eq!(
            issue(&cell.stamp, 100, 1000, NO_LEASE),
            Err(Refusal::Released)
        );
    }

    #[test]
    fn a_release_stops_callers_racing_with_it() {
        // Two threads issue while a third releases: every stamp issued is at or below the
        // reported last one, so a successor resuming above it can never collide.
        let cell = Arc::new(AtomicU64::new(0));
        let issuers: Vec<_> = (0..2)
            .map(|_| {
                let cell = cell.clone();
                thread::spawn(move || {
                    let mut mine = Vec::new();
                    loop {
                        match issue(&cell, 7, 1 << 20, NO_LEASE) {
                            Ok(s) => mine.push(s),
                            Err(Refusal::Released) => return mine,
                            Err(other) => panic!("{other:?}"),
                        }
                    }
                })
            })
            .collect();
        // Released once a stamp is issued, however slowly the threads are scheduled.
        while cell.load(Relaxed) == 0 {
            thread::yield_now();
        }
        let last = release(&cell);
        let issued: Vec<u64> = issuers
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        assert_eq!(issued.iter().max(), Some(&last));
    }

    #[test]
    fn racing_threads_never_share_a_stamp() {
        // Four threads hammer one cell with a frozen clock and a large lead, so nearly every
        // CAS contends and borrowing runs far past one millisecond.
        let cell = Arc::new(AtomicU64::new(0));
        let per_thread = 50_000;
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let cell = Arc::clone(&cell);
                thread::spawn(move || {
                    let mine: Vec<u64> = (0..per_thread)
                        .map(|_| issue(&cell, 7, 1 << 20, NO_LEASE).unwrap())
                        .collect();
                    assert!(
                        mine.windows(2).all(|w| w[0] < w[1]),
                        "one caller's stamps increase"
                    );
                    mine
                })
            })
            .collect();
        let mut all: Vec<u64> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 4 * per_thread, "no stamp was issued twice");
        assert_eq!(
            *all.last().unwrap(),
            stamp(7, 0) + (4 * per_thread as u64) - 1,
            "no gaps"
        );
    }

    proptest! {
        /// Whatever the clock does, issued stamps strictly increase, and each stays within the
        /// lead of the clock reading it was issued at.
        #[test]
        fn stamps_increase_and_respect_the_lead(
            readings in prop::collection::vec(0u64..5_000, 1..400),
            max_lead_ms in 0u64..50,
        ) {
            let cell = AtomicU64::new(0);
            let mut last = None;
            for now in readings {
                match issue(&cell, now, max_lead_ms, NO_LEASE) {
                    Ok(s) => {
                        prop_assert!(last.is_none_or(|l| s > l));
                        prop_assert!(s >> SEQ_BITS <= now + max_lead_ms);
                        prop_assert!(s >= stamp(now, 0));
                        last = Some(s);
                    }
                    Err(Refusal::Ahead { wait_ms }) => {
                        let l = last.unwrap();
                        prop_assert_eq!(stamp_ms(l + 1), now + max_lead_ms + wait_ms);
                    }
                    Err(other) => prop_assert!(false, "unexpected {other:?}"),
                }
            }
        }
    }
}
