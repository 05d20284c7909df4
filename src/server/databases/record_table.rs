//! One database's record of the shards the cluster released: the table `snowid_released_shards`
//! of the extension, one row listing every released shard with the last ID it was released at,
//! as of `recorded_at`. What a record means, and in which order the changes of the released
//! shards write it, is `snowid_core::release_records`; who writes it, and when, is
//! [`crate::server::releases`].
//!
//! - A database whose table has no row knows nothing: snowid was installed or updated there
//!   while the state was fenced (which knows no release either). One whose snowid is older than
//!   0.6.0 has no table.
//! - Only a table made by a superuser is read or written: that of the extension's own script,
//!   owned by the bootstrap superuser even where a database owner installed snowid (it is
//!   trusted), with no trigger and no rule. A table a database owner put in its place would let
//!   them run code as the superuser that writes it, or forge what the cluster released.
//! - `pg_dump` does not dump it (a logical copy carries no release: a server restored from one
//!   records its own), nor is it meant to be written by hand (SELECT is granted to everyone).

use super::failure::Failure;
use super::safe_search_path::SafeSearchPath;
use crate::server::waits;
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::prelude::*;
use serde::{Deserialize, Serialize};
use snowid_core::release_records::{Record, Released};

/// The table's name, in the extension's schema.
pub const TABLE: &str = "snowid_released_shards";

/// What a database records, as a worker reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Contents {
    /// Every released shard with its last ID.
    Listed(Vec<(i32, i64)>),
    /// Nothing, and why.
    Unknown(String),
}

impl Contents {
    pub fn record(&self) -> Record {
        match self {
            Contents::Listed(pairs) => Record::Listed(Released::from_pairs(pairs.iter().copied())),
            Contents::Unknown(why) => Record::Unknown(why.clone()),
        }
    }
}

/// Where the current database keeps its record.
enum Place {
    /// snowid is not installed.
    NotInstalled,
    /// snowid is installed in a version that keeps no record.
    NoTable { version: String },
    /// The table, qualified and quoted, and its OID.
    Table(String, pg_sys::Oid),
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
                    AND c.relam OPERATOR(pg_catalog.=) 2::pg_catalog.oid, -- heap
                c.oid
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
    let oid = row.get::<pg_sys::Oid>(4)?.unwrap_or(pg_sys::InvalidOid);
    Ok(match (row.get::<String>(2)?, row.get::<bool>(3)?) {
        (Some(table), Some(true)) => Place::Table(table, oid),
        (Some(table), _) => Place::Untrusted(format!(
            "its table {table} is not the extension's own (a superuser's heap table, with no trigger or rule)"
        )),
        (None, _) => Place::NoTable { version },
    })
}

/// What the current database records. Run with a safe `search_path`.
pub fn read(client: &pgrx::spi::SpiClient) -> Result<Contents, pgrx::spi::Error> {
    let table = match place(client)? {
        Place::Table(table, _) => table,
        Place::NotInstalled => {
            return Ok(Contents::Unknown("snowid is not installed there".into()))
        }
        Place::NoTable { version } => {
            return Ok(Contents::Unknown(format!(
                "its snowid {version} keeps no record of the released shards"
            )))
        }
        Place::Untrusted(why) => return Ok(Contents::Unknown(why)),
    };
    let mut listed: Option<Released> = None;
    for row in client.select(&format!("SELECT shards, last_ids FROM {table}"), None, &[])? {
        let shards = row.get::<Vec<Option<i32>>>(1)?.unwrap_or_default();
        let last_ids = row.get::<Vec<Option<i64>>>(2)?.unwrap_or_default();
        let pairs = shards
            .into_iter()
            .zip(last_ids)
            .filter_map(|(s, id)| Some((s?, id?)));
        listed = Some(
            listed
                .unwrap_or_default()
                .union(&Released::from_pairs(pairs)),
        );
    }
    Ok(match listed {
        Some(released) => Contents::Listed(released.pairs()),
        None => Contents::Unknown(
            "its record is empty: snowid was installed or updated there while the cluster was \
             fenced"
                .into(),
        ),
    })
}

/// What writing the current database's record came to.
pub enum Written {
    /// The record holds the new list.
    Record,
    /// There is no record to write: snowid is not installed, or its version keeps none.
    NoRecord,
    /// The table by the record's name is not snowid's own, and was not written; why.
    Untrusted(String),
}

/// Replaces the current database's record with `released` (shard, last ID pairs), in the
/// current transaction, waiting at most `waits::LOCK_WAIT` for a lock another transaction holds
/// on it (a `DROP EXTENSION` not yet committed, say). Raises the error of a write that fails.
pub fn write_here(released: &[(i32, i64)]) -> Result<Written, Failure> {
    let _path = SafeSearchPath::set();
    let spi = |e: pgrx::spi::Error| Failure::internal(e.to_string());
    let (table, oid) = match Spi::connect(place).map_err(spi)? {
        Place::Table(table, oid) => (table, oid),
        Place::NotInstalled | Place::NoTable { .. } => return Ok(Written::NoRecord),
        Place::Untrusted(why) => return Ok(Written::Untrusted(why)),
    };
    waits::lock_relation(oid, pg_sys::RowExclusiveLock, true)
        .map_err(|holders| Failure::table_locked(&table, &holders))?;
    Spi::connect_mut(|client| replace(client, &table, released)).map_err(spi)?;
    Ok(Written::Record)
}

/// Deletes every row of the table and inserts `released` as its one row.
fn replace(
    client: &mut pgrx::spi::SpiClient,
    table: &str,
    released: &[(i32, i64)],
) -> Result<(), pgrx::spi::Error> {
    client.update(&format!("DELETE FROM {table}"), None, &[])?;
    let shards: Vec<i32> = released.iter().map(|&(s, _)| s).collect();
    let last_ids: Vec<i64> = released.iter().map(|&(_, id)| id).collect();
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
