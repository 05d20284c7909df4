//! `snowid_info()` and `snowid_stats()`: the layout, the settings and the running state, for
//! operators. Both read shared memory without locks; they are VOLATILE because the state moves.

use crate::layout::{stamp_ms, IDS_PER_MS, MAX_MS, MAX_SEQ, SEQ_BITS, SHARD_BITS, TIME_BITS};
use crate::shard_set::ShardSet;
use crate::shmem::{self, Refusal};
use crate::{clock, epoch, gucs};
use pgrx::datum::Interval;
use pgrx::prelude::*;

fn timestamptz(unix_ms: i64) -> Option<TimestampWithTimeZone> {
    TimestampWithTimeZone::try_from(epoch::unix_ms_to_timestamptz(unix_ms)).ok()
}

/// One row describing snowid on this server.
#[allow(clippy::type_complexity)] // pgrx reads the row's columns from the written-out type
#[pg_extern(volatile, parallel_safe)]
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
    let epoch_ms = gucs::epoch_unix_ms();
    let shards = gucs::shards_text();
    let shard_count = ShardSet::parse(&shards)
        .map(|s| s.len() as i32)
        .unwrap_or(0);
    let state = shmem::state();
    let generating = match state.map(|s| s.lease.refusal()) {
        None => "no: not loaded via shared_preload_libraries".to_string(),
        Some(None) => "yes".to_string(),
        Some(Some(Refusal::EpochMovedLater { .. })) => {
            "no: snowid.epoch is later than the epoch of IDs already issued".to_string()
        }
        Some(Some(Refusal::StateUnreadable)) => "no: snowid.state is unreadable".to_string(),
    };
    let base_ms = state.map(|s| s.time_base.read(clock::monotonic_ms()).0);
    let row = (
        timestamptz(epoch_ms),
        TIME_BITS as i32,
        SHARD_BITS as i32,
        SEQ_BITS as i32,
        IDS_PER_MS as i64,
        timestamptz(epoch_ms + MAX_MS as i64 + 1),
        state.map(|_| Interval::from_micros(gucs::max_lead_ms() as i64 * 1000)),
        shards,
        shard_count,
        state.is_some(),
        generating,
        base_ms.and_then(timestamptz),
        state.map(|s| Interval::from_micros(s.time_base.wall_behind_ms() * 1000)),
        state.map(|s| s.time_base.steps_back() as i64),
        state.and_then(|s| match s.lease.end_ms() {
            0 => None,
            end_ms => timestamptz(epoch_ms + end_ms as i64),
        }),
        state
            .and_then(|s| Some(s.lease.persisted_base_unix_ms()).filter(|&ms| ms > 0))
            .and_then(timestamptz),
        state.map(|s| s.lease.writes() as i64),
    );
    TableIterator::once(row)
}

/// A row per shard that issued IDs since the server started (or since the last crash restart).
/// `clock_steps_back` is server-wide: the backward clock steps the time base rode out.
#[pg_extern(volatile, parallel_safe)]
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
    let Some(state) = shmem::state() else {
        crate::errors::not_preloaded()
    };
    let epoch_ms = gucs::epoch_unix_ms();
    let steps_back = state.time_base.steps_back() as i64;
    let rows: Vec<_> = state
        .shards()
        .iter()
        .enumerate()
        .filter(|(_, cell)| cell.issued() > 0)
        .map(|(shard, cell)| {
            let stamp = cell.stamp.load(std::sync::atomic::Ordering::Relaxed);
            (
                shard as i32,
                timestamptz(epoch_ms + stamp_ms(stamp) as i64),
                (stamp & MAX_SEQ as u64) as i32,
                cell.issued() as i64,
                cell.waits() as i64,
                steps_back,
            )
        })
        .collect();
    TableIterator::new(rows)
}
