//! The wall clock, read once per generated ID.

use std::time::{SystemTime, UNIX_EPOCH};

/// The wall clock in Unix milliseconds. One `clock_gettime(CLOCK_REALTIME)` through the vDSO:
/// no system call, no allocation.
pub fn unix_ms_now() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(since) => since.as_millis() as i64,
        Err(before) => -(before.duration().as_millis() as i64),
    }
}
