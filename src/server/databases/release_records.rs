//! Each database's record of the shards the cluster released: the table
//! `snowid_released_shards` of the extension, one row listing every released shard with the
//! last ID it was released at, as of `recorded_at`.
//!
//! The durable state holds the releases; this record carries them through every route that
//! re-creates the state: a lost, cut or damaged `global/9128` (the state is created again,
//! fenced, and holds no release) and `pg_upgrade` (which carries the table's file into the new
//! cluster, and no state). A resume that lifts a fence releases again every shard any database
//! records, before it lifts it (see `crate::sql::resume`).
//!
//! - Written at `CREATE EXTENSION` and `ALTER EXTENSION ... UPDATE`, in that transaction, from
//!   the durable state; and after every release, take-back and fence-lifting resume, into every
//!   database where snowid is installed, each by a background worker whose transaction commits
//!   whatever the caller's does (a release is not undone by ROLLBACK; its record must not be).
//! - A release empties every record before it is made, and writes them after: a database whose
//!   record could not be written after a release knows nothing, rather than holds a list without
//!   it.
//! - A database whose table has no row knows nothing: snowid was installed or updated there
//!   while the state was fenced (which knows no release either). One whose snowid is older than
//!   0.6.0 has no table. If no database knows, a fence does not lift until a superuser names the
//!   released shards (`snowid_resume_above_columns(released => ...)`).
//! - Only a table made by a superuser is read or written: that of the extension's own script,
//!   owned by the bootstrap superuser even where a database owner installed snowid (it is
//!   trusted). A table a database owner put in its place would let them run code as the
//!   worker's superuser, or forge what the cluster released.
//! - `pg_dump` does not dump it (a logical copy carries no release: a server restored from one
//!   records its own), nor is it meant to be written by hand (SELECT is granted to everyone).

use super::{Failure, SafeSearchPath};
use crate::server::state::{pages, witness};
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use serde::{Deserialize, Serialize};
use snowid_core::shard_set::ShardSet;
use snowid_core::startup::Found;
use std::collections::BTreeMap;

/// The table's name, in the extension's schema.
pub const TABLE: &str = "snowid_released_shards";

/// The released shards, each with the last ID it was released at, in shard order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseRecord {
    pub released: Vec<(i32, i64)>,
}

impl ReleaseRecord {
    /// Every shard either lists, at the higher last ID.
    pub fn union(&self, other: &ReleaseRecord) -> ReleaseRecord {
        let mut all: BTreeMap<i32, i64> = self.released.iter().copied().collect();
        for &(shard, last_id) in &other.released {
            let at = all.entry(shard).or_insert(last_id);
            *at = (*at).max(last_id);
        }
        ReleaseRecord {
            released: all.into_iter().collect(),
        }
    }

    /// The released shards, as a set.
    pub fn shard_set(&self) -> ShardSet {
        let mut set = ShardSet::empty();
        for &(shard, _) in &self.released {
            if let Ok(shard) = usize::try_from(shard) {
                set.insert(shard);
            }
        }
        set
    }

    /// The released shards as the durable state holds them, if it knows them: a fenced state
    /// (lost, damaged, upgraded) does not.
    pub fn of_state() -> Option<ReleaseRecord> {
        match pages::read() {
            Found::State(state) if state.header.fence.is_none() => Some(ReleaseRecord {
                released: state.released().map(|(s, id)| (s.get(), id)).collect(),
            }),
            _ => None,
        }
    }
}

/// What a database records of the released shards.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Records {
    /// Every shard the cluster had released when the record was last written.
    Listed(ReleaseRecord),
    /// Nothing, and why.
    Unknown(String),
}

/// Where the current database keeps its record.
enum Place {
    /// snowid is not installed.
    NotInstalled,
    /// snowid is installed in a version that keeps no record.
    NoTable { version: String },
    /// The table, qualified and quoted.
    Table(String),
    /// A table by that name that a superuser did not make, and why it is not used.
    Untrusted(String),
}

/// Finds the current database's record. Run with a safe `search_path`.
fn place(client: &pgrx::spi::SpiClient) -> Result<Place, pgrx::spi::Error> {
    let found = client.select(
        "SELECT e.extversion::pg_catalog.text,
                CASE WHEN c.oid IS NOT NULL
                     THEN pg_catalog.format('%I.%I', n.nspname, c.relname) END,
                a.rolsuper AND NOT c.relhastriggers AND NOT c.relhasrules
         FROM pg_catalog.pg_extension e
         JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace
         LEFT JOIN pg_catalog.pg_class c
           ON c.relnamespace OPERATOR(pg_catalog.=) e.extnamespace
          AND c.relname OPERATOR(pg_catalog.=) $1
          AND c.relkind OPERATOR(pg_catalog.=) 'r'
         LEFT JOIN pg_catalog.pg_roles a ON a.oid OPERATOR(pg_catalog.=) c.relowner
         WHERE e.extname OPERATOR(pg_catalog.=) 'snowid'",
        None,
        &[DatumWithOid::from(TABLE)],
    )?;
    if found.is_empty() {
        return Ok(Place::NotInstalled);
    }
    let row = found.first();
    let version = row.get::<String>(1)?.unwrap_or_default();
    Ok(match (row.get::<String>(2)?, row.get::<bool>(3)?) {
        (Some(table), Some(true)) => Place::Table(table),
        (Some(table), _) => Place::Untrusted(format!(
            "its table {table} is not the extension's own (a superuser's, with no trigger or rule)"
        )),
        (None, _) => Place::NoTable { version },
    })
}

/// What the current database records. Run with a safe `search_path`.
pub fn read(client: &pgrx::spi::SpiClient) -> Result<Records, pgrx::spi::Error> {
    let table = match place(client)? {
        Place::Table(table) => table,
        Place::NotInstalled => return Ok(Records::Unknown("snowid is not installed there".into())),
        Place::NoTable { version } => {
            return Ok(Records::Unknown(format!(
                "its snowid {version} keeps no record of the released shards"
            )))
        }
        Place::Untrusted(why) => return Ok(Records::Unknown(why)),
    };
    let mut record: Option<ReleaseRecord> = None;
    for row in client.select(&format!("SELECT shards, last_ids FROM {table}"), None, &[])? {
        let shards = row.get::<Vec<i32>>(1)?.unwrap_or_default();
        let last_ids = row.get::<Vec<i64>>(2)?.unwrap_or_default();
        let listed = ReleaseRecord {
            released: shards.into_iter().zip(last_ids).collect(),
        };
        record = Some(record.unwrap_or_default().union(&listed));
    }
    Ok(match record {
        Some(record) => Records::Listed(record),
        None => Records::Unknown(
            "its record is empty: snowid was installed or updated there while the cluster was \
             fenced"
                .into(),
        ),
    })
}

/// Replaces the current database's record with `record`, or empties it (`None`), in the current
/// transaction: for a worker (see [`super::worker`]), whose transaction is its own. Returns
/// whether there was a record to write (false where snowid is not installed, or is a version
/// that keeps none).
pub fn write_here(record: Option<&ReleaseRecord>) -> Result<bool, Failure> {
    let _path = SafeSearchPath::set();
    Spi::connect_mut(|client| {
        // The record need not wait for the synchronous standbys: it serves this server's own
        // re-created state, and the release it records is confirmed on them already. Nor may it
        // wait long for a lock held by the caller's own transaction, which waits for it.
        client.update("SET LOCAL synchronous_commit = local", None, &[])?;
        client.update("SET LOCAL lock_timeout = '10s'", None, &[])?;
        match place(client)? {
            Place::Table(table) => {
                replace(client, &table, record)?;
                Ok(Ok(true))
            }
            Place::NotInstalled | Place::NoTable { .. } => Ok(Ok(false)),
            Place::Untrusted(why) => Ok(Err(Failure::new("42501", why))),
        }
    })
    .map_err(|e: pgrx::spi::Error| Failure::new("XX000", e.to_string()))?
}

/// Fills the current database's record from the durable state, in the current transaction, and
/// the cluster's witness's list: for `CREATE EXTENSION` and `ALTER EXTENSION ... UPDATE`. A
/// fenced state knows no release, and both stay as they are.
pub fn fill_at_install() {
    let Some(record) = ReleaseRecord::of_state() else {
        return;
    };
    witness::record_released(&record.shard_set());
    let _path = SafeSearchPath::set();
    Spi::connect_mut(|client| match place(client)? {
        Place::Table(table) => replace(client, &table, Some(&record)),
        _ => Ok(()),
    })
    .unwrap_or_else(|e: pgrx::spi::Error| crate::errors::catalog_read_failed(&e));
}

/// Deletes every row of the table and inserts `record`, if any, as its one row.
fn replace(
    client: &mut pgrx::spi::SpiClient,
    table: &str,
    record: Option<&ReleaseRecord>,
) -> Result<(), pgrx::spi::Error> {
    client.update(&format!("DELETE FROM {table}"), None, &[])?;
    let Some(record) = record else {
        return Ok(());
    };
    let shards: Vec<i32> = record.released.iter().map(|&(s, _)| s).collect();
    let last_ids: Vec<i64> = record.released.iter().map(|&(_, id)| id).collect();
    client.update(
        &format!(
            "INSERT INTO {table} (recorded_at, shards, last_ids) \
             VALUES (pg_catalog.now(), $1, $2)"
        ),
        None,
        &[DatumWithOid::from(shards), DatumWithOid::from(last_ids)],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_union_keeps_every_shard_at_its_highest_last_id() {
        let a = ReleaseRecord {
            released: vec![(7, 100), (9, 5)],
        };
        let b = ReleaseRecord {
            released: vec![(7, 150), (3, 1)],
        };
        assert_eq!(
            a.union(&b).released,
            vec![(3, 1), (7, 150), (9, 5)],
            "in shard order, at the higher last ID"
        );
    }
}
