//! What `pg_upgrade` does to snowid: it brings databases with snowid keys into a new cluster but
//! none of snowid's state, so that cluster's state, whatever it held (nothing, or a trial of the
//! new cluster), is fenced as upgraded while the databases come in, durably, before the cluster
//! ever starts normally (see `snowid_core::startup`, occasion `PgUpgrade`).
//!
//! Only the new cluster of an upgrade from a cluster with snowid gets there, by either of two
//! ways, both in binary-upgrade mode:
//! - without preloading, `pg_upgrade` loads snowid into a backend of the new cluster to check that
//!   the old cluster's libraries are there: `_PG_init` runs then (the old cluster never loads
//!   snowid into a backend during an upgrade);
//! - preloaded, the library is already loaded, and the restore of each database with snowid adds
//!   the extension's members one by one (`ALTER EXTENSION snowid ADD ...`), which a utility hook
//!   sees.
//!
//! A cluster where no database had snowid is never fenced; nor is the old cluster, which is only
//! read (a `pg_upgrade --check`, or an upgrade abandoned in copy mode, leaves it generating).

use crate::server::issuing;
use crate::server::state::witness;
use pgrx::pg_sys;
use snowid_core::startup::Occasion;
use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// Whether this process has fenced the state for the upgrade already.
static FENCED: AtomicBool = AtomicBool::new(false);

/// Whether this process runs in a cluster started by `pg_upgrade`.
fn binary_upgrade() -> bool {
    // SAFETY: a plain read of a flag set before any library is loaded.
    unsafe { pg_sys::IsBinaryUpgrade }
}

/// Fences the state for `pg_upgrade`, once per process: the state is created again, fenced,
/// keeping nothing of what the cluster held (see `snowid_core::startup`, occasion `PgUpgrade`),
/// and the cluster's witness forgets its releases with it. The databases coming in bring their
/// records of the releases that are theirs; whatever this cluster held (after a trial of the new
/// cluster, say) is not theirs. The witness goes first: a crash before the fence leaves nothing
/// listed and the state as it was, which the next try fences.
fn fence_for_pg_upgrade() {
    if !FENCED.swap(true, Relaxed) {
        witness::forget_released();
        issuing::start_up(Occasion::PgUpgrade);
    }
}

/// Called by `_PG_init` when snowid is loaded into a backend (not preloaded): in binary-upgrade
/// mode, that is `pg_upgrade` checking the new cluster's libraries.
pub fn loaded_into_backend() {
    // SAFETY: a plain check that the load runs inside a transaction, as LOAD does.
    if binary_upgrade() && unsafe { pg_sys::IsTransactionState() } {
        fence_for_pg_upgrade();
    }
}

/// What the utility hook does for `pg_upgrade`: a database restored in binary-upgrade mode adds
/// snowid's members one by one (`ALTER EXTENSION snowid ADD ...`), and the first fences the
/// state.
///
/// # Safety
///
/// `pstmt` is a valid planned utility statement.
pub unsafe fn before_utility(pstmt: *mut pg_sys::PlannedStmt) {
    // SAFETY: guaranteed by the caller.
    if binary_upgrade() && unsafe { adds_to_snowid(pstmt) } {
        fence_for_pg_upgrade();
    }
}

/// Whether a utility statement is `ALTER EXTENSION snowid ADD ...`.
///
/// # Safety
///
/// `pstmt` is a valid planned utility statement.
unsafe fn adds_to_snowid(pstmt: *mut pg_sys::PlannedStmt) -> bool {
    // SAFETY: guaranteed by the caller; the node is read only after its tag says what it is.
    unsafe {
        let node = (*pstmt).utilityStmt;
        if node.is_null() || (*node).type_ != pg_sys::NodeTag::T_AlterExtensionContentsStmt {
            return false;
        }
        let stmt = node.cast::<pg_sys::AlterExtensionContentsStmt>();
        !(*stmt).extname.is_null() && CStr::from_ptr((*stmt).extname) == c"snowid"
    }
}
