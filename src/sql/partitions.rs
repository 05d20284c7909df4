//! `snowid_partition_ddl`: `CREATE TABLE ... PARTITION OF` statements for time partitions of a
//! table partitioned by range of its snowid column, for psql's `\gexec`.
//!
//! It validates everything before it generates anything:
//! - the parent is partitioned by range of one `bigint` column;
//! - both bounds are finite, `from_ts` is before `to_ts`, and each step moves at least a
//!   millisecond (a step is added in the session's time zone, as `timestamptz + interval` does);
//! - at most `max_partitions` statements come out (between 1 and 100,000).
//!
//! Each partition is named `<parent>_<its lower bound in UTC>`, at the coarsest precision that
//! writes every lower bound of the series exactly (`YYYYMM`, `YYYYMMDD`, `YYYYMMDD_HH`,
//! `YYYYMMDD_HHMI`, `YYYYMMDD_HHMISS` or `YYYYMMDD_HHMISS_MS`), so no two names of a series
//! collide, whatever the step or the time zone. A long parent name is shortened to keep the whole
//! suffix within PostgreSQL's 63 bytes. The statements say `IF NOT EXISTS`, and a partition
//! that already exists with the same bounds is left out, so a rerun from cron emits only what is
//! missing; a name taken by anything else is an error.
//!
//! It reads the catalogs through SPI with every name schema-qualified (tables, types, casts,
//! functions and operators), under `search_path = pg_catalog, pg_temp`, so that nothing a
//! database owner plants (a domain `public.text` with a CHECK that calls her function, her
//! database's `search_path = public, pg_catalog`) runs when a superuser calls it. It evaluates
//! nothing of the table's (no partition key expression, no default partition's rows). The
//! statements it returns are the caller's to run: creating a partition of her table runs what
//! PostgreSQL runs for any DDL on it (her index expressions folded for the new partition's
//! index, say), so a superuser runs them as the table's owner (`SET ROLE`, see the reference).

use super::decode::id_at;
use crate::errors;
use crate::server::databases::safe_search_path::SafeSearchPath;
use pgrx::datum::Interval;
use pgrx::prelude::*;
use pgrx::PgRelation;
use pgrx::PgSqlErrorCode::*;
use snowid_core::epoch;
use std::collections::HashMap;
use std::ffi::{CStr, CString};

/// The most partitions one call may emit, whatever `max_partitions` says.
const PARTITIONS_LIMIT: i32 = 100_000;
/// PostgreSQL's longest identifier, in bytes.
const NAME_MAX_BYTES: usize = 63;

// The parent arrives as a plain OID, so that it is checked (it exists, and the caller may see
// it) before anything locks it; the SQL signature keeps `regclass`, as earlier versions had it.
#[pg_extern(
    stable,
    strict,
    sql = r#"
CREATE FUNCTION "snowid_partition_ddl"(
    "parent" regclass,
    "from_ts" timestamp with time zone,
    "to_ts" timestamp with time zone,
    "step" interval DEFAULT '1 day',
    "max_partitions" int DEFAULT 1000
) RETURNS SETOF text
STRICT STABLE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_partition_ddl_wrapper';
"#
)]
fn snowid_partition_ddl(
    parent: pg_sys::Oid,
    from_ts: TimestampWithTimeZone,
    to_ts: TimestampWithTimeZone,
    step: Interval,
    max_partitions: i32,
) -> SetOfIterator<'static, String> {
    let parent = open_visible(parent);
    check_parent(&parent);
    if !(1..=PARTITIONS_LIMIT).contains(&max_partitions) {
        errors::bad_argument(
            ERRCODE_INVALID_PARAMETER_VALUE,
            format!(
                "max_partitions must be between 1 and {PARTITIONS_LIMIT}, not {max_partitions}"
            ),
            None,
        );
    }
    let lower_bounds = series(from_ts, to_ts, step, max_partitions);
    let ids: Vec<i64> = lower_bounds.iter().map(|&ts| id_at(ts, 0, 0)).collect();
    let unix_ms: Vec<i64> = lower_bounds
        .iter()
        .map(|ts| epoch::timestamptz_to_unix_ms(ts.into_inner()))
        .collect();
    let names = names(parent.name(), &unix_ms[..unix_ms.len() - 1]);

    let schema = parent.namespace().to_string();
    let existing = existing_partitions(&parent);
    let mut statements = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let (from_id, to_id) = (ids[i], ids[i + 1]);
        let bound = format!("FOR VALUES FROM ('{from_id}') TO ('{to_id}')");
        match existing.get(name) {
            Some(found) if *found == bound => continue,
            Some(_) => errors::partition_name_taken(name, parent.name()),
            None if relation_exists(name, parent.namespace_oid()) => {
                errors::partition_name_taken(name, parent.name())
            }
            None => {}
        }
        statements.push(format!(
            "CREATE TABLE IF NOT EXISTS {}.{} PARTITION OF {}.{} FOR VALUES FROM ({from_id}) TO ({to_id})",
            quote(&schema),
            quote(name),
            quote(&schema),
            quote(parent.name())
        ));
    }
    SetOfIterator::new(statements)
}

/// The relation, locked for reading, once it is known to exist and to be visible to the caller:
/// 42P01 for a dangling OID (such as `'-'::regclass`), 42501 for a table the caller has no
/// privilege on. Checked before the lock, so that a call cannot queue behind (and hold up) a
/// lock on a table the caller may not touch; and again after it, in case it was dropped between.
fn open_visible(oid: pg_sys::Oid) -> PgRelation {
    // SAFETY: catalog lookups by OID; get_rel_name returns NULL for a relation that does not
    // exist, and pg_class_aclmask is only reached for one that does.
    unsafe {
        let name = pg_sys::get_rel_name(oid);
        if name.is_null() {
            errors::no_such_relation(oid);
        }
        let privileges = pg_sys::ACL_SELECT
            | pg_sys::ACL_INSERT
            | pg_sys::ACL_UPDATE
            | pg_sys::ACL_DELETE
            | pg_sys::ACL_TRUNCATE
            | pg_sys::ACL_REFERENCES
            | pg_sys::ACL_TRIGGER;
        let granted = pg_sys::pg_class_aclmask(
            oid,
            pg_sys::GetUserId(),
            privileges as pg_sys::AclMode,
            pg_sys::AclMaskHow::ACLMASK_ANY,
        );
        if granted == 0 {
            errors::no_privilege_on(&CStr::from_ptr(name).to_string_lossy());
        }
        pg_sys::LockRelationOid(oid, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        if pg_sys::get_rel_name(oid).is_null() {
            errors::no_such_relation(oid);
        }
        // Already locked: opening it takes no further lock, and closing it keeps the lock.
        PgRelation::open(oid)
    }
}

/// Refuses a parent that is not partitioned by range of exactly one `bigint` column.
fn check_parent(parent: &PgRelation) {
    let _path = SafeSearchPath::set();
    let key = Spi::connect(|client| {
        let rows = client.select(
            "SELECT p.partstrat::pg_catalog.text, p.partnatts::pg_catalog.int4, a.atttypid
             FROM pg_catalog.pg_partitioned_table p
             LEFT JOIN pg_catalog.pg_attribute a
               ON a.attrelid OPERATOR(pg_catalog.=) p.partrelid
              AND a.attnum OPERATOR(pg_catalog.=) p.partattrs[0]
             WHERE p.partrelid OPERATOR(pg_catalog.=) $1",
            Some(1),
            &[parent.oid().into()],
        )?;
        match rows.into_iter().next() {
            Some(row) => Ok::<_, pgrx::spi::Error>(Some((
                row.get::<String>(1)?,
                row.get::<i32>(2)?,
                row.get::<pg_sys::Oid>(3)?,
            ))),
            None => Ok(None),
        }
    })
    .unwrap_or_else(|e| errors::catalog_read_failed(&e));
    let ok = matches!(
        key,
        Some((Some(strategy), Some(1), Some(typid))) if strategy == "r" && typid == pg_sys::INT8OID
    );
    if !ok {
        errors::not_partitioned_by_bigint(parent.name());
    }
}

/// The lower bound of every partition, then the upper bound of the last one.
fn series(
    from_ts: TimestampWithTimeZone,
    to_ts: TimestampWithTimeZone,
    step: Interval,
    max_partitions: i32,
) -> Vec<TimestampWithTimeZone> {
    if !from_ts.is_finite() || !to_ts.is_finite() {
        errors::bad_argument(
            ERRCODE_DATETIME_FIELD_OVERFLOW,
            "partition bounds must be finite timestamps".into(),
            None,
        );
    }
    if from_ts.into_inner() >= to_ts.into_inner() {
        errors::bad_argument(
            ERRCODE_INVALID_PARAMETER_VALUE,
            "from_ts must be earlier than to_ts".into(),
            None,
        );
    }
    let mut bounds = vec![from_ts];
    let mut lo = from_ts;
    loop {
        if lo.into_inner() >= to_ts.into_inner() {
            return bounds;
        }
        if bounds.len() > max_partitions as usize {
            errors::too_many_partitions(max_partitions);
        }
        let hi = add(lo, step);
        if !hi.is_finite()
            || epoch::timestamptz_to_unix_ms(hi.into_inner())
                <= epoch::timestamptz_to_unix_ms(lo.into_inner())
        {
            errors::bad_argument(
                ERRCODE_INVALID_PARAMETER_VALUE,
                "step must move each bound forward by at least a millisecond".into(),
                Some("Use a positive interval such as '1 day', '1 month' or '1 hour'."),
            );
        }
        bounds.push(hi);
        lo = hi;
    }
}

/// `ts + step`, as PostgreSQL adds them (in the session's time zone for days and months).
fn add(ts: TimestampWithTimeZone, step: Interval) -> TimestampWithTimeZone {
    // SAFETY: timestamptz_pl_interval takes a timestamptz and an interval and returns a
    // timestamptz; both arguments are non-null.
    unsafe {
        pgrx::direct_function_call::<TimestampWithTimeZone>(
            pg_sys::timestamptz_pl_interval,
            &[ts.into_datum(), step.into_datum()],
        )
    }
    .unwrap_or_else(|| {
        errors::bad_argument(
            ERRCODE_DATETIME_FIELD_OVERFLOW,
            "a partition bound is out of range".into(),
            None,
        )
    })
}

/// The suffix precisions, coarsest first: how many leading characters of `YYYYMMDD_HHMISS_MS`
/// to keep, and the tail a lower bound must have for that precision to write it exactly.
const PRECISIONS: [(usize, &str); 6] = [
    (6, "01_000000_000"),
    (8, "_000000_000"),
    (11, "0000_000"),
    (13, "00_000"),
    (15, "_000"),
    (19, ""),
];

/// The partitions' names: the parent's name, shortened if need be, and the lower bound in UTC.
fn names(parent: &str, lower_unix_ms: &[i64]) -> Vec<String> {
    let stamps: Vec<String> = lower_unix_ms.iter().map(|&ms| compact_utc(ms)).collect();
    let (keep, _) = PRECISIONS
        .iter()
        .copied()
        .find(|(keep, tail)| stamps.iter().all(|s| &s[*keep..] == *tail))
        .unwrap_or((19, ""));
    let room = NAME_MAX_BYTES - 1 - keep;
    let mut prefix_end = parent.len().min(room);
    while !parent.is_char_boundary(prefix_end) {
        prefix_end -= 1;
    }
    stamps
        .iter()
        .map(|s| format!("{}_{}", &parent[..prefix_end], &s[..keep]))
        .collect()
}

/// `YYYYMMDD_HHMISS_MS` in UTC.
fn compact_utc(unix_ms: i64) -> String {
    // "YYYY-MM-DD HH:MM:SS.mmm+00"
    let text = epoch::format(unix_ms);
    format!(
        "{}{}{}_{}{}{}_{}",
        &text[0..4],
        &text[5..7],
        &text[8..10],
        &text[11..13],
        &text[14..16],
        &text[17..19],
        &text[20..23]
    )
}

/// The parent's partitions in its own schema, by name, with their bounds as PostgreSQL prints
/// them.
fn existing_partitions(parent: &PgRelation) -> HashMap<String, String> {
    let _path = SafeSearchPath::set();
    Spi::connect(|client| {
        let rows = client.select(
            "SELECT c.relname::pg_catalog.text, pg_catalog.pg_get_expr(c.relpartbound, c.oid)
             FROM pg_catalog.pg_inherits i
             JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) i.inhrelid
             WHERE i.inhparent OPERATOR(pg_catalog.=) $1
               AND c.relnamespace OPERATOR(pg_catalog.=) $2",
            None,
            &[parent.oid().into(), parent.namespace_oid().into()],
        )?;
        let mut found = HashMap::new();
        for row in rows {
            if let (Some(name), Some(bound)) = (row.get::<String>(1)?, row.get::<String>(2)?) {
                found.insert(name, bound);
            }
        }
        Ok::<_, pgrx::spi::Error>(found)
    })
    .unwrap_or_else(|e| errors::catalog_read_failed(&e))
}

fn relation_exists(name: &str, namespace: pg_sys::Oid) -> bool {
    let Ok(name) = CString::new(name) else {
        return false;
    };
    // SAFETY: a catalog lookup with a NUL-terminated name.
    unsafe { pg_sys::get_relname_relid(name.as_ptr(), namespace) != pg_sys::InvalidOid }
}

/// An identifier quoted as PostgreSQL would, when it needs quoting.
fn quote(identifier: &str) -> String {
    let Ok(raw) = CString::new(identifier) else {
        return format!("\"{}\"", identifier.replace('"', "\"\""));
    };
    // SAFETY: quote_identifier reads a NUL-terminated string and returns it or a palloc'd copy.
    unsafe { CStr::from_ptr(pg_sys::quote_identifier(raw.as_ptr())) }
        .to_string_lossy()
        .into_owned()
}

extension_sql!(
    r#"
COMMENT ON FUNCTION snowid_partition_ddl(regclass, timestamptz, timestamptz, interval, int) IS
    E'CREATE TABLE IF NOT EXISTS statements for the range partitions of a table partitioned by its snowid column that do not exist yet, one per step from from_ts until to_ts, named after their lower bound in UTC; run them with \\gexec, as the table''s owner.';
"#,
    name = "partition_ddl_comment",
    requires = [snowid_partition_ddl]
);

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 86_400_000;
    /// 2026-03-01 00:00:00 UTC.
    const MARCH: i64 = 1_772_323_200_000;

    #[test]
    fn names_use_the_coarsest_exact_precision() {
        let months = [MARCH, MARCH + 31 * DAY];
        assert_eq!(names("t", &months), ["t_202603", "t_202604"]);
        let weeks = [MARCH, MARCH + 28 * DAY];
        assert_eq!(
            names("w4", &weeks),
            ["w4_20260301", "w4_20260329"],
            "28-day steps no longer collide on the month"
        );
        let hours = [MARCH + 3_600_000, MARCH + 7_200_000];
        assert_eq!(names("t", &hours), ["t_20260301_01", "t_20260301_02"]);
        let seconds = [MARCH, MARCH + 30_000];
        assert_eq!(
            names("t", &seconds),
            ["t_20260301_000000", "t_20260301_000030"]
        );
        let ms = [MARCH, MARCH + 1];
        assert_eq!(
            names("t", &ms),
            ["t_20260301_000000_000", "t_20260301_000000_001"]
        );
    }

    #[test]
    fn long_parent_names_keep_the_whole_suffix_within_63_bytes() {
        let parent = "é".repeat(40);
        let got = names(&parent, &[MARCH, MARCH + DAY]);
        assert!(got.iter().all(|n| n.len() <= NAME_MAX_BYTES), "{got:?}");
        assert_ne!(got[0], got[1]);
        assert!(got[0].ends_with("_20260301") && got[1].ends_with("_20260302"));
    }
}
