//! The two clocks snowid reads, and how to read them together.
//!
//! - The wall clock (`CLOCK_REALTIME`): what IDs are dated by, but an operator, NTP or a VM resume
//!   can step it either way.
//! - The monotonic clock (`CLOCK_MONOTONIC`): never stepped, and system-wide, so comparable between
//!   processes. The time base runs on it (see [`crate::time_base`]).
//!
//! Both are read through the vDSO: no system call, no allocation.

use crate::host::Clock;

/// How far apart the two monotonic reads around a wall-clock read may be for the sample to count.
/// A caller descheduled between them (CPU throttling, VM steal) would otherwise pair a wall time
/// with a monotonic time from another moment.
pub const SAMPLE_SPREAD_MS: i64 = 2;

/// A wall-clock reading paired with the monotonic time it was taken at (at most
/// [`SAMPLE_SPREAD_MS`] after the wall clock was read, never before it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    pub mono_ms: i64,
    pub wall_ms: i64,
}

/// Reads monotonic, wall, monotonic, and keeps the pair only if the two monotonic reads are close.
/// The pair uses the later monotonic read, so the wall clock is never credited with time that had
/// not yet passed when it was read: an error, if any, makes the base lag, never lead.
pub fn sample(clock: &impl Clock) -> Option<Sample> {
    let before = clock.monotonic_ms();
    let wall_ms = clock.wall_ms();
    let mono_ms = clock.monotonic_ms();
    (mono_ms - before <= SAMPLE_SPREAD_MS).then_some(Sample { mono_ms, wall_ms })
}

/// A sample even on a machine too busy for a tight one: a few tries, then the last reading, which
/// still errs on the safe side (see [`sample`]).
pub fn sample_patiently(clock: &impl Clock) -> Sample {
    for _ in 0..9 {
        if let Some(s) = sample(clock) {
            return s;
        }
    }
    let wall_ms = clock.wall_ms();
    Sample {
        mono_ms: clock.monotonic_ms(),
        wall_ms,
    }
}

/// The machine's own clocks.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[inline]
    fn monotonic_ms(&self) -> i64 {
        read(libc::CLOCK_MONOTONIC)
    }

    #[inline]
    fn wall_ms(&self) -> i64 {
        read(libc::CLOCK_REALTIME)
    }
}

#[inline]
fn read(clock: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to, and both clocks always exist on Linux.
    #[allow(unsafe_code)]
    unsafe {
        libc::clock_gettime(clock, &mut ts)
    };
    ts.tv_sec * 1000 + ts.tv_nsec / 1_000_000
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// A clock whose monotonic time jumps by `stall` while the wall clock is being read.
    struct Descheduled {
        mono: Cell<i64>,
        stall: i64,
    }

    impl Clock for Descheduled {
        fn monotonic_ms(&self) -> i64 {
            self.mono.get()
        }
        fn wall_ms(&self) -> i64 {
            let wall = 1_000_000 + self.mono.get();
            self.mono.set(self.mono.get() + self.stall);
            wall
        }
    }

    #[test]
    fn a_tight_sample_pairs_the_wall_clock_with_the_later_monotonic_read() {
        let clock = Descheduled {
            mono: Cell::new(100),
            stall: SAMPLE_SPREAD_MS,
        };
        assert_eq!(
            sample(&clock),
            Some(Sample {
                mono_ms: 100 + SAMPLE_SPREAD_MS,
                wall_ms: 1_000_100
            })
        );
    }

    #[test]
    fn a_caller_descheduled_between_the_reads_gets_no_sample() {
        let clock = Descheduled {
            mono: Cell::new(100),
            stall: SAMPLE_SPREAD_MS + 1,
        };
        assert_eq!(sample(&clock), None);
        let s = sample_patiently(&clock);
        assert!(
            s.wall_ms - s.mono_ms <= 1_000_000,
            "the fallback never credits the wall clock with time ahead: {s:?}"
        );
    }

    #[test]
    fn the_system_clocks_move_forward_and_agree_with_std() {
        let a = SystemClock.monotonic_ms();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let b = SystemClock.monotonic_ms();
        assert!(
            b - a >= 20,
            "the monotonic clock counts milliseconds: {a} then {b}"
        );
        let std_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        assert!((SystemClock.wall_ms() - std_ms).abs() < 1000);
    }
}
