//! Decoding IDs in SQL, and turning timestamps back into IDs.
//!
//! The shard and sequence fields do not depend on the epoch, so their accessors are IMMUTABLE.
//! Everything involving time depends on `snowid.epoch`, fixed while a server runs but free to
//! differ between servers and restarts, so those are STABLE: usable in index conditions, never
//! in an index expression.

use crate::layout::{self, MAX_MS};
use crate::{epoch, errors, gucs};
use pgrx::prelude::*;

fn parts(id: i64) -> layout::Parts {
    layout::decompose(id).unwrap_or_else(|| errors::negative_id(id))
}

/// When an ID was issued, to the millisecond, under the server's `snowid.epoch`.
#[pg_extern(stable, strict, parallel_safe)]
fn snowid_timestamp(id: i64) -> TimestampWithTimeZone {
    timestamp_under(id, gucs::epoch_unix_ms())
}

/// When an ID was issued, under an explicit epoch. IMMUTABLE, unlike the one-argument form,
/// so it may appear in expression indexes and generated columns.
#[pg_extern(immutable, strict, parallel_safe, name = "snowid_timestamp")]
fn snowid_timestamp_under_epoch(id: i64, epoch: TimestampWithTimeZone) -> TimestampWithTimeZone {
    if !epoch.is_finite() {
        errors::epoch_argument_not_finite();
    }
    timestamp_under(id, epoch::timestamptz_to_unix_ms(epoch.into_inner()))
}

fn timestamp_under(id: i64, epoch_ms: i64) -> TimestampWithTimeZone {
    let unix_ms = epoch_ms + parts(id).ms as i64;
    TimestampWithTimeZone::try_from(epoch::unix_ms_to_timestamptz(unix_ms))
        .unwrap_or_else(|_| errors::timestamp_out_of_range(&epoch::format(unix_ms), epoch_ms))
}

/// The logical shard an ID was issued for.
#[pg_extern(immutable, strict, parallel_safe)]
fn snowid_shard(id: i64) -> i32 {
    parts(id).shard
}

/// An ID's sequence number within its millisecond.
#[pg_extern(immutable, strict, parallel_safe)]
fn snowid_seq(id: i64) -> i32 {
    parts(id).seq
}

/// The ID of a millisecond, shard and sequence number. With the defaults it is the smallest ID
/// of that millisecond, for range scans: `id >= snowid_from_timestamp(t1) AND id <
/// snowid_from_timestamp(t2)` selects exactly the IDs issued in [t1, t2). Sub-millisecond
/// precision is truncated toward the past.
#[pg_extern(stable, strict, parallel_safe)]
fn snowid_from_timestamp(
    ts: TimestampWithTimeZone,
    shard: default!(i32, 0),
    seq: default!(i32, 0),
) -> i64 {
    let epoch_ms = gucs::epoch_unix_ms();
    if !ts.is_finite() {
        errors::timestamp_out_of_range(
            if ts.is_infinity() {
                "infinity"
            } else {
                "-infinity"
            },
            epoch_ms,
        );
    }
    let unix_ms = epoch::timestamptz_to_unix_ms(ts.into_inner());
    let ms = u64::try_from(unix_ms - epoch_ms)
        .ok()
        .filter(|&ms| ms <= MAX_MS)
        .unwrap_or_else(|| errors::timestamp_out_of_range(&epoch::format(unix_ms), epoch_ms));
    if layout::Shard::new(shard).is_none() {
        errors::shard_out_of_range(shard);
    }
    layout::compose(ms, shard, seq).unwrap_or_else(|| errors::seq_out_of_range(seq))
}

extension_sql!(
    r#"
CREATE FUNCTION snowid_parse(id bigint, OUT ts timestamptz, OUT shard int, OUT seq int)
RETURNS record
LANGUAGE sql STABLE STRICT PARALLEL SAFE
AS $$ SELECT @extschema@.snowid_timestamp(id), @extschema@.snowid_shard(id), @extschema@.snowid_seq(id) $$;

COMMENT ON FUNCTION snowid_parse(bigint) IS
    'Splits a snowid into the time it was issued, its shard and its sequence number.';
"#,
    name = "snowid_parse",
    requires = [snowid_timestamp, snowid_shard, snowid_seq]
);

extension_sql!(
    r#"
CREATE FUNCTION snowid_partition_ddl(
    parent regclass,
    from_ts timestamptz,
    to_ts timestamptz,
    step interval DEFAULT '1 day'
) RETURNS SETOF text
LANGUAGE sql STABLE STRICT PARALLEL SAFE
AS $$
    SELECT format(
        'CREATE TABLE %I.%I PARTITION OF %s FOR VALUES FROM (%s) TO (%s)',
        n.nspname,
        c.relname || '_' || to_char(lo, CASE
            WHEN step >= interval '28 days' THEN 'YYYYMM'
            WHEN step >= interval '1 day' THEN 'YYYYMMDD'
            ELSE 'YYYYMMDD"_"HH24MI' END),
        parent,
        @extschema@.snowid_from_timestamp(lo),
        @extschema@.snowid_from_timestamp(lo + step))
    FROM pg_catalog.pg_class c
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    CROSS JOIN LATERAL pg_catalog.generate_series(from_ts, to_ts, step) AS lo
    WHERE c.oid = parent AND lo < to_ts
    ORDER BY lo
$$;

COMMENT ON FUNCTION snowid_partition_ddl(regclass, timestamptz, timestamptz, interval) IS
    'CREATE TABLE statements for range partitions of a table partitioned by its snowid column, one per step from from_ts until to_ts; run them with \gexec.';
"#,
    name = "snowid_partition_ddl",
    requires = [snowid_from_timestamp]
);

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    /// (1000 ms << 23) | (5 << 10) | 7: one second after the default epoch, shard 5, seq 7.
    const HAND_BUILT: i64 = (1000 << 23) | (5 << 10) | 7;

    #[pg_test]
    fn decodes_a_hand_built_id_under_the_default_epoch() {
        let text = Spi::get_one::<String>(&format!(
            "SELECT format('%s|%s|%s', (p).ts AT TIME ZONE 'UTC', (p).shard, (p).seq)
             FROM (SELECT snowid_parse({HAND_BUILT}) AS p) s"
        ));
        assert_eq!(text, Ok(Some("2026-01-01 00:00:01|5|7".into())));
    }

    #[pg_test]
    fn parse_works_in_from_and_in_where() {
        let row = Spi::get_one::<i32>(&format!("SELECT seq FROM snowid_parse({HAND_BUILT})"));
        assert_eq!(row, Ok(Some(7)));
        let matched = Spi::get_one::<i64>(&format!(
            "SELECT count(*) FROM (VALUES ({HAND_BUILT}), (0)) v(id) WHERE (snowid_parse(id)).shard = 5"
        ));
        assert_eq!(matched, Ok(Some(1)));
    }

    #[pg_test]
    fn from_timestamp_inverts_timestamp_and_truncates_to_the_millisecond() {
        let id = Spi::get_one::<i64>(
            "SELECT snowid_from_timestamp('2026-01-01 00:00:01.000999+00', 5, 7)",
        );
        assert_eq!(id, Ok(Some(HAND_BUILT)));
    }

    #[pg_test(error = "snowid -1 is negative")]
    fn negative_ids_are_refused() {
        Spi::get_one::<i32>("SELECT snowid_shard(-1)").unwrap();
    }

    #[pg_test(error = "timestamp 2025-12-31 23:59:59.999+00 cannot be encoded in a snowid")]
    fn timestamps_before_the_epoch_are_refused() {
        Spi::get_one::<i64>("SELECT snowid_from_timestamp('2025-12-31 23:59:59.999+00')").unwrap();
    }
}
