//! `snowid_next(shard)`: the hot path.
//!
//! One clock read, one load and one CAS on the shard's stamp, and the arithmetic. No lock, no
//! allocation, no logging. Only when a shard has run `snowid.max_lead` ahead of the clock does a
//! caller leave the fast path, to wait on its latch.

use crate::layout::{id_from_stamp, Shard};
use crate::shard_state::{issue, Refusal};
use crate::{clock, errors, gucs, shmem};
use pgrx::pg_sys;
use pgrx::prelude::*;

/// The next ID for a shard: greater than every ID issued for that shard before it.
#[pg_extern(volatile, strict, parallel_safe)]
fn snowid_next(shard: i32) -> i64 {
    let Some(shard) = Shard::new(shard) else {
        errors::shard_out_of_range(shard)
    };
    let Some(cell) = shmem::stamp_cell(shard) else {
        errors::not_preloaded()
    };
    let epoch_ms = gucs::epoch_unix_ms();
    loop {
        let now_unix_ms = clock::unix_ms_now();
        let Ok(now_ms) = u64::try_from(now_unix_ms - epoch_ms) else {
            errors::clock_before_epoch(epoch_ms, now_unix_ms)
        };
        match issue(cell, now_ms, gucs::max_lead_ms()) {
            Ok(stamp) => return id_from_stamp(stamp, shard),
            Err(Refusal::Ahead { wait_ms }) => wait_for_clock(wait_ms),
            Err(Refusal::Exhausted) => errors::exhausted(epoch_ms),
        }
    }
}

/// Sleeps on the process latch until the clock may have caught up, honouring query cancel,
/// `statement_timeout` and postmaster death.
#[cold]
fn wait_for_clock(wait_ms: u64) {
    let flags = pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH;
    // SAFETY: MyLatch is set up for every backend and worker before it runs SQL functions.
    unsafe {
        pg_sys::WaitLatch(
            pg_sys::MyLatch,
            flags as i32,
            wait_ms.clamp(1, 1000) as std::ffi::c_long,
            pg_sys::PG_WAIT_EXTENSION,
        );
        pg_sys::ResetLatch(pg_sys::MyLatch);
    }
    pg_sys::check_for_interrupts!();
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    #[pg_test]
    fn ids_from_one_statement_strictly_increase() {
        let increasing = Spi::get_one::<bool>(
            "SELECT bool_and(id > prev) FROM (
                 SELECT id, lag(id) OVER (ORDER BY n) AS prev
                 FROM (SELECT n, snowid_next(5) AS id FROM generate_series(1, 20000) n) s
             ) t WHERE prev IS NOT NULL",
        );
        assert_eq!(increasing, Ok(Some(true)));
    }

    #[pg_test]
    fn more_than_1024_ids_in_a_millisecond_never_repeat() {
        let distinct = Spi::get_one::<i64>(
            "SELECT count(DISTINCT snowid_next(9)) FROM generate_series(1, 30000)",
        );
        assert_eq!(distinct, Ok(Some(30000)));
    }

    #[pg_test]
    fn the_shard_lands_in_its_field() {
        for shard in [0, 1, 5, 8191] {
            let decoded =
                Spi::get_one::<i32>(&format!("SELECT snowid_shard(snowid_next({shard}))"));
            assert_eq!(decoded, Ok(Some(shard)));
        }
    }

    #[pg_test]
    fn ids_are_positive_and_dated_now() {
        let close = Spi::get_one::<bool>(
            "SELECT id > 0 AND abs(extract(epoch FROM snowid_timestamp(id) - clock_timestamp())) < 5
             FROM snowid_next(3) AS id",
        );
        assert_eq!(close, Ok(Some(true)));
    }

    #[pg_test(error = "snowid shard 8192 is out of range")]
    fn shard_8192_is_refused() {
        Spi::get_one::<i64>("SELECT snowid_next(8192)").unwrap();
    }

    #[pg_test(error = "snowid shard -1 is out of range")]
    fn shard_minus_one_is_refused() {
        Spi::get_one::<i64>("SELECT snowid_next(-1)").unwrap();
    }
}
