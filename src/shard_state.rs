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
//! Two bounds apply, and a stamp past either is refused before anything is consumed:
//! - the lead: borrowing runs the shard ahead of the time base; a stamp whose millisecond would be
//!   more than `max_lead_ms` ahead of `now_ms` is refused with how long to wait;
//! - the lease: no stamp at or past the durably recorded end of the lease, `lease_end_ms`, may be
//!   handed out, so that a restart can never reissue it; the caller extends the lease and retries.

use crate::layout::{stamp, stamp_ms, MAX_MS};
use std::sync::atomic::{AtomicU64, Ordering};

/// Why no stamp was issued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The shard is already `max_lead_ms` ahead of now; wait at least this many milliseconds.
    Ahead { wait_ms: u64 },
    /// The next stamp's millisecond is not covered by the lease; extend it past `needed_ms`.
    BeyondLease { needed_ms: u64 },
    /// The next stamp would need 2^40 ms or more, which would set the sign bit.
    Exhausted,
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
    let mut last = cell.load(Ordering::Relaxed);
    loop {
        // `last` is at most MAX_STAMP < 2^50, so adding one cannot overflow.
        let next = (last + 1).max(floor);
        let next_ms = stamp_ms(next);
        if next_ms > MAX_MS {
            return Err(Refusal::Exhausted);
        }
        if next_ms > limit_ms {
            return Err(Refusal::Ahead {
                wait_ms: next_ms - limit_ms,
            });
        }
        if next_ms >= lease_end_ms {
            return Err(Refusal::BeyondLease { needed_ms: next_ms });
        }
        match cell.compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return Ok(next),
            Err(current) => last = current,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{MAX_STAMP, SEQ_BITS};
    use proptest::prelude::*;
    use std::sync::Arc;
    use std::thread;

    const NO_LEASE: u64 = u64::MAX;

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
