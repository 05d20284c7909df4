//! The resumes, for superusers: from now on every ID this server issues is above IDs it could
//! not know (another server's, a `pg_upgrade`'s, a lost state's), and a fence, if any, lifts.
//!
//! - `snowid_resume_above(id, skip_databases)` resumes above a number; on a fenced server above
//!   every database's keys too.
//! - `snowid_resume_above_columns(released, accept_ahead, skip_databases)` resumes above the
//!   highest snowid key of every database, and lists the columns it read: the one statement a
//!   fenced cluster needs.
//!
//! What they read and when they refuse is `crate::server::resumes`; here the arguments are
//! checked.

use super::operations::floor_timestamp;
use crate::errors;
use crate::server::issuing::generating_state;
use crate::server::resumes::{self, ColumnRow, Said};
use pgrx::datum::Interval;
use pgrx::prelude::*;
use snowid_core::layout::Shard;

/// The databases not to read, checked.
fn skipped(databases: Option<Vec<Option<String>>>) -> Vec<String> {
    databases
        .unwrap_or_default()
        .into_iter()
        .map(|name| name.unwrap_or_else(|| errors::null_in_argument("skip_databases")))
        .collect()
}

/// The shards named as released, checked.
fn named_shards(released: Option<Vec<Option<i32>>>) -> Option<Vec<Shard>> {
    released.map(|shards| {
        shards
            .into_iter()
            .map(|shard| {
                let shard = shard.unwrap_or_else(|| errors::null_in_argument("released"));
                Shard::new(shard).unwrap_or_else(|| errors::shard_out_of_range(shard))
            })
            .collect()
    })
}

/// An accepted lead over the clock, in milliseconds, checked.
fn accepted_ms(accept_ahead: Option<Interval>) -> Option<i64> {
    accept_ahead.map(|interval| {
        let ms = i64::from(interval.months())
            .saturating_mul(30 * 86_400_000)
            .saturating_add(i64::from(interval.days()).saturating_mul(86_400_000))
            .saturating_add(interval.micros() / 1000);
        if ms < 0 {
            errors::negative_accept_ahead();
        }
        ms
    })
}

/// `snowid_resume_above(id bigint, skip_databases text[] DEFAULT NULL)`: resumes above an ID
/// issued elsewhere (a `pg_upgrade`, a logical copy, a shard handed over, a fence). A null ID
/// resumes nothing and returns null, as the function's earlier, strict shape did.
///
/// Its symbol is also that of 0.6.0's `snowid_resume_above(id bigint)`, which databases not yet
/// updated call with one argument: an argument not passed is a `skip_databases` of none. (The
/// SQL is written below, since pgrx would declare the call's `fcinfo` as no argument.)
#[pg_extern(volatile, sql = false)]
fn snowid_resume_above(fcinfo: pgrx::pg_sys::FunctionCallInfo) -> Option<TimestampWithTimeZone> {
    // SAFETY: PostgreSQL's call, with as many arguments as `nargs` says, of the declared types.
    let (id, skip_databases) = unsafe {
        let passed = (*fcinfo).nargs;
        (
            pgrx::fcinfo::pg_getarg::<i64>(fcinfo, 0),
            match passed > 1 {
                true => pgrx::fcinfo::pg_getarg::<Vec<Option<String>>>(fcinfo, 1),
                false => None,
            },
        )
    };
    resume_above(id?, skip_databases)
}

/// What `snowid_resume_above(id, skip_databases)` does, in any shape.
pub fn resume_above(
    id: i64,
    skip_databases: Option<Vec<Option<String>>>,
) -> Option<TimestampWithTimeZone> {
    let state = generating_state("snowid_resume_above()");
    Some(floor_timestamp(resumes::above_id(
        state,
        id,
        &skipped(skip_databases),
    )))
}

/// Resumes above the highest snowid key of every database, and lists every key column read.
/// (The Rust name differs from the SQL one so that the earlier shapes keep their own symbols:
/// see [`super::old_shapes`].)
#[pg_extern(volatile, name = "snowid_resume_above_columns")]
#[allow(clippy::type_complexity)] // pgrx reads the row's columns from the tuple written out here.
fn resume_above_every_key_column(
    released: default!(Option<Vec<Option<i32>>>, "NULL"),
    accept_ahead: default!(Option<Interval>, "NULL"),
    skip_databases: default!(Option<Vec<Option<String>>>, "NULL"),
) -> TableIterator<
    'static,
    (
        name!(database, String),
        name!(tbl, Option<String>),
        name!(col, Option<String>),
        name!(max_id, Option<i64>),
    ),
> {
    let released = named_shards(released);
    let skipped = skipped(skip_databases);
    TableIterator::new(resume_above_columns(&Said {
        released: released.as_deref(),
        accepted_ahead_ms: accepted_ms(accept_ahead),
        skipped: &skipped,
    }))
}

/// What `snowid_resume_above_columns(...)` does, in any shape.
pub fn resume_above_columns(said: &Said) -> Vec<ColumnRow> {
    let state = generating_state("snowid_resume_above_columns()");
    resumes::above_every_column(state, said)
}

extension_sql!(
    r#"
CREATE FUNCTION snowid_resume_above(
    "id" bigint,
    "skip_databases" TEXT[] DEFAULT NULL
) RETURNS timestamp with time zone
VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'snowid_resume_above_wrapper';
REVOKE ALL ON FUNCTION snowid_resume_above(bigint, text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION snowid_resume_above_columns(int[], interval, text[]) FROM PUBLIC;
COMMENT ON FUNCTION snowid_resume_above(bigint, text[]) IS
    'Superuser: from now on every ID this server issues is above this ID and dated after its millisecond, durably, and a fence is lifted (on a fenced server, above the highest snowid key of every database but those in skip_databases too, and with every release the databases record). Released shards stay released. For pg_upgrade, logical copies and shard hand-offs. Returns the new floor of the time base.';
COMMENT ON FUNCTION snowid_resume_above_columns(int[], interval, text[]) IS
    'Superuser: snowid_resume_above the highest value of every column, in every database of the cluster but those in skip_databases, whose default (or type''s default) calls snowid_next or that a snowid_fill_id trigger fills (partitions and children included), each read as its table''s owner; lists them. A key dated further ahead of the clock than snowid issues needs accept_ahead. On a fenced server it also releases again every shard the databases record as released, and those named in released, which it needs where no database records them. The one statement a fenced cluster needs.';
"#,
    name = "resumes",
    requires = [snowid_resume_above, resume_above_every_key_column]
);
