//! What every part of the Citus check reads of how this server started: whether Citus is
//! preloaded beside snowid, and how the check reads this server's own IDs. Both are set once,
//! in the postmaster at start (see `super::init`), and inherited by every process.

use super::check::OwnIds;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::OnceLock;

/// Set in the postmaster when Citus is preloaded beside snowid.
static CITUS: AtomicBool = AtomicBool::new(false);

/// How the check reads this server's own IDs.
static OWN_IDS: OnceLock<OwnIds> = OnceLock::new();

/// Records how the check reads this server's own IDs, and whether Citus is preloaded.
pub fn set(own: OwnIds, citus: bool) {
    let _ = OWN_IDS.set(own);
    CITUS.store(citus, Relaxed);
}

/// Whether this server checks its shards against a Citus cluster.
#[inline(always)]
pub fn in_use() -> bool {
    CITUS.load(Relaxed)
}

/// How the check reads this server's own IDs; before [`set`], as if it had issued none.
pub fn own_ids() -> OwnIds {
    OWN_IDS.get().copied().unwrap_or(OwnIds {
        outside: |_| None,
        above: |_, _| true,
    })
}
