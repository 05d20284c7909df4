//! `snowid_next(shard)`: the hot path, and the cold paths it may take.
//!
//! The hot path is one monotonic clock read, a few loads from read-mostly cache lines, one CAS
//! on the shard's stamp, and the arithmetic. No lock, no allocation, no logging, no I/O. It
//! leaves for a cold path only when:
//! - a comparison of the time base with the wall clock is due (every 10 ms, one caller);
//! - the stamp would pass the persisted lease (about once a second under load): one caller
//!   writes a longer lease under [`shmem::LEASE_LOCK`];
//! - the shard has run `snowid.max_lead` ahead of the time base: the caller waits on its latch.

use crate::layout::{id_from_stamp, Shard};
use crate::lease::{self, Record};
use crate::shard_state::{issue, Refusal};
use crate::shmem::{self, SharedState, Warning};
use crate::{clock, epoch, errors, gucs};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::path::Path;

/// At most one warning of each kind per this many milliseconds.
const WARNING_EVERY_MS: i64 = 60_000;

extension_sql!(
    r#"
CREATE FUNCTION snowid_next(shard int) RETURNS bigint
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_next_v1';

COMMENT ON FUNCTION snowid_next(int) IS
    'The next ID for a shard: greater than every ID issued for that shard before it.';
"#,
    name = "snowid_next"
);

#[unsafe(no_mangle)]
#[doc(hidden)]
pub extern "C" fn pg_finfo_snowid_next_v1() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

/// `snowid_next(shard int)` as a version-1 C function written out by hand. pgrx's generic
/// argument handling cost about 8 ns a call here (a store-forwarding stall, seen with perf),
/// an eighth of snowid's whole cost over the executor floor; reading one int needs none of it.
///
/// # Safety
///
/// Called by PostgreSQL's function manager with one non-null `int4` argument (the function is
/// STRICT).
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn snowid_next_v1(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: see above; an int4 Datum holds the value in its low 32 bits.
    let shard = unsafe { (*fcinfo).args.as_slice(1)[0].value.value() } as i32;
    pg_sys::Datum::from(next_id(shard))
}

/// The next ID for a shard: greater than every ID issued for that shard before it.
pub fn next_id(shard: i32) -> i64 {
    let Some(shard) = Shard::new(shard) else {
        errors::shard_out_of_range(shard)
    };
    let Some(state) = shmem::state() else {
        errors::not_preloaded()
    };
    if !gucs::owns(shard.index()) {
        errors::shard_not_owned(shard.get());
    }
    let epoch_ms = gucs::epoch_unix_ms();
    let cell = state.shard(shard);
    loop {
        let mono_ms = clock::monotonic_ms();
        let (base_unix_ms, compare_due) = state.time_base.read(mono_ms);
        if compare_due {
            compare_with_wall_clock(state, mono_ms);
        }
        let Ok(now_ms) = u64::try_from(base_unix_ms - epoch_ms) else {
            errors::clock_before_epoch(epoch_ms, base_unix_ms)
        };
        match issue(
            &cell.stamp,
            now_ms,
            gucs::max_lead_ms(),
            state.lease.end_ms(),
        ) {
            Ok(stamp) => {
                cell.count_issued();
                return id_from_stamp(stamp, shard);
            }
            Err(Refusal::Ahead { wait_ms }) => {
                cell.count_wait();
                wait_for_clock(wait_ms)
            }
            Err(Refusal::BeyondLease { needed_ms }) => extend_lease(state, epoch_ms, needed_ms),
            Err(Refusal::Exhausted) => errors::exhausted(epoch_ms),
        }
    }
}

/// Lets the time base follow the wall clock, and warns (rate-limited) when the wall clock
/// stepped back or is further behind the time base than `snowid.max_lead`.
#[cold]
#[inline(never)]
fn compare_with_wall_clock(state: &SharedState, mono_ms: i64) {
    let Some(found) = state.time_base.compare(mono_ms, clock::unix_ms_now()) else {
        return;
    };
    if found.stepped_back_ms > 0
        && state
            .warnings
            .allow(Warning::StepBack, mono_ms, WARNING_EVERY_MS)
    {
        warning!(
            "snowid saw the system clock step back by {} ms; IDs continue from the time base, which is now {} ms ahead of the system clock",
            found.stepped_back_ms,
            found.wall_behind_ms
        );
    }
    if found.wall_behind_ms > gucs::max_lead_ms() as i64
        && state
            .warnings
            .allow(Warning::Ahead, mono_ms, WARNING_EVERY_MS)
    {
        warning!(
            "snowid time base is {} ms ahead of the system clock, more than snowid.max_lead; IDs carry timestamps from the time base until the clock catches up",
            found.wall_behind_ms
        );
    }
}

/// Makes the lease cover `needed_ms`: writes and fsyncs a longer one, unless another backend
/// already did. Only this path takes the lease lock.
#[cold]
#[inline(never)]
fn extend_lease(state: &SharedState, epoch_ms: i64, needed_ms: u64) {
    if let Some(refusal) = state.lease.refusal() {
        match refusal {
            shmem::Refusal::EpochMovedLater {
                recorded_epoch_unix_ms,
            } => errors::epoch_moved_later(epoch_ms, recorded_epoch_unix_ms),
            shmem::Refusal::StateUnreadable => errors::state_unreadable(),
        }
    }
    let _writer = shmem::LEASE_LOCK.exclusive();
    if state.lease.end_ms() > needed_ms {
        return;
    }
    let (base_unix_ms, _) = state.time_base.read(clock::monotonic_ms());
    let record = Record::extended(epoch_ms, base_unix_ms, needed_ms);
    // SAFETY: a plain read of PostgreSQL's fsync setting.
    let fsync = unsafe { pg_sys::enableFsync };
    if let Err(e) = lease::write(Path::new("."), &record, fsync) {
        errors::lease_write_failed(&e);
    }
    state.lease.publish(&record, epoch_ms);
}

/// Sleeps on the process latch until the time base may have caught up, honouring query cancel,
/// `statement_timeout` and postmaster death.
#[cold]
#[inline(never)]
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

/// Logs a warning at start-up when the time field runs out within a year.
pub fn warn_if_exhaustion_is_near(epoch_ms: i64) {
    const YEAR_MS: i64 = 365 * 86_400_000;
    let exhausted_at = epoch_ms + crate::layout::MAX_MS as i64 + 1;
    if exhausted_at - clock::unix_ms_now() < YEAR_MS {
        warning!(
            "snowid IDs run out at {}: after that snowid_next fails rather than issue negative IDs",
            epoch::format(exhausted_at)
        );
    }
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

/// In-process microbenchmarks of the hot path, without the executor around it:
/// `cargo pgrx bench pg15`. (It starts a PostgreSQL of its own as the current user, so it runs as
/// a normal user, not as root.)
#[cfg(feature = "pg_bench")]
#[pg_schema]
mod benches {
    use pgrx::prelude::*;
    use pgrx_bench::{black_box, Bencher};

    #[pg_bench]
    fn bench_next_id_across_many_shards(b: &mut Bencher) {
        let mut shard = 0;
        b.iter(move || {
            shard = (shard + 1) & 8191;
            black_box(super::next_id(shard))
        });
    }
}
