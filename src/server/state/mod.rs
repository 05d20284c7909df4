//! snowid's durable state inside PostgreSQL: the pages that hold it, the WAL records that change
//! it, when a change may be used, and the one start-up decision.
//!
//! - [`pages`]: the relation `global/9128`, in the buffer manager;
//! - [`wal_records`]: snowid's WAL resource manager, its records and their replay;
//! - [`durability`]: a change is used only once flushed, and confirmed by synchronous standbys;
//! - [`startup`]: start-up carried out: what the state is when a server first needs it, at
//!   install, and while `pg_upgrade` brings databases in, as `snowid_core::startup` plans it;
//! - [`witness`]: the cluster's and each database's witness that the state existed;
//! - [`old_files`]: files earlier versions left, which count as witnesses;
//! - [`faults`]: fault points in the state's creation, and a WAL writer, for the tests (test
//!   builds only);
//! - here: [`persist`], one change made durable.
//!
//! Nothing here reads the settings or the rest of the runtime: callers pass what it needs.

pub mod durability;
pub mod faults;
pub mod old_files;
pub mod pages;
pub mod startup;
pub mod wal_records;
pub mod witness;

use durability::{flush, wait_for_sync_standbys};
use pgrx::prelude::*;
use snowid_core::durable::{Change, Unavailable};

/// Makes one change of the state durable: its WAL record with its pages, flushed; then
/// `in_force` runs, since the change holds here from then on; then the synchronous standbys
/// confirm it, if there are any. A cancel of that wait leaves the change durable and in force
/// here, and says so ([`Unavailable::NotReplicated`]).
pub fn persist(change: &Change, in_force: &mut dyn FnMut()) -> Result<(), Unavailable> {
    let lsn = pages::write(change).map_err(Unavailable::Damaged)?;
    flush(lsn);
    in_force();
    wait_for_sync_standbys(lsn)
        .map_err(|_| Unavailable::NotReplicated(Box::new(change.clone())))?;
    if let Change::Promotion {
        timeline,
        base_unix_ms,
    } = change
    {
        log!(
            "snowid recorded its promotion to timeline {timeline}: its time base starts no earlier than {}",
            snowid_core::epoch::format(*base_unix_ms)
        );
    }
    Ok(())
}
