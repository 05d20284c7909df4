//! A change of Citus's record of the nodes, or of this node's group, calls for a new check.
//!
//! Citus's triggers on `pg_dist_node` and `pg_dist_local_group` invalidate those tables'
//! relcache entries when their rows change (a node added, removed or updated, the coordinator
//! set, this node's group given by the coordinator as it adds it, or reset to 0 by
//! `stop_metadata_sync_to_node`). The backend making the change processes that invalidation
//! itself when its command ends, before it commits, and every other backend of the database
//! before its next transaction and before it opens the next table it had not locked; the
//! callback registered here then calls for a new check, which empties the set the hot path reads
//! until it is done, and wakes the checker. So a check is due from before the change commits, and
//! the check waits for the change to commit before it reads (see `super::metadata::read`). The
//! callback is registered in the postmaster, so every process inherits it; it touches only
//! atomics in shared memory and a latch, as a callback that runs while invalidations are
//! processed must.

use super::segment::segment;
use pgrx::pg_sys;
use pgrx::prelude::*;

/// Registers the callback. Call only from `_PG_init` during `shared_preload_libraries`
/// processing.
pub fn register() {
    // SAFETY: a plain registration; PostgreSQL keeps the pointer for the process's life, and
    // forked processes inherit it.
    unsafe {
        pg_sys::CacheRegisterRelcacheCallback(Some(relcache_changed), pg_sys::Datum::from(0))
    };
}

/// A relcache entry was invalidated (`relid` invalid: all of them): if it is one of the two
/// tables the last check read, in its database, calls for a new check.
#[pg_guard]
unsafe extern "C-unwind" fn relcache_changed(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    let Some(segment) = segment() else {
        return;
    };
    let watched = segment.watched();
    // SAFETY: a plain read of this backend's database.
    let database = unsafe { pg_sys::MyDatabaseId };
    if database != watched.database || watched.database == pg_sys::InvalidOid {
        return;
    }
    if relid == pg_sys::InvalidOid
        || relid == watched.local_group_table
        || relid == watched.node_table
    {
        segment.want_check();
    }
}
