//! The operations that move IDs between servers and lift fences, for superusers only:
//! - `snowid_release(shard)` hands a shard off: durably, so the server's standbys, restores and
//!   promoted standbys refuse it too;
//! - `snowid_resume_above(id)` makes every later ID greater than one issued where this server's
//!   state could not know it (another server, a `pg_upgrade`), and lifts a fence; a fence lifts
//!   only above what every database holds too, so on a fenced server it reads them first. It
//!   never takes a released shard back;
//! - `snowid_take_back(shard, id)` takes back a shard released here, above its other owner's
//!   last ID: a separate, explicit act;
//! - `snowid_resume_above_columns()` resumes above the highest snowid key of every database of
//!   the cluster, and lists them: the one statement a fenced cluster needs.

use super::decode;
use crate::errors;
use crate::server::issuing::{generating_state, generator, raise_refusal};
use crate::server::{settings, survey};
use pgrx::prelude::*;
use snowid_core::generator::{Shared, Status};
use snowid_core::layout::{self, Parts, Shard};

/// An ID decoded, or the error for a negative one.
fn parts_of(id: i64) -> Parts {
    layout::decompose(id).unwrap_or_else(|| errors::negative_id(id))
}

/// The time base's new floor, as a timestamp.
fn floor_timestamp(floor_unix_ms: i64) -> TimestampWithTimeZone {
    decode::timestamptz(floor_unix_ms)
        .unwrap_or_else(|| errors::exhausted(settings::epoch_unix_ms()))
}

/// Resumes above `id` (given decoded), and, where the server is fenced, above every database's
/// keys: read now, unless `id` already covers them (`read` true).
fn resume(state: &'static Shared, id: Parts, read: bool) -> TimestampWithTimeZone {
    let shard = Shard::new(id.shard).unwrap_or_else(|| errors::shard_out_of_range(id.shard));
    let g = generator(state);
    let fenced = matches!(
        g.status().unwrap_or_else(|r| raise_refusal(r, shard)),
        Status::Fenced(_)
    );
    let above = match fenced && !read {
        true => parts_of(highest_key(id, &survey::every_database())),
        false => id,
    };
    let floor = g
        .resume_above(above)
        .unwrap_or_else(|refused| raise_refusal(refused, shard));
    if state.shard(shard).last().1 {
        notice!(
            "snowid shard {} stays released: a resume never takes a shard back; to take it back, SELECT snowid_take_back({}, <its other owner's last ID>);",
            shard.get(),
            shard.get()
        );
    }
    floor_timestamp(floor)
}

/// The highest of `id` and every database's keys.
fn highest_key(id: Parts, databases: &[survey::DatabaseKeys]) -> i64 {
    let id = layout::compose(id.ms, id.shard, id.seq).unwrap_or(0);
    databases
        .iter()
        .filter_map(|d| d.highest)
        .fold(id, i64::max)
}

/// Resumes above an ID issued elsewhere: a `pg_upgrade`, a logical copy, a shard handed over, a
/// fence.
#[pg_extern(volatile, strict)]
fn snowid_resume_above(id: i64) -> TimestampWithTimeZone {
    let id = parts_of(id);
    resume(generating_state("snowid_resume_above()"), id, false)
}

/// Takes back a shard released here, above an ID of that shard issued by its other owner.
#[pg_extern(volatile, strict)]
fn snowid_take_back(shard: i32, above_id: i64) -> TimestampWithTimeZone {
    let Some(valid) = Shard::new(shard) else {
        errors::shard_out_of_range(shard)
    };
    let parts = parts_of(above_id);
    if parts.shard != shard {
        errors::take_back_of_another_shard(shard, above_id, parts.shard);
    }
    let state = generating_state("snowid_take_back()");
    let floor = generator(state)
        .take_back(parts)
        .unwrap_or_else(|refused| raise_refusal(refused, valid));
    floor_timestamp(floor)
}

/// Resumes above the highest snowid key of every database, and lists every key column read.
#[pg_extern(volatile)]
#[allow(clippy::type_complexity)] // pgrx reads the row's columns from the tuple written out here.
fn snowid_resume_above_columns() -> TableIterator<
    'static,
    (
        name!(database, String),
        name!(tbl, Option<String>),
        name!(col, Option<String>),
        name!(max_id, Option<i64>),
    ),
> {
    let state = generating_state("snowid_resume_above_columns()");
    let databases = survey::every_database();
    if databases
        .iter()
        .all(|d| d.columns.is_empty() && d.unlisted == 0)
    {
        errors::no_key_columns();
    }
    let highest = databases
        .iter()
        .filter_map(|d| d.highest)
        .max()
        .unwrap_or(0);
    resume(state, parts_of(highest), true);
    let rows: Vec<_> = databases
        .into_iter()
        .flat_map(|d| {
            let listed = d.columns.into_iter().map({
                let database = d.database.clone();
                move |c| (database.clone(), Some(c.table), Some(c.column), c.max_id)
            });
            let unlisted = (d.unlisted > 0).then(|| {
                (
                    d.database.clone(),
                    None,
                    Some(format!("({} more columns)", d.unlisted)),
                    d.highest,
                )
            });
            listed.chain(unlisted).collect::<Vec<_>>()
        })
        .collect();
    TableIterator::new(rows)
}

/// Releases a shard on this server, for handing it to another: from the moment this is called no
/// statement here issues another ID for it, and once it returns neither does any server that
/// replays this one's WAL. Returns the last ID issued for it.
#[pg_extern(volatile, strict)]
fn snowid_release(shard: i32) -> i64 {
    let Some(valid) = Shard::new(shard) else {
        errors::shard_out_of_range(shard)
    };
    let state = generating_state("snowid_release()");
    generator(state)
        .release(valid)
        .unwrap_or_else(|refused| raise_refusal(refused, valid))
}

extension_sql!(
    r#"
REVOKE ALL ON FUNCTION snowid_resume_above(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION snowid_take_back(int, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION snowid_release(int) FROM PUBLIC;
REVOKE ALL ON FUNCTION snowid_resume_above_columns() FROM PUBLIC;
COMMENT ON FUNCTION snowid_resume_above(bigint) IS
    'Superuser: from now on every ID this server issues is above this ID and dated after its millisecond, durably, and a fence is lifted (on a fenced server, above the highest snowid key of every database too). Released shards stay released. For pg_upgrade, logical copies and shard hand-offs. Returns the new floor of the time base.';
COMMENT ON FUNCTION snowid_take_back(int, bigint) IS
    'Superuser: takes back a shard this server released, above an ID of that shard (its other owner''s last ID, from snowid_release there), durably. Returns the new floor of the time base.';
COMMENT ON FUNCTION snowid_release(int) IS
    'Superuser: stops this server, and every server that replays its WAL, issuing IDs for a shard, including in running statements, durably, and returns the last ID issued for it.';
COMMENT ON FUNCTION snowid_resume_above_columns() IS
    'Superuser: snowid_resume_above the highest value of every column, in every database of the cluster, whose default calls snowid_next or that a snowid_fill_id trigger fills (partitions and children included); lists them. The one statement a fenced cluster needs.';
"#,
    name = "operations",
    requires = [
        snowid_resume_above,
        snowid_take_back,
        snowid_release,
        snowid_resume_above_columns
    ]
);
