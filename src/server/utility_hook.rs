//! snowid's utility hook, installed at preload: what it does before PostgreSQL's own processing
//! of a utility statement.
//!
//! - `ALTER EXTENSION snowid ADD ...` in binary-upgrade mode: `pg_upgrade` is bringing a database
//!   with snowid in, and the state is fenced (see [`super::pg_upgrade`]);
//! - `CREATE DATABASE`: the copy of a template, with its record of the released shards, holds
//!   the cluster-wide lock shared, so that no change of the released shards rewrites the
//!   template's record meanwhile (see [`super::releases`]).

use crate::server::{pg_upgrade, releases};
use pgrx::pg_sys;
use pgrx::prelude::*;

static mut PREVIOUS_UTILITY_HOOK: pg_sys::ProcessUtility_hook_type = None;

/// Installs the hook. Call only from `_PG_init` during preload.
pub fn install() {
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
    unsafe { pg_upgrade::before_utility(pstmt) };
    // SAFETY: as above.
    if unsafe { creates_database(pstmt) } {
        releases::hold_for_database_copy();
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

/// Whether a utility statement is `CREATE DATABASE`.
///
/// # Safety
///
/// `pstmt` is a valid planned utility statement.
unsafe fn creates_database(pstmt: *mut pg_sys::PlannedStmt) -> bool {
    // SAFETY: guaranteed by the caller.
    unsafe {
        let node = (*pstmt).utilityStmt;
        !node.is_null() && (*node).type_ == pg_sys::NodeTag::T_CreatedbStmt
    }
}
