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
//! Their pages go through the buffer manager with a WAL record of their image, like the
//! state's, so standbys, restores and base backups have them, and a checkpoint cannot fall
//! between the record and the page. `pg_upgrade` carries none of them over: it carries no state
//! either (see `startup::fence_for_upgrade`).

use super::pages::{has_pages, locator_in, write_pages, Locator};
use pgrx::pg_sys;
use pgrx::prelude::*;
use snowid_core::durable::RELATION_NUMBER;

/// The cluster's own witness's number, in the global tablespace.
const CLUSTER_WITNESS: u32 = RELATION_NUMBER + 1;

/// What a witness page holds.
const CONTENTS: &[u8] = b"snowid witness: this cluster has had snowid's state";

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
        last = Some(write_pages(witness, &[CONTENTS.to_vec()]));
    }
    last
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
