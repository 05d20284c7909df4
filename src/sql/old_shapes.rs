//! Earlier versions' shapes of functions whose shape has changed, kept so that a database still
//! on such a version works with this library until `ALTER EXTENSION snowid UPDATE`, and so that
//! `CREATE EXTENSION snowid VERSION '...'` can find every function its script names. No SQL is
//! generated for them: only the earlier scripts refer to them.
//! - 0.1.0's `snowid_info()` and `snowid_stats()` (the current ones are `snowid_info_v2` and
//!   `snowid_stats_v2` in Rust: `_v2` is the second shape of the result, as in those scripts);
//! - `snowid_next_v1`, the symbol of `snowid_next(int)` in the scripts of 0.1.0 to 0.5.0, now
//!   `snowid_next_int4` beside `snowid_next_int8` and `snowid_next_float8`;
//! - 0.5.0's `snowid_resume_above_columns()`, with no argument (0.6.0 added `released`), and
//!   0.6.0's `snowid_resume_above_columns(released)` (0.7.0 added `accept_ahead` and
//!   `skip_databases`); 0.6.0's `snowid_resume_above(id)` is the current function's symbol, which
//!   takes one argument or two;
//! - 0.7.0's `snowid_resume_above(id, skip_databases)`, whose symbol was `resume_above_skipping`.
//! - 0.7.0's `snowid_citus_claim(asker_group, asker_claim)`, the question of a Citus node that
//!   still runs 0.7.0 (0.8.0's nodes ask through the setting `snowid.citus_claim` instead).

use super::decode::timestamptz;
use super::info::{generating, high_water_mark, interval_ms};
use super::resume::{resume_above, resume_above_columns};
use crate::errors;
use crate::server::resumes::Said;
use crate::server::{settings, shared_memory};
use pgrx::datum::Interval;
use pgrx::prelude::*;
use snowid_core::host::Clock;
use snowid_core::layout::{self, stamp_ms, IDS_PER_MS, MAX_SEQ, SEQ_BITS, SHARD_BITS, TIME_BITS};
use snowid_core::shard_set::ShardSet;

/// 0.7.0's `snowid_citus_claim`: see `crate::server::citus::answer::answer_0_7_0`.
#[pg_extern(volatile, strict, parallel_unsafe, sql = false)]
fn snowid_citus_claim(asker_group: i32, asker_claim: &str) -> String {
    crate::server::citus::answer::answer_0_7_0(asker_group, asker_claim)
}

#[allow(clippy::type_complexity)]
#[pg_extern(volatile, parallel_safe, sql = false)]
fn snowid_info() -> TableIterator<
    'static,
    (
        name!(epoch, Option<TimestampWithTimeZone>),
        name!(time_bits, i32),
        name!(shard_bits, i32),
        name!(seq_bits, i32),
        name!(ids_per_ms_per_shard, i64),
        name!(exhausted_at, Option<TimestampWithTimeZone>),
        name!(max_lead, Option<Interval>),
        name!(shards, String),
        name!(shard_count, i32),
        name!(preloaded, bool),
        name!(generating, String),
        name!(time_base, Option<TimestampWithTimeZone>),
        name!(clock_behind_time_base, Option<Interval>),
        name!(clock_steps_back, Option<i64>),
        name!(lease_end, Option<TimestampWithTimeZone>),
        name!(persisted_time_base, Option<TimestampWithTimeZone>),
        name!(lease_writes, Option<i64>),
    ),
> {
    let epoch_ms = settings::epoch_unix_ms();
    let state = shared_memory::state();
    let shards = settings::shards_text();
    let mono_ms = snowid_core::clock::SystemClock.monotonic_ms();
    TableIterator::once((
        timestamptz(epoch_ms),
        TIME_BITS as i32,
        SHARD_BITS as i32,
        SEQ_BITS as i32,
        IDS_PER_MS as i64,
        timestamptz(layout::exhaustion_unix_ms(epoch_ms)),
        state.map(|_| interval_ms(settings::max_lead_ms() as i64)),
        shards.clone(),
        ShardSet::parse(&shards).map_or(0, |s| s.len() as i32),
        state.is_some(),
        generating(),
        state.and_then(|s| timestamptz(s.time_base.read(mono_ms).0)),
        state.map(|s| interval_ms(s.time_base.wall_behind_ms())),
        state.map(|s| s.time_base.steps_back() as i64),
        high_water_mark(),
        state.and_then(|s| timestamptz(s.lease.persisted_base_unix_ms())),
        state.map(|s| s.lease.writes() as i64),
    ))
}

#[allow(clippy::type_complexity)]
#[pg_extern(volatile, parallel_safe, sql = false)]
fn snowid_stats() -> TableIterator<
    'static,
    (
        name!(shard, i32),
        name!(last_ts, Option<TimestampWithTimeZone>),
        name!(last_seq, i32),
        name!(ids_issued, i64),
        name!(throttled_waits, i64),
        name!(clock_steps_back, i64),
    ),
> {
    let Some(state) = shared_memory::state() else {
        errors::not_preloaded("snowid_stats()")
    };
    let epoch_ms = settings::epoch_unix_ms();
    let steps_back = state.time_base.steps_back() as i64;
    let rows: Vec<_> = state
        .shards()
        .iter()
        .zip(state.tallies())
        .enumerate()
        .filter(|(_, (_, tally))| tally.issued() > 0)
        .map(|(shard, (cell, tally))| {
            let (stamp, _) = cell.last();
            (
                shard as i32,
                timestamptz(epoch_ms + stamp_ms(stamp) as i64),
                (stamp & MAX_SEQ as u64) as i32,
                tally.issued() as i64,
                tally.waits() as i64,
                steps_back,
            )
        })
        .collect();
    TableIterator::new(rows)
}

/// 0.5.0's `snowid_resume_above_columns()`: naming no released shard.
#[pg_extern(volatile, sql = false)]
#[allow(clippy::type_complexity)]
fn snowid_resume_above_columns() -> TableIterator<
    'static,
    (
        name!(database, String),
        name!(tbl, Option<String>),
        name!(col, Option<String>),
        name!(max_id, Option<i64>),
    ),
> {
    TableIterator::new(resume_above_columns(&Said::default()))
}

/// 0.6.0's `snowid_resume_above_columns(released)`.
#[pg_extern(volatile, sql = false)]
#[allow(clippy::type_complexity)]
fn resume_above_every_column(
    released: Option<Vec<i32>>,
) -> TableIterator<
    'static,
    (
        name!(database, String),
        name!(tbl, Option<String>),
        name!(col, Option<String>),
        name!(max_id, Option<i64>),
    ),
> {
    let named: Option<Vec<snowid_core::layout::Shard>> = released.map(|shards| {
        shards
            .into_iter()
            .map(|s| {
                snowid_core::layout::Shard::new(s).unwrap_or_else(|| errors::shard_out_of_range(s))
            })
            .collect()
    });
    TableIterator::new(resume_above_columns(&Said {
        released: named.as_deref(),
        ..Said::default()
    }))
}

/// 0.7.0's `snowid_resume_above(id, skip_databases)`, by its symbol (0.6.0's shape shares the
/// current one's: see `super::resume`).
#[pg_extern(volatile, sql = false)]
fn resume_above_skipping(
    id: Option<i64>,
    skip_databases: Option<Vec<Option<String>>>,
) -> Option<TimestampWithTimeZone> {
    resume_above(id?, skip_databases)
}

v1_function_info!(pg_finfo_snowid_next_v1);

/// `snowid_next(shard int)` as the scripts of 0.1.0 to 0.5.0 name it.
///
/// # Safety
///
/// Called by PostgreSQL's function manager with one non-null `int4` argument.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn snowid_next_v1(
    fcinfo: pgrx::pg_sys::FunctionCallInfo,
) -> pgrx::pg_sys::Datum {
    // SAFETY: the same call.
    unsafe { super::generate::snowid_next_int4(fcinfo) }
}
