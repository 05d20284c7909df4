//! The two clocks snowid reads: the wall clock, and the monotonic clock the time base runs on.

use std::time::{SystemTime, UNIX_EPOCH};

/// The wall clock in Unix milliseconds. One `clock_gettime(CLOCK_REALTIME)` through the vDSO:
/// no system call, no allocation.
pub fn unix_ms_now() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(since) => since.as_millis() as i64,
        Err(before) => -(before.duration().as_millis() as i64),
    }
}

/// The monotonic clock in milliseconds: system-wide, so comparable between processes, and never
/// stepped. One `clock_gettime(CLOCK_MONOTONIC)` through the vDSO.
#[inline]
pub fn monotonic_ms() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1000 + ts.tv_nsec / 1_000_000
}
