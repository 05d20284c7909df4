//! Generating IDs from SQL: `snowid_next` in its forms.
//!
//! The hot path, `snowid_next(shard int)`, is a version-1 C function written out by hand, in two
//! halves:
//! - the fast half runs unguarded: the shard's range, `XactReadOnly`, the owned-shard bit, one
//!   monotonic clock read, then [`Shared::try_issue`] (the lease end, the time base, one CAS)
//!   and a count in this process's memory. It cannot fail, wait, allocate or panic (every index
//!   is masked), so it needs none of pgrx's guard, which costs as much again as all of it;
//! - anything else (the durable state not loaded yet, a lease to renew or extend, a wait at the
//!   lead, a comparison with the wall clock that is due, any error) goes to the slow half,
//!   [`next_id`], behind a `#[pg_guard]` function, which checks everything again and raises the
//!   errors with their SQLSTATEs.

use crate::errors;
use crate::server::issuing::{generating_state, generator, raise_refusal};
use crate::server::{citus, counters, settings, shared_memory};
use pgrx::pg_sys;
use pgrx::prelude::*;
use snowid_core::clock::SystemClock;
use snowid_core::generator::{FastIssue, Refused};
use snowid_core::host::Clock;
use snowid_core::layout::{self, Shard};
use snowid_core::shard_set::ShardSet;

extension_sql!(
    r#"
CREATE FUNCTION snowid_next(shard int) RETURNS bigint
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_next_int4';

CREATE FUNCTION snowid_next(shard bigint) RETURNS bigint
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_next_int8';

CREATE FUNCTION snowid_next(shard double precision) RETURNS bigint
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_next_float8';

CREATE FUNCTION snowid_next() RETURNS bigint
VOLATILE PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_next_own';

COMMENT ON FUNCTION snowid_next(int) IS
    'The next ID for a shard (0 to 8191): greater than every ID issued for that shard before it.';
COMMENT ON FUNCTION snowid_next(bigint) IS
    'snowid_next for a bigint shard number, such as user_id % 8192 or a JDBC setLong parameter.';
COMMENT ON FUNCTION snowid_next(double precision) IS
    'snowid_next for any other numeric shard argument, including untyped parameters: it must hold a whole number from 0 to 8191.';
COMMENT ON FUNCTION snowid_next() IS
    'The next ID on one of this server''s own shards (snowid.shards; on Citus, its group''s own unless snowid.shards is set, less any another node claims too), the same for every session of a backend: one DEFAULT for every node of a cluster.';
"#,
    name = "snowid_next"
);

v1_function_info!(
    pg_finfo_snowid_next_int4,
    pg_finfo_snowid_next_int8,
    pg_finfo_snowid_next_float8,
    pg_finfo_snowid_next_own
);

/// The first argument of a call, as its raw Datum.
///
/// # Safety
///
/// `fcinfo` is a call with at least one non-null argument (the functions are STRICT).
#[inline(always)]
unsafe fn first_argument(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: guaranteed by the caller.
    unsafe { (*fcinfo).args.as_slice(1)[0].value }
}

/// `snowid_next(shard int)`.
///
/// # Safety
///
/// Called by PostgreSQL's function manager with one non-null `int4` argument.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn snowid_next_int4(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: see above; an int4 Datum holds the value in its low 32 bits.
    let shard = unsafe { first_argument(fcinfo) }.value() as i32;
    pg_sys::Datum::from(fast_or_slow(i64::from(shard)))
}

/// `snowid_next(shard bigint)`.
///
/// # Safety
///
/// Called by PostgreSQL's function manager with one non-null `int8` argument (by value).
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn snowid_next_int8(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: see above.
    let shard = unsafe { first_argument(fcinfo) }.value() as i64;
    pg_sys::Datum::from(fast_or_slow(shard))
}

/// `snowid_next(shard double precision)`: PostgreSQL resolves untyped parameters and other
/// numeric types to it, because `double precision` is the preferred numeric type; without it,
/// `snowid_next($1)` with an untyped parameter would be ambiguous between `int` and `bigint`.
///
/// # Safety
///
/// Called by PostgreSQL's function manager with one non-null `float8` argument (by value).
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn snowid_next_float8(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: see above; a float8 Datum holds the value's bits.
    let shard = f64::from_bits(unsafe { first_argument(fcinfo) }.value() as u64);
    if shard.fract() != 0.0 || !shard.is_finite() {
        errors::shard_not_integral(shard);
    }
    if !(0.0..=f64::from(layout::MAX_SHARD)).contains(&shard) {
        errors::shard_out_of_range(shard);
    }
    pg_sys::Datum::from(next_id(shard as i64))
}

/// `snowid_next()`: an ID on this backend's own shard.
///
/// # Safety
///
/// Called by PostgreSQL's function manager.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn snowid_next_own(
    _fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    let fast = settings::own_shard_picked().and_then(fast_issue);
    pg_sys::Datum::from(fast.unwrap_or_else(|| next_own_id_guarded()))
}

/// The fast half when it can, the slow one otherwise.
#[inline(always)]
fn fast_or_slow(shard: i64) -> i64 {
    match i32::try_from(shard).ok().and_then(Shard::new) {
        Some(valid) => match fast_issue(valid) {
            Some(id) => id,
            None => next_id_guarded(shard),
        },
        None => next_id_guarded(shard),
    }
}

/// The fast half: an ID if nothing out of the ordinary stands in the way. Unguarded: it must
/// not raise an error or panic (see the module's comment).
#[inline(always)]
fn fast_issue(shard: Shard) -> Option<i64> {
    // SAFETY: a plain read of a backend-local flag.
    if unsafe { pg_sys::XactReadOnly } || !settings::owns(shard) || !citus::allows(shard) {
        return None;
    }
    let state = shared_memory::state()?;
    let issued = state.try_issue(
        shard,
        SystemClock.monotonic_ms(),
        settings::epoch_unix_ms_preloaded(),
        settings::max_lead_ms(),
    );
    match issued {
        FastIssue::Issued(id) => {
            counters::count(shard);
            Some(id)
        }
        FastIssue::Renew(id) => {
            counters::count(shard);
            renew_ahead_guarded(id);
            Some(id)
        }
        FastIssue::Slow => None,
    }
}

#[pg_guard]
#[inline(never)]
extern "C-unwind" fn next_id_guarded(shard: i64) -> i64 {
    next_id(shard)
}

#[pg_guard]
#[inline(never)]
extern "C-unwind" fn next_own_id_guarded() -> i64 {
    next_own_id()
}

/// Renews the lease ahead of need, after the fast half issued the ID that reached the renewal
/// point. Guarded: writing WAL can raise an error.
#[pg_guard]
#[inline(never)]
extern "C-unwind" fn renew_ahead_guarded(id: i64) {
    if let Some(state) = shared_memory::state() {
        generator(state).renew_ahead(id);
    }
}

/// The next ID for a shard: greater than every ID issued for that shard before it. The slow
/// path: every check, every wait, every error.
pub fn next_id(shard: i64) -> i64 {
    let Some(shard) = i32::try_from(shard).ok().and_then(Shard::new) else {
        errors::shard_out_of_range(shard)
    };
    let state = generating_state("snowid_next()");
    if !settings::owns(shard) {
        errors::shard_not_owned(shard.get(), &settings::shards_text());
    }
    citus::ensure_checked();
    if !citus::allows(shard) && !(citus::ask_again() && citus::allows(shard)) {
        citus::refuse_shard(shard);
    }
    match generator(state).next_id(shard) {
        Ok(id) => {
            counters::count(shard);
            id
        }
        Err(refused) => raise_refusal(refused, shard),
    }
}

/// The next ID on this backend's own shard; if that one was released, on the next owned one.
fn next_own_id() -> i64 {
    let state = generating_state("snowid_next()");
    let backend = settings::backend_number();
    let mut within = citus::generating();
    let mut own = settings::own_shard(backend, &within);
    if own.is_none() && citus::ask_again() {
        within = citus::generating();
        own = settings::own_shard(backend, &within);
    }
    let Some(mut shard) = own else { no_shard() };
    let mut skipped = 0;
    loop {
        match generator(state).next_id(shard) {
            Ok(id) => {
                counters::count(shard);
                return id;
            }
            Err(Refused::Released) if skipped < settings::owned_count(&within) => {
                skipped += 1;
                let Some(next) = settings::pick_own_shard(backend, skipped, &within) else {
                    break;
                };
                shard = next;
            }
            Err(Refused::Released) => break,
            Err(refused) => raise_refusal(refused, shard),
        }
    }
    no_shard()
}

/// The error for `snowid_next()` with no shard to use: on Citus, the check's reason where it has
/// one.
fn no_shard() -> ! {
    if let Some(state) = shared_memory::state() {
        let mut released = ShardSet::empty();
        for (n, cell) in state.shards().iter().enumerate() {
            if cell.last().1 {
                released.insert(n);
            }
        }
        citus::refuse_all(&released);
    }
    errors::no_shard_owned(&settings::shards_text())
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
    fn the_shard_lands_in_its_field_whatever_its_type() {
        for (arg, shard) in [
            ("0", 0),
            ("1::smallint", 1),
            ("5::bigint", 5),
            ("8191", 8191),
            ("'77'", 77),
            ("42.0::numeric", 42),
            ("3::float8", 3),
        ] {
            let decoded = Spi::get_one::<i32>(&format!("SELECT snowid_shard(snowid_next({arg}))"));
            assert_eq!(decoded, Ok(Some(shard)), "{arg}");
        }
    }

    #[pg_test]
    fn snowid_next_without_a_shard_uses_this_backends_own() {
        let same = Spi::get_one::<bool>(
            "SELECT count(DISTINCT snowid_shard(id)) = 1 AND bool_and(id > 0)
             FROM (SELECT snowid_next() AS id FROM generate_series(1, 1000)) s",
        );
        assert_eq!(same, Ok(Some(true)));
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

    #[pg_test(error = "snowid shard 4294967301 is out of range")]
    fn a_bigint_shard_past_int_is_refused_not_truncated() {
        Spi::get_one::<i64>("SELECT snowid_next(4294967301::bigint)").unwrap();
    }

    #[pg_test(error = "snowid shard 2.5 is not an integer")]
    fn a_fractional_shard_is_refused() {
        Spi::get_one::<i64>("SELECT snowid_next(2.5)").unwrap();
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
