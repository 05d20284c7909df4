//! A witness, in each database where snowid was installed, that the cluster has had its state:
//! a one-page relation numbered 9128 in the database's own directory (`base/<database>/9128`),
//! created with a WAL record of its page, so that standbys, restores and base backups have it
//! too, and removed with the database.
//!
//! The state itself lives in `global/9128`; if that file is lost, the databases' witnesses
//! still say that the state existed, so that neither `CREATE EXTENSION` in another database, nor
//! a `DROP EXTENSION` and `CREATE EXTENSION` in the same one, nor a database still on an earlier
//! version's SQL, takes the missing state for a first start (see [`super::startup`]). `pg_upgrade`
//! carries no witness over, as it carries no state: its new cluster is fenced by the mark it
//! leaves instead.

use super::pages::{locator_in, smgr_of, ZERO_PAGE};
use pgrx::pg_sys;
use pgrx::prelude::*;

/// Leaves the witness in the current database if it is not there yet, and returns the location
/// of its WAL record, to be made durable with the change it accompanies.
pub fn leave() -> Option<pg_sys::XLogRecPtr> {
    // SAFETY: plain reads of this backend's database and its tablespace, set before it runs SQL.
    let mut locator = unsafe { locator_in(pg_sys::MyDatabaseTableSpace, pg_sys::MyDatabaseId) };
    let smgr = smgr_of(locator);
    // SAFETY: plain storage-manager calls on the relation's handle; the page is written
    // through the storage manager (as an index build writes its pages), then logged whole.
    unsafe {
        if pg_sys::smgrexists(smgr, pg_sys::ForkNumber::MAIN_FORKNUM)
            && pg_sys::smgrnblocks(smgr, pg_sys::ForkNumber::MAIN_FORKNUM) > 0
        {
            return None;
        }
        let mut page = ZERO_PAGE.0;
        pg_sys::PageInit(page.as_mut_ptr().cast(), page.len(), 0);
        if !pg_sys::smgrexists(smgr, pg_sys::ForkNumber::MAIN_FORKNUM) {
            pg_sys::smgrcreate(smgr, pg_sys::ForkNumber::MAIN_FORKNUM, false);
        }
        // The page is this process's own, in no shared buffer: logged first (which stamps it
        // with the record's location), then checksummed and written, as an index build writes
        // its pages.
        let mut block: pg_sys::BlockNumber = 0;
        let mut pages = [page.as_mut_ptr().cast()];
        pg_sys::log_newpages(
            &mut locator,
            pg_sys::ForkNumber::MAIN_FORKNUM,
            1,
            &mut block,
            pages.as_mut_ptr(),
            true,
        );
        // With data checksums on (the default of PostgreSQL 18's initdb), a page written past
        // the buffer manager needs its checksum set here, or base backups refuse the file.
        pg_sys::PageSetChecksumInplace(page.as_mut_ptr().cast(), 0);
        pg_sys::smgrextend(
            smgr,
            pg_sys::ForkNumber::MAIN_FORKNUM,
            0,
            page.as_ptr() as _,
            false,
        );
        Some(pg_sys::XactLastRecEnd)
    }
}

/// Whether any database of the cluster holds a witness: the cluster has had the state.
pub fn anywhere() -> bool {
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
    databases.into_iter().any(|(database, tablespace)| {
        let smgr = smgr_of(locator_in(tablespace, database));
        // SAFETY: a plain existence check of another database's file, which opens nothing that
        // stays open.
        unsafe { pg_sys::smgrexists(smgr, pg_sys::ForkNumber::MAIN_FORKNUM) }
    })
}
