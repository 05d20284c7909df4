//! `snowid_info()` and `snowid_stats()`: the layout, the settings and the running state, for
//! operators. Both read shared memory without locks; they are VOLATILE because the state moves.

use super::decode::timestamptz;
use crate::errors;
use crate::server::issuing;
use crate::server::state::{pages, startup};
use crate::server::{counters, settings, shared_memory};
use pgrx::datum::Interval;
use pgrx::prelude::*;
use snowid_core::generator::{time_field, Status};
use snowid_core::host::Clock;
use snowid_core::layout::{
    self, id_from_stamp, stamp_ms, Shard, IDS_PER_MS, MAX_SEQ, SEQ_BITS, SHARD_BITS, TIME_BITS,
};

pub(crate) fn interval_ms(ms: i64) -> Interval {
    Interval::from_micros(ms * 1000)
}

/// One row describing snowid on this server. Server-wide only; per-shard figures are in
/// `snowid_stats()`. Without preloading, the running state is null and `generating` says why.
#[allow(clippy::type_complexity)] // pgrx reads the row's columns from the written-out type
#[pg_extern(volatile, parallel_safe, name = "snowid_info")]
fn snowid_info_v2() -> TableIterator<
    'static,
    (
        name!(epoch, Option<TimestampWithTimeZone>),
        name!(layout, String),
        name!(ids_per_ms, i32),
        name!(exhausted_at, Option<TimestampWithTimeZone>),
        name!(shards, String),
        name!(max_lead, Interval),
        name!(generating, String),
        name!(time_base, Option<TimestampWithTimeZone>),
        name!(clock_behind, Option<Interval>),
        name!(clock_steps_back, Option<i64>),
        name!(high_water_mark, Option<TimestampWithTimeZone>),
        name!(lease_writes, Option<i64>),
    ),
> {
    let epoch_ms = settings::epoch_unix_ms();
    let state = shared_memory::state();
    let mono_ms = snowid_core::clock::SystemClock.monotonic_ms();
    let row = (
        timestamptz(epoch_ms),
        format!("{TIME_BITS}/{SHARD_BITS}/{SEQ_BITS}"),
        IDS_PER_MS as i32,
        timestamptz(layout::exhaustion_unix_ms(epoch_ms)),
        settings::shards_text(),
        interval_ms(settings::max_lead_ms() as i64),
        generating(),
        state.and_then(|s| timestamptz(s.time_base.read(mono_ms).0)),
        state.map(|s| interval_ms(s.time_base.wall_behind_ms())),
        state.map(|s| s.time_base.steps_back() as i64),
        high_water_mark(),
        state.map(|s| s.lease.writes() as i64),
    );
    TableIterator::once(row)
}

/// Whether this server generates, or why not.
pub(crate) fn generating() -> String {
    let Some(state) = shared_memory::state() else {
        return "no: not loaded via shared_preload_libraries".to_string();
    };
    // SAFETY: a plain call.
    if unsafe { pg_sys::RecoveryInProgress() } {
        return "no: in recovery (a standby generates once promoted)".to_string();
    }
    let status = match state.lease.status() {
        // Not loaded since the server started: what loading will find, decided by the same code.
        Status::NotLoaded => startup::outlook(&issuing::start_context()),
        status => status,
    };
    match status {
        Status::Fenced(fence) => format!(
            "no: fenced until a superuser resumes above the IDs already issued: {}",
            fence.describe()
        ),
        Status::EpochMovedLater { .. } => {
            "no: snowid.epoch is later than the epoch of IDs already issued".to_string()
        }
        Status::NotLoaded | Status::Generating => {
            let mono_ms = snowid_core::clock::SystemClock.monotonic_ms();
            let base_unix_ms = state.time_base.read(mono_ms).0;
            if time_field::<()>(base_unix_ms, settings::epoch_unix_ms()).is_err() {
                "no: the system clock is before snowid.epoch".to_string()
            } else {
                "yes".to_string()
            }
        }
    }
}

/// The end of the lease: every ID issued so far is dated before it.
pub(crate) fn high_water_mark() -> Option<TimestampWithTimeZone> {
    let published = shared_memory::state()?.lease.end_ms();
    let end_unix_ms = match published {
        0 => pages::recorded_lease_end()?,
        end_ms => settings::epoch_unix_ms() + end_ms as i64,
    };
    timestamptz(end_unix_ms)
}

/// A row per shard that issued IDs since the server started (or since the last crash restart),
/// or that was released.
#[allow(clippy::type_complexity)]
#[pg_extern(volatile, parallel_safe, name = "snowid_stats")]
fn snowid_stats_v2() -> TableIterator<
    'static,
    (
        name!(shard, i32),
        name!(last_id, i64),
        name!(last_ts, Option<TimestampWithTimeZone>),
        name!(last_seq, i32),
        name!(ids_issued, i64),
        name!(throttled_waits, i64),
        name!(released, bool),
    ),
> {
    let Some(state) = shared_memory::state() else {
        errors::not_preloaded("snowid_stats()")
    };
    let epoch_ms = settings::epoch_unix_ms();
    let rows: Vec<_> = state
        .shards()
        .iter()
        .zip(state.tallies())
        .enumerate()
        .filter_map(|(n, (cell, tally))| {
            let (stamp, released) = cell.last();
            let issued = tally.issued() + counters::unflushed(n);
            if issued == 0 && !released {
                return None;
            }
            let shard = Shard::new(n as i32)?;
            Some((
                n as i32,
                id_from_stamp(stamp, shard),
                timestamptz(epoch_ms + stamp_ms(stamp) as i64),
                (stamp & MAX_SEQ as u64) as i32,
                issued as i64,
                tally.waits() as i64,
                released,
            ))
        })
        .collect();
    TableIterator::new(rows)
}

extension_sql!(
    r#"
COMMENT ON FUNCTION snowid_info() IS
    'snowid on this server: epoch, layout, exhaustion date, shards, max_lead, whether it generates and why not, time base, how far the system clock is behind it, backward steps seen, high-water mark (every ID issued is dated before it) and lease writes.';
COMMENT ON FUNCTION snowid_stats() IS
    'A row per shard used since the server started, or released: the last ID issued, its time and sequence number, IDs issued (by transactions that ended, and by this session), waits at the lead bound.';
"#,
    name = "info_comments",
    requires = [snowid_info_v2, snowid_stats_v2]
);
