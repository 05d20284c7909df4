//! snowid's utility hook, installed at preload: what it does before PostgreSQL's own processing
//! of a utility statement.
//!
//! - `ALTER EXTENSION snowid ADD ...` in binary-upgrade mode: `pg_upgrade` is bringing a database
//!   with snowid in, and the state is fenced (see [`super::pg_upgrade`]);
//! - `CREATE DATABASE`: the copy of a template, with its record of the released shards, holds
//!   the cluster-wide lock shared, so that no change of the released shards rewrites the
//!   template's record meanwhile, and PostgreSQL's own lock on the template, never waiting for
//!   one while it holds the other (see [`super::cluster_lock::hold_for_database_copy`]).

use crate::server::{cluster_lock, pg_upgrade};
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
    if let Some(template) = unsafe { template_of_database_copy(pstmt) } {
        cluster_lock::hold_for_database_copy(template);
    }
    // The arguments, passed on as PostgreSQL gave them.
    macro_rules! pass_on_to {
        ($next:expr) => {
            $next(
                pstmt,
                query_string,
                read_only_tree,
                context,
                params,
                query_env,
                dest,
                qc,
            )
        };
    }
    // SAFETY: to the previous hook or to PostgreSQL's own processing (which pgrx binds as a
    // Rust function, not a pointer), the arguments as PostgreSQL gave them.
    unsafe {
        match PREVIOUS_UTILITY_HOOK {
            Some(previous) => pass_on_to!(previous),
            None => pass_on_to!(pg_sys::standard_ProcessUtility),
        }
    }
}

/// The template a `CREATE DATABASE` copies, if the statement is one and the template exists
/// (where it does not, PostgreSQL's own processing says so).
///
/// # Safety
///
/// `pstmt` is a valid planned utility statement.
unsafe fn template_of_database_copy(pstmt: *mut pg_sys::PlannedStmt) -> Option<pg_sys::Oid> {
    // SAFETY: guaranteed by the caller; a CreatedbStmt's options are DefElems, whose template
    // argument is a name (defGetString reads it as PostgreSQL's createdb does).
    unsafe {
        let node = (*pstmt).utilityStmt;
        if node.is_null() || (*node).type_ != pg_sys::NodeTag::T_CreatedbStmt {
            return None;
        }
        let options = (*node.cast::<pg_sys::CreatedbStmt>()).options;
        let count = match options.is_null() {
            true => 0,
            false => (*options).length.max(0) as usize,
        };
        let mut template = c"template1".as_ptr();
        for at in 0..count {
            let option = (*(*options).elements.add(at))
                .ptr_value
                .cast::<pg_sys::DefElem>();
            let name = std::ffi::CStr::from_ptr((*option).defname);
            if name == c"template" && !(*option).arg.is_null() {
                template = pg_sys::defGetString(option);
            }
        }
        let oid = pg_sys::get_database_oid(template, true);
        (oid != pg_sys::InvalidOid).then_some(oid)
    }
}
