//! The resumes, for superusers: from now on every ID this server issues is above IDs it could
//! not know (another server's, a `pg_upgrade`'s, a lost state's), and a fence, if any, lifts.
//!
//! - `snowid_resume_above(id)` resumes above a number. On a fenced server it reads every
//!   database first and resumes above their keys too: a fence lifts only above what every
//!   database holds, whichever statement lifts it.
//! - `snowid_resume_above_columns(released)` resumes above the highest snowid key of every
//!   database, and lists the columns it read: the one statement a fenced cluster needs.
//!
//! A resume that lifts a fence also releases again every shard the databases record as released
//! (the re-created state holds no release), before the fence lifts, and records the result in
//! every database again. It refuses, changing nothing:
//! - while a transaction is prepared (its rows are invisible to it);
//! - where a key column holds values that are not IDs (it cannot tell how high they go);
//! - where no database knows which shards were released, unless `released` names them;
//! - where the highest key is dated more than [`REVIEW_AHEAD_MS`] ahead of this server's clock,
//!   further than snowid issues ahead of it, unless that key is given by number: a key stored by
//!   hand (any database owner can install snowid) could otherwise move every shard far ahead.
//!
//! A resume never takes a released shard back: `snowid_take_back` does.

use super::operations::{floor_timestamp, parts_of, record_releases};
use crate::errors;
use crate::server::databases::release_records::{Records, ReleaseRecord};
use crate::server::databases::survey::{DatabaseReport, KeyColumn};
use crate::server::databases::survey_every_database;
use crate::server::issuing::{generating_state, generator, raise_refusal};
use crate::server::settings;
use crate::server::state::witness;
use pgrx::prelude::*;
use snowid_core::clock::SystemClock;
use snowid_core::generator::{Shared, Status};
use snowid_core::host::Clock;
use snowid_core::layout::{self, Shard};

/// How far ahead of this server's clock the key a resume rises above may be dated before a
/// superuser must give it by number: far beyond `snowid.max_lead` and any clock a restore is
/// likely to start with, far short of the day a resume may move the time base at most.
pub const REVIEW_AHEAD_MS: i64 = 3_600_000;

/// What every database of the cluster holds, read for a resume.
struct Holdings {
    databases: Vec<DatabaseReport>,
}

impl Holdings {
    /// Reads every database, refusing (having changed nothing) where a prepared transaction
    /// hides rows or a key column holds values that are not IDs.
    fn read() -> Holdings {
        let databases = survey_every_database();
        let unreadable: Vec<(String, String, String, i64)> = databases
            .iter()
            .flat_map(|d| {
                d.unreadable().map(|c| {
                    (
                        d.database.clone(),
                        c.table.clone(),
                        c.column.clone(),
                        c.unreadable,
                    )
                })
            })
            .collect();
        if !unreadable.is_empty() {
            errors::keys_unreadable(&unreadable);
        }
        Holdings { databases }
    }

    /// The databases where snowid is installed.
    fn installed(&self) -> impl Iterator<Item = &DatabaseReport> {
        self.databases.iter().filter(|d| d.snowid.is_some())
    }

    /// The key column with the highest key, and its database.
    fn highest(&self) -> Option<(&DatabaseReport, &KeyColumn)> {
        self.databases
            .iter()
            .filter_map(|d| d.highest.as_ref().map(|c| (d, c)))
            .max_by_key(|(_, c)| c.max_id)
    }

    /// The ID to resume above: `given`, or the highest key if that is higher, which must not be
    /// dated more than [`REVIEW_AHEAD_MS`] ahead of this server's clock. Says in a NOTICE when
    /// the key that sets the floor is dated further ahead than snowid issues.
    fn above(&self, state: &Shared, given: Option<i64>) -> i64 {
        let given = given.unwrap_or(0);
        let Some((database, column)) = self.highest() else {
            return given;
        };
        let Some(key) = column.max_id.filter(|&key| key > given) else {
            return given;
        };
        let epoch_unix_ms = settings::epoch_unix_ms();
        let key_unix_ms = layout::decompose(key).map_or(i64::MAX, |p| p.ms as i64 + epoch_unix_ms);
        let now_unix_ms = SystemClock
            .wall_ms()
            .max(state.time_base.read(SystemClock.monotonic_ms()).0);
        let ahead_ms = key_unix_ms.saturating_sub(now_unix_ms);
        if ahead_ms > REVIEW_AHEAD_MS {
            errors::key_far_ahead(
                &database.database,
                &column.table,
                &column.column,
                key,
                ahead_ms,
            );
        }
        if ahead_ms > settings::max_lead_ms() as i64 + 1000 {
            notice!(
                "snowid resumes above {key}, the highest key (in database \"{}\", {}.{}), which is dated {:.1} s ahead of this server's clock",
                database.database,
                column.table,
                column.column,
                ahead_ms as f64 / 1000.0
            );
        }
        key
    }

    /// The shards a resume that lifts a fence above `above` releases again: every one a database
    /// records or the cluster's witness lists, and every one `named`. Refuses where none of them
    /// knows and none are named. A shard whose last ID no record gives is released at the last ID
    /// of its own in `above`'s millisecond: above every key the databases hold.
    fn releases_for_fence(&self, named: Option<&[i32]>, above: i64) -> Vec<(Shard, i64)> {
        let listed: Vec<&ReleaseRecord> = self
            .installed()
            .filter_map(|d| match &d.releases {
                Records::Listed(record) => Some(record),
                Records::Unknown(_) => None,
            })
            .collect();
        let witness = witness::recorded_released();
        if listed.is_empty() && witness.is_none() && named.is_none() {
            let mut why: Vec<String> = self
                .installed()
                .filter_map(|d| match &d.releases {
                    Records::Unknown(why) => Some(format!("database \"{}\": {why}", d.database)),
                    Records::Listed(_) => None,
                })
                .collect();
            why.push(
                "the cluster's witness (global/9129) lists none: it was written before 0.6.0, or \
                 while the cluster was fenced, or by pg_upgrade"
                    .into(),
            );
            errors::releases_unknown(&why);
        }
        let mut record = listed
            .into_iter()
            .fold(ReleaseRecord::default(), |all, r| all.union(r));
        let unrecorded = witness
            .iter()
            .flat_map(|set| set.iter().map(|s| s as i32))
            .chain(named.unwrap_or_default().iter().copied());
        record = record.union(&ReleaseRecord {
            released: unrecorded.map(|shard| (shard, 0)).collect(),
        });
        let above_ms = layout::decompose(above).map_or(0, |p| p.ms);
        record
            .released
            .into_iter()
            .map(|(shard, last_id)| {
                let valid = Shard::new(shard).unwrap_or_else(|| errors::shard_out_of_range(shard));
                // A last ID of another shard says nothing of this one.
                let last_id = match layout::decompose(last_id) {
                    Some(p) if p.shard == shard && last_id > 0 => last_id,
                    _ => layout::compose(above_ms, shard, layout::MAX_SEQ).unwrap_or(0),
                };
                (valid, last_id)
            })
            .collect()
    }

    /// On a server that is not fenced, the state's releases stand: says in a NOTICE which
    /// shards a database records as released that this server issues (a record copied from
    /// another cluster, say), and how to refuse them here too.
    fn notice_releases_not_held(&self, state: &Shared) {
        for database in self.installed() {
            let Records::Listed(record) = &database.releases else {
                continue;
            };
            for &(shard, _) in &record.released {
                let held = Shard::new(shard).is_some_and(|s| state.shard(s).last().1);
                if !held {
                    notice!(
                        "database \"{}\" records snowid shard {shard} as released, and this server is not fenced, so its own state stands: it issues IDs for shard {shard}; to stop, SELECT snowid_release({shard});",
                        database.database
                    );
                }
            }
        }
    }
}

/// Whether the server is fenced, loading its state first if need be.
fn fenced(state: &'static Shared, shard: Shard) -> bool {
    matches!(
        generator(state)
            .status()
            .unwrap_or_else(|r| raise_refusal(r, shard)),
        Status::Fenced(_)
    )
}

/// Lifts a fence: releases again what `holdings` records (and `named`), resumes above `above`,
/// and records the releases in every database again.
fn lift_fence(
    state: &'static Shared,
    holdings: &Holdings,
    above: i64,
    named: Option<&[i32]>,
) -> i64 {
    let released = holdings.releases_for_fence(named, above);
    let above = parts_of(above);
    let shard = Shard::new(above.shard).unwrap_or_else(|| errors::shard_out_of_range(above.shard));
    let floor = generator(state)
        .resume_above_releasing(above, &released)
        .unwrap_or_else(|refused| raise_refusal(refused, shard));
    if !released.is_empty() {
        let list: Vec<String> = released.iter().map(|(s, _)| s.get().to_string()).collect();
        notice!(
            "snowid shards {} stay released, as the cluster recorded them: a resume never takes a shard back; to take one back, SELECT snowid_take_back(<shard>, <its other owner's last ID>);",
            list.join(", ")
        );
    }
    record_releases(None);
    floor
}

/// Says in a NOTICE that `shard` stays released.
fn notice_if_released(state: &Shared, shard: Shard) {
    if state.shard(shard).last().1 {
        notice!(
            "snowid shard {} stays released: a resume never takes a shard back; to take it back, SELECT snowid_take_back({}, <its other owner's last ID>);",
            shard.get(),
            shard.get()
        );
    }
}

/// Resumes above an ID issued elsewhere: a `pg_upgrade`, a logical copy, a shard handed over, a
/// fence.
#[pg_extern(volatile, strict)]
fn snowid_resume_above(id: i64) -> TimestampWithTimeZone {
    let given = parts_of(id);
    let shard = Shard::new(given.shard).unwrap_or_else(|| errors::shard_out_of_range(given.shard));
    let state = generating_state("snowid_resume_above()");
    let floor = if fenced(state, shard) {
        let holdings = Holdings::read();
        let above = holdings.above(state, Some(id));
        lift_fence(state, &holdings, above, None)
    } else {
        generator(state)
            .resume_above(given)
            .unwrap_or_else(|refused| raise_refusal(refused, shard))
    };
    notice_if_released(state, shard);
    floor_timestamp(floor)
}

/// A row of the cluster-wide resume: a database, a key column's table and name, and its highest
/// key.
pub type ColumnRow = (String, Option<String>, Option<String>, Option<i64>);

/// Resumes above the highest snowid key of every database, and lists every key column read.
/// (The Rust name differs from the SQL one so that 0.5.0's shape, with no argument, keeps its
/// own symbol: see [`super::old_shapes`].)
#[pg_extern(volatile, name = "snowid_resume_above_columns")]
#[allow(clippy::type_complexity)] // pgrx reads the row's columns from the tuple written out here.
fn resume_above_every_column(
    released: default!(Option<Vec<i32>>, "NULL"),
) -> TableIterator<
    'static,
    (
        name!(database, String),
        name!(tbl, Option<String>),
        name!(col, Option<String>),
        name!(max_id, Option<i64>),
    ),
> {
    TableIterator::new(resume_above_columns(released.as_deref()))
}

/// What `snowid_resume_above_columns(released)` does, in either shape.
pub fn resume_above_columns(released: Option<&[i32]>) -> Vec<ColumnRow> {
    let state = generating_state("snowid_resume_above_columns()");
    let holdings = Holdings::read();
    if holdings
        .databases
        .iter()
        .all(|d| d.columns.is_empty() && d.unlisted == 0)
    {
        errors::no_key_columns();
    }
    let above = holdings.above(state, None);
    let any = Shard::new(0).expect("shard 0 exists");
    if fenced(state, any) {
        lift_fence(state, &holdings, above, released);
    } else {
        if released.is_some() {
            errors::released_named_without_fence();
        }
        holdings.notice_releases_not_held(state);
        generator(state)
            .resume_above(parts_of(above))
            .unwrap_or_else(|refused| raise_refusal(refused, any));
    }
    holdings
        .databases
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
                    d.highest.and_then(|h| h.max_id),
                )
            });
            listed.chain(unlisted).collect::<Vec<_>>()
        })
        .collect()
}

extension_sql!(
    r#"
REVOKE ALL ON FUNCTION snowid_resume_above(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION snowid_resume_above_columns(int[]) FROM PUBLIC;
COMMENT ON FUNCTION snowid_resume_above(bigint) IS
    'Superuser: from now on every ID this server issues is above this ID and dated after its millisecond, durably, and a fence is lifted (on a fenced server, above the highest snowid key of every database too, and with every release the databases record). Released shards stay released. For pg_upgrade, logical copies and shard hand-offs. Returns the new floor of the time base.';
COMMENT ON FUNCTION snowid_resume_above_columns(int[]) IS
    'Superuser: snowid_resume_above the highest value of every column, in every database of the cluster, whose default (or type''s default) calls snowid_next or that a snowid_fill_id trigger fills (partitions and children included); lists them. On a fenced server it also releases again every shard the databases record as released, and those named in released, which it needs where no database records them. The one statement a fenced cluster needs.';
"#,
    name = "resumes",
    requires = [snowid_resume_above, resume_above_every_column]
);
