//! Decoding IDs in SQL, and turning timestamps back into IDs.
//!
//! The shard and sequence fields do not depend on the epoch, so their accessors are IMMUTABLE.
//! Everything involving time depends on `snowid.epoch`, fixed while a server runs but free to
//! differ between servers and restarts, so those are STABLE: usable in index conditions, never
//! in an index expression.

use super::text_key;
use crate::errors;
use crate::server::settings;
use pgrx::prelude::*;
use snowid_core::layout::{self, MAX_MS};
use snowid_core::{epoch, shard_hash};

#[track_caller]
fn parts(id: i64) -> layout::Parts {
    layout::decompose(id).unwrap_or_else(|| errors::negative_id(id))
}

/// Unix milliseconds as a `timestamptz`, or `None` beyond PostgreSQL's range.
pub fn timestamptz(unix_ms: i64) -> Option<TimestampWithTimeZone> {
    TimestampWithTimeZone::try_from(epoch::unix_ms_to_timestamptz(unix_ms)).ok()
}

/// When an ID was issued, to the millisecond, under the server's `snowid.epoch`.
#[pg_extern(stable, strict, parallel_safe)]
fn snowid_timestamp(id: i64) -> TimestampWithTimeZone {
    timestamp_under(id, settings::epoch_unix_ms())
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
    timestamptz(unix_ms)
        .unwrap_or_else(|| errors::timestamp_out_of_range(&epoch::format(unix_ms), epoch_ms))
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
    id_at(ts, shard, seq)
}

/// The ID of a timestamp's millisecond, shard and sequence number, or the error saying why there
/// is none.
#[track_caller]
pub fn id_at(ts: TimestampWithTimeZone, shard: i32, seq: i32) -> i64 {
    let epoch_ms = settings::epoch_unix_ms();
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

// A SQL-standard body: its names are bound when the script creates it (under the script's
// search_path, which puts pg_catalog first), not looked up at each call, so no caller's
// search_path, and nothing a database owner plants, reaches it. A `SET search_path` clause would
// guard it too, at a cost on every call: 15,510 instructions a call against 14,234 for 0.7.0's
// body (callgrind, PostgreSQL 18), where the bound body takes 14,272. It is never inlined either
// way (it returns a record and is STRICT).
extension_sql!(
    r#"
CREATE FUNCTION snowid_parse(id bigint, OUT ts timestamptz, OUT shard int, OUT seq int)
RETURNS record
LANGUAGE sql STABLE STRICT PARALLEL SAFE
BEGIN ATOMIC
    SELECT @extschema@.snowid_timestamp(id), @extschema@.snowid_shard(id), @extschema@.snowid_seq(id);
END;

COMMENT ON FUNCTION snowid_parse(bigint) IS
    'Splits a snowid into the time it was issued, its shard and its sequence number.';
"#,
    name = "snowid_parse",
    requires = [snowid_timestamp, snowid_shard, snowid_seq]
);

/// An ID as 19 decimal digits, zero-padded: text that sorts like the ID, for JSON and for
/// languages whose numbers cannot hold it (JavaScript loses IDs past 2^53).
#[pg_extern(immutable, strict, parallel_safe)]
fn snowid_text(id: i64) -> String {
    if id < 0 {
        errors::negative_id(id);
    }
    format!("{id:019}")
}

/// The shard of a `bigint` key, such as a user ID: a documented hash that never changes (see
/// `snowid_core::shard_hash`). The same as the shard of the key's decimal text.
#[pg_extern(immutable, strict, parallel_safe, name = "snowid_shard_for")]
fn snowid_shard_for_bigint(key: i64) -> i32 {
    shard_hash::shard_for_i64(key)
}

// The shard of a `text` key, such as a tenant name or an e-mail address: FNV-1a of its UTF-8
// bytes, whatever the database's encoding (see `text_key`). Written out by hand, under the
// symbol earlier versions' scripts name, because pgrx's `&str` argument insists on UTF-8.
extension_sql!(
    r#"
CREATE FUNCTION "snowid_shard_for"("key" text) RETURNS int
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_shard_for_text_wrapper';
"#,
    name = "snowid_shard_for_text"
);

v1_function_info!(pg_finfo_snowid_shard_for_text_wrapper);

/// `snowid_shard_for(key text)`.
///
/// # Safety
///
/// Called by PostgreSQL's function manager with one non-null `text` argument.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn snowid_shard_for_text_wrapper(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: the function is STRICT with one text argument, and this runs guarded.
    let shard = unsafe {
        let key = (*fcinfo).args.as_slice(1)[0].value;
        text_key::with_utf8(key, shard_hash::shard_for_bytes)
    };
    pg_sys::Datum::from(shard)
}

/// The shard of a `uuid` key: the same as that of its lowercase hyphenated text.
#[pg_extern(immutable, strict, parallel_safe, name = "snowid_shard_for")]
fn snowid_shard_for_uuid(key: pgrx::Uuid) -> i32 {
    shard_hash::shard_for_uuid(key.as_bytes())
}

extension_sql!(
    r#"
COMMENT ON FUNCTION snowid_timestamp(bigint) IS
    'When an ID was issued, to the millisecond, under this server''s snowid.epoch. STABLE: the epoch can differ between servers and restarts.';
COMMENT ON FUNCTION snowid_timestamp(bigint, timestamptz) IS
    'When an ID was issued, under an explicit epoch. IMMUTABLE, for expression indexes and generated columns.';
COMMENT ON FUNCTION snowid_shard(bigint) IS
    'The logical shard (0 to 8191) an ID was issued for.';
COMMENT ON FUNCTION snowid_seq(bigint) IS
    'An ID''s sequence number (0 to 1023) within its millisecond and shard.';
COMMENT ON FUNCTION snowid_from_timestamp(timestamptz, int, int) IS
    'The ID of a millisecond, shard and sequence number; with the defaults, the smallest ID of that millisecond, for id >= ... AND id < ... range scans and partition bounds.';
COMMENT ON FUNCTION snowid_text(bigint) IS
    'An ID as 19 zero-padded decimal digits: text that sorts like the ID, for JSON and JavaScript. Cast it back with ::bigint.';
COMMENT ON FUNCTION snowid_shard_for(bigint) IS
    'The shard of a bigint key: FNV-1a 64 of its decimal text, modulo 8192. Never changes across versions.';
COMMENT ON FUNCTION snowid_shard_for(text) IS
    'The shard of a text key: FNV-1a 64 of its bytes, modulo 8192. Never changes across versions.';
COMMENT ON FUNCTION snowid_shard_for(uuid) IS
    'The shard of a uuid key: FNV-1a 64 of its lowercase hyphenated text, modulo 8192. Never changes across versions.';
"#,
    name = "decode_comments",
    requires = [
        snowid_timestamp,
        snowid_timestamp_under_epoch,
        snowid_shard,
        snowid_seq,
        snowid_from_timestamp,
        snowid_text,
        snowid_shard_for_bigint,
        "snowid_shard_for_text",
        snowid_shard_for_uuid
    ]
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
