//! Witnesses that the cluster has had its state: one-page relations numbered like the state,
//! each left once the state is durable, and never removed by snowid:
//! - the cluster's own, `global/9129`, beside the state (`global/9128`), which outlives every
//!   database;
//! - one in each database where snowid was installed or generated, `base/<database>/9128`,
//!   removed with the database.
//!
//! If the state's file is lost, deleted, cut short or zeroed, a witness still says that the
//! state existed, so that neither `CREATE EXTENSION` in another database, nor a `DROP
//! EXTENSION` and `CREATE EXTENSION` in the same one, nor a database dropped meanwhile, takes
//! the missing state for a first start (see [`super::startup`]). Since each is left only after
//! the state is durable, a witness that exists at all, even an empty file left by a crash
//! between its creation and its page, proves it.
//!
//! The cluster's witness also lists the shards the cluster released, once written with them (see
//! `snowid_core::durable::witness_to_bytes`): it outlives a lost or damaged state, `DROP
//! EXTENSION` and every database, so a fence lifts with the releases it lists. It is written
//! with every database's record, in the order `snowid_core::release_records` gives (a release
//! before it is made durable, a take-back and a fence lift after), so that it never lists less
//! than the state, whichever step a crash comes after (see `crate::server::releases`).
//!
//! Their pages go through the buffer manager with a WAL record of their image, like the
//! state's, so standbys, restores and base backups have them, and a checkpoint cannot fall
//! between the record and the page. `pg_upgrade` carries none of them over: it carries no state
//! either (see `snowid_core::startup`).

use super::pages::{first_page_contents, has_pages, locator_in, write_pages, Locator};
use pgrx::pg_sys;
use pgrx::prelude::*;
use snowid_core::durable::{witness_released, witness_to_bytes, RELATION_NUMBER};
use snowid_core::shard_set::ShardSet;

/// The cluster's own witness's number, in the global tablespace.
const CLUSTER_WITNESS: u32 = RELATION_NUMBER + 1;

fn cluster_witness() -> Locator {
    locator_in(
        pg_sys::GLOBALTABLESPACE_OID,
        pg_sys::InvalidOid,
        CLUSTER_WITNESS,
    )
}

fn database_witness(tablespace: pg_sys::Oid, database: pg_sys::Oid) -> Locator {
    locator_in(tablespace, database, RELATION_NUMBER)
}

/// Leaves the cluster's witness, and this database's unless `cluster_only`, where they are not
/// there yet. Call only once the state is durable. Returns the location of the last WAL record
/// written, to be made durable, if any.
pub fn leave(cluster_only: bool) -> Option<pg_sys::XLogRecPtr> {
    let mut witnesses = vec![cluster_witness()];
    if !cluster_only {
        // SAFETY: plain reads of this backend's database and its tablespace, set before it runs
        // SQL.
        witnesses
            .push(unsafe { database_witness(pg_sys::MyDatabaseTableSpace, pg_sys::MyDatabaseId) });
    }
    let mut last = None;
    for witness in witnesses.into_iter().filter(|&w| !has_pages(w)) {
        last = Some(write_pages(witness, &[witness_to_bytes(None)]));
    }
    last
}

/// Writes the cluster's witness listing `released`, and flushes its record. (The synchronous
/// standbys are not waited for: the list serves this server's own re-created state, and the
/// changes it lists reach them in their own records.)
pub fn record_released(released: &ShardSet) {
    let lsn = write_pages(cluster_witness(), &[witness_to_bytes(Some(released))]);
    // SAFETY: XLogFlush on a location this process inserted.
    unsafe { pg_sys::XLogFlush(lsn) };
}

/// Writes the cluster's witness listing nothing: for a cluster that `pg_upgrade` brings databases
/// into, whose own history (a trial of the new cluster, say) says nothing of theirs.
pub fn forget_released() {
    let lsn = write_pages(cluster_witness(), &[witness_to_bytes(None)]);
    // SAFETY: XLogFlush on a location this process inserted.
    unsafe { pg_sys::XLogFlush(lsn) };
}

/// The shards the cluster's witness lists as released, if it lists them.
pub fn recorded_released() -> Option<ShardSet> {
    witness_released(&first_page_contents(cluster_witness())?)
}

/// Whether the cluster, or any database of it, holds a witness: the cluster has had the state.
pub fn anywhere() -> bool {
    if exists(cluster_witness()) {
        return true;
    }
    let databases = Spi::connect(|client| {
        client
            .select(
                "SELECT oid, dattablespace FROM pg_catalog.pg_database",
                None,
                &[],
            )?
            .map(|row| {
                Ok((
                    row.get::<pg_sys::Oid>(1)?.unwrap_or(pg_sys::InvalidOid),
                    row.get::<pg_sys::Oid>(2)?.unwrap_or(pg_sys::InvalidOid),
                ))
            })
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    });
    // A catalog that cannot be read proves nothing either way: count it as a witness, so that
    // the state is fenced rather than started fresh.
    let Ok(databases) = databases else {
        return true;
    };
    databases
        .into_iter()
        .any(|(database, tablespace)| exists(database_witness(tablespace, database)))
}

/// Whether a witness's file exists, whatever it holds.
fn exists(witness: Locator) -> bool {
    let smgr = super::pages::smgr_of(witness);
    // SAFETY: a plain existence check, which opens nothing that stays open.
    unsafe { pg_sys::smgrexists(smgr, pg_sys::ForkNumber::MAIN_FORKNUM) }
}
