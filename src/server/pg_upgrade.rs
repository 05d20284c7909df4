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
use pgrx::prelude::*;
use snowid_core::startup::Occasion;
use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

static mut PREVIOUS_UTILITY_HOOK: pg_sys::ProcessUtility_hook_type = None;

/// Whether this process has fenced the state for the upgrade already.
static FENCED: AtomicBool = AtomicBool::new(false);

/// Whether this process runs in a cluster started by `pg_upgrade`.
fn binary_upgrade() -> bool {
    // SAFETY: a plain read of a flag set before any library is loaded.
    unsafe { pg_sys::IsBinaryUpgrade }
}

/// Fences the state for `pg_upgrade`, once per process (see `snowid_core::startup`, occasion
/// `PgUpgrade`). The databases coming in bring their records of the releases; what this
/// cluster's witness listed (after a trial of the new cluster, say) is not theirs, and is
/// forgotten first: a crash before the fence leaves nothing listed.
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

/// Installs the utility hook that sees the extension's members restored in binary-upgrade mode.
/// Call only from `_PG_init` during preload.
pub fn install_hook() {
    // SAFETY: the postmaster runs this once while loading preloaded libraries, when hooks are
    // installed; the previous hook is kept and called.
    unsafe {
        PREVIOUS_UTILITY_HOOK = pg_sys::ProcessUtility_hook;
        pg_sys::ProcessUtility_hook = Some(utility_hook);
    }
}

#[pg_guard]
#[allow(clippy::too_many_arguments)]
unsafe extern "C-unwind" fn utility_hook(
    pstmt: *mut pg_sys::PlannedStmt,
    query_string: *const std::ffi::c_char,
    read_only_tree: bool,
    context: pg_sys::ProcessUtilityContext::Type,
    params: pg_sys::ParamListInfo,
    query_env: *mut pg_sys::QueryEnvironment,
    dest: *mut pg_sys::DestReceiver,
    qc: *mut pg_sys::QueryCompletion,
) {
    // SAFETY: PostgreSQL passes a valid planned utility statement.
    if binary_upgrade() && unsafe { adds_to_snowid(pstmt) } {
        fence_for_pg_upgrade();
    }
    // SAFETY: the arguments are passed on as PostgreSQL gave them, to the previous hook or to
    // PostgreSQL's own processing (which pgrx binds as a Rust function, not a pointer).
    unsafe {
        match PREVIOUS_UTILITY_HOOK {
            Some(previous) => previous(
                pstmt,
                query_string,
                read_only_tree,
                context,
                params,
                query_env,
                dest,
                qc,
            ),
            None => pg_sys::standard_ProcessUtility(
                pstmt,
                query_string,
                read_only_tree,
                context,
                params,
                query_env,
                dest,
                qc,
            ),
        }
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
