//! The resumes: from now on every ID this server issues is above IDs it could not know (another
//! server's, a `pg_upgrade`'s, a lost state's), and a fence, if any, lifts.
//!
//! - Above a number ([`above_id`]). On a fenced server it reads every database first and
//!   resumes above their keys too: a fence lifts only above what every database holds, whichever
//!   statement lifts it.
//! - Above the highest snowid key of every database ([`above_every_column`]), listing the
//!   columns it read: the one statement a fenced cluster needs.
//!
//! A resume that lifts a fence also releases again every shard the databases or the cluster's
//! witness record as released (the re-created state holds no release), before the fence lifts
//! (see [`super::releases::lift_fence`]). It refuses, changing nothing:
//! - while a transaction is prepared (its rows are invisible to it);
//! - where a key column could not be read, or holds values that are not IDs (it cannot tell how
//!   high their keys go), naming each;
//! - where no database knows which shards were released, unless the superuser names them;
//! - where the highest key is dated further ahead of this server's wall clock than snowid
//!   issues, unless the superuser accepts it (`snowid_core::resume_above`).
//!
//! A superuser can always lift a fence knowingly: by leaving out the databases it cannot read,
//! after resuming above their keys by number. A resume never takes a released shard back:
//! `snowid_take_back` does.

use crate::errors;
use crate::server::cluster_lock::ClusterLock;
use crate::server::databases::survey::{DatabaseReport, KeyColumn};
use crate::server::databases::survey_every_database;
use crate::server::issuing::{generator, raise_refusal};
use crate::server::releases;
use crate::server::settings;
use crate::server::state::witness;
use pgrx::prelude::*;
use snowid_core::clock::SystemClock;
use snowid_core::generator::{Shared, Status};
use snowid_core::host::Clock;
use snowid_core::layout::{self, Parts, Shard};
use snowid_core::release_records::{self, Record};
use snowid_core::resume_above::{self, Above, HeldKey, KeyAhead, Limits};

/// Where a key is held: its database, table and column.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Place {
    database: String,
    table: String,
    column: String,
}

/// What the superuser said with a resume.
#[derive(Clone, Copy, Debug, Default)]
pub struct Said<'a> {
    /// The shards released, where no record knows (only for a resume that lifts a fence).
    pub released: Option<&'a [Shard]>,
    /// How far ahead of the wall clock a key may be dated.
    pub accepted_ahead_ms: Option<i64>,
    /// The databases not to read.
    pub skipped: &'a [String],
}

/// What every database of the cluster holds, read for a resume.
struct Holdings {
    databases: Vec<DatabaseReport>,
}

impl Holdings {
    /// Reads every database but the skipped ones, refusing (having changed nothing) where a
    /// prepared transaction hides rows or a key column could not be read; every hint keeps what
    /// the superuser said (`told`), and rises above every key read in a database it leaves out.
    fn read(told: &errors::Told) -> Holdings {
        let databases = survey_every_database(told);
        let unreadable: Vec<errors::UnreadableColumn> = databases
            .iter()
            .flat_map(|d| {
                d.unreadable().map(|c| errors::UnreadableColumn {
                    database: d.database.clone(),
                    table: c.table.clone(),
                    column: c.column.clone(),
                    why: why_unreadable(c),
                })
            })
            .collect();
        if !unreadable.is_empty() {
            // The highest key read where a column could not be: a resume that leaves those
            // databases out must rise above it too.
            let read_there = databases
                .iter()
                .filter(|d| d.unreadable().next().is_some())
                .flat_map(|d| d.columns.iter().map(move |c| (d, c)))
                .filter_map(|(d, c)| {
                    Some(errors::ReadThere {
                        id: c.max_id?,
                        database: d.database.clone(),
                        table: c.table.clone(),
                        column: c.column.clone(),
                    })
                })
                .max_by_key(|r| r.id);
            errors::keys_unreadable(&unreadable, read_there.as_ref(), told);
        }
        Holdings { databases }
    }

    /// The databases where snowid is installed.
    fn installed(&self) -> impl Iterator<Item = &DatabaseReport> {
        self.databases.iter().filter(|d| d.snowid.is_some())
    }

    /// The highest key any database holds, and where.
    fn highest(&self) -> Option<HeldKey<Place>> {
        self.databases
            .iter()
            .filter_map(|d| d.highest().map(|c| (d, c)))
            .max_by_key(|(_, c)| c.max_id)
            .and_then(|(d, c)| {
                Some(HeldKey {
                    id: c.max_id?,
                    at: Place {
                        database: d.database.clone(),
                        table: c.table.clone(),
                        column: c.column.clone(),
                    },
                })
            })
    }

    /// The ID to resume above: `given`, or the highest key if that is higher and dated no
    /// further ahead than snowid issues or the superuser accepted.
    fn above(&self, told: &errors::Told, accepted_ahead_ms: Option<i64>) -> i64 {
        let given = told.given;
        let limits = Limits {
            epoch_unix_ms: settings::epoch_unix_ms(),
            wall_unix_ms: SystemClock.wall_ms(),
            max_lead_ms: settings::max_lead_ms(),
            accepted_ahead_ms,
        };
        match resume_above::resume_above(given, self.highest(), &limits) {
            Ok(Above::Given(id)) => id,
            Ok(Above::Held { key, ahead_ms }) => {
                if ahead_ms > limits.unreviewed_ms() {
                    notice!(
                        "snowid resumes above {}, the highest key (in database \"{}\", {}.{}), which is dated {:.1} s ahead of this server's clock, as accepted",
                        key.id,
                        key.at.database,
                        key.at.table,
                        key.at.column,
                        ahead_ms as f64 / 1000.0
                    );
                }
                key.id
            }
            Err(KeyAhead { key, ahead_ms }) => errors::key_far_ahead(
                &key.at.database,
                &key.at.table,
                &key.at.column,
                key.id,
                ahead_ms,
                limits.unreviewed_ms(),
                told,
            ),
        }
    }

    /// The shards a fence lift above `above` releases again (see
    /// `snowid_core::release_records::to_release_again`); refuses where none is known.
    fn to_release_again(&self, named: Option<&[Shard]>, above: i64) -> Vec<(Shard, i64)> {
        let records: Vec<Record> = self.installed().map(|d| d.releases.record()).collect();
        let witness = witness::recorded_released();
        let refs: Vec<&Record> = records.iter().collect();
        release_records::to_release_again(&refs, witness.as_ref(), named, above).unwrap_or_else(
            |_| {
                let mut why: Vec<String> = self
                    .installed()
                    .zip(&records)
                    .filter_map(|(d, r)| match r {
                        Record::Unknown(why) => Some(format!("database \"{}\": {why}", d.database)),
                        Record::Listed(_) => None,
                    })
                    .collect();
                why.push(
                    "the cluster's witness (global/9129) lists none: it was written before \
                     0.6.0, or while the cluster was fenced, or by pg_upgrade"
                        .into(),
                );
                errors::releases_unknown(&why)
            },
        )
    }

    /// On a server that is not fenced, the state's releases stand: says in a NOTICE which
    /// shards a database records as released that this server issues (a record copied from
    /// another cluster, say), and how to refuse them here too.
    fn notice_releases_not_held(&self, state: &Shared) {
        for database in self.installed() {
            let Record::Listed(released) = database.releases.record() else {
                continue;
            };
            for (shard, _) in released.iter() {
                if !state.shard(shard).last().1 {
                    notice!(
                        "database \"{}\" records snowid shard {} as released, and this server is not fenced, so its own state stands: it issues IDs for shard {}; to stop, SELECT snowid_release({});",
                        database.database,
                        shard.get(),
                        shard.get(),
                        shard.get()
                    );
                }
            }
        }
    }

    /// One row per key column read.
    fn rows(self) -> Vec<ColumnRow> {
        self.databases
            .into_iter()
            .flat_map(|d| {
                let database = d.database;
                d.columns
                    .into_iter()
                    .map(move |c| (database.clone(), Some(c.table), Some(c.column), c.max_id))
            })
            .collect()
    }
}

/// Why a column cannot be risen above, in words.
fn why_unreadable(column: &KeyColumn) -> String {
    match (&column.unread, &column.first_not_id) {
        (Some(why), _) => why.clone(),
        (None, Some(value)) => format!(
            "{} of its values are not IDs in decimal digits, such as '{value}'",
            column.not_ids
        ),
        (None, None) => format!("{} of its values are not IDs", column.not_ids),
    }
}

/// A row of the cluster-wide resume: a database, a key column's table and name, and its highest
/// key.
pub type ColumnRow = (String, Option<String>, Option<String>, Option<i64>);

/// Whether the server is fenced, loading its state first if need be.
fn fenced(state: &'static Shared, shard: Shard) -> bool {
    matches!(
        generator(state)
            .status()
            .unwrap_or_else(|r| raise_refusal(r, shard)),
        Status::Fenced(_)
    )
}

/// Lifts the fence above what every database holds and `given`, with the lock taken before the
/// databases are read. Returns the new floor, and the holdings.
fn lift(state: &'static Shared, given: Option<i64>, said: &Said) -> (i64, Holdings) {
    let _lock = ClusterLock::for_a_change("this resume (it lifts the fence)");
    let told = errors::Told {
        skipped: said.skipped,
        given,
    };
    let holdings = Holdings::read(&told);
    if given.is_none() && holdings.databases.iter().all(|d| d.columns.is_empty()) {
        errors::no_key_columns();
    }
    // Which shards were released is asked first: only the superuser may know it.
    holdings.to_release_again(said.released, 0);
    let above = holdings.above(&told, said.accepted_ahead_ms);
    let again = holdings.to_release_again(said.released, above);
    let floor = releases::lift_fence(state, parts_of(above), &again);
    if !again.is_empty() {
        let list: Vec<String> = again.iter().map(|(s, _)| s.get().to_string()).collect();
        notice!(
            "snowid shards {} stay released, as the cluster recorded them: a resume never takes a shard back; to take one back, SELECT snowid_take_back(<shard>, <its other owner's last ID>);",
            list.join(", ")
        );
    }
    (floor, holdings)
}

/// An ID decoded, or the error for a negative one.
pub fn parts_of(id: i64) -> Parts {
    layout::decompose(id).unwrap_or_else(|| errors::negative_id(id))
}

/// Resumes above `id` (and, on a fenced server, above what every database but the skipped ones
/// holds). Returns the time base's new floor.
pub fn above_id(state: &'static Shared, id: i64, skipped: &[String]) -> i64 {
    let given = parts_of(id);
    let shard = Shard::new(given.shard).unwrap_or_else(|| errors::shard_out_of_range(given.shard));
    let floor = if fenced(state, shard) {
        let said = Said {
            skipped,
            ..Said::default()
        };
        lift(state, Some(id), &said).0
    } else {
        generator(state)
            .resume_above(given)
            .unwrap_or_else(|refused| raise_refusal(refused, shard))
    };
    if state.shard(shard).last().1 {
        notice!(
            "snowid shard {} stays released: a resume never takes a shard back; to take it back, SELECT snowid_take_back({}, <its other owner's last ID>);",
            shard.get(),
            shard.get()
        );
    }
    floor
}

/// Resumes above the highest snowid key of every database but the skipped ones, and lists
/// every key column read.
pub fn above_every_column(state: &'static Shared, said: &Said) -> Vec<ColumnRow> {
    let any = Shard::new(0).unwrap_or_else(|| errors::shard_out_of_range(0));
    if fenced(state, any) {
        let (_, holdings) = lift(state, None, said);
        return holdings.rows();
    }
    if said.released.is_some() {
        errors::released_named_without_fence();
    }
    let told = errors::Told {
        skipped: said.skipped,
        given: None,
    };
    let holdings = Holdings::read(&told);
    if holdings.databases.iter().all(|d| d.columns.is_empty()) {
        errors::no_key_columns();
    }
    let above = holdings.above(&told, said.accepted_ahead_ms);
    holdings.notice_releases_not_held(state);
    generator(state)
        .resume_above(parts_of(above))
        .unwrap_or_else(|refused| raise_refusal(refused, any));
    holdings.rows()
}
