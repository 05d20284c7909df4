//! What `CREATE EXTENSION snowid` and `ALTER EXTENSION snowid UPDATE` do beyond creating the
//! functions: make sure the durable state exists, so that from then on a missing state means a
//! lost one (see `crate::server::state::startup`).
//!
//! The scripts create a function for it, call it once, and drop it again, so that nothing is
//! left in the catalog for a user to call. Both work without preloading: the state is created in
//! a WAL record that any server replays.

use crate::errors;
use crate::server::settings;
use crate::server::state::startup;
use pgrx::prelude::*;
use snowid_core::startup::Occasion;

/// Creates the durable state if it is missing: fresh at install, as the old version would have
/// at an update from it, or as the start-up decision says if an old version's file is there or
/// the pages are damaged.
#[pg_extern(volatile, sql = false)]
fn snowid_create_state(occasion: &str) {
    let occasion = match occasion {
        "install" => Occasion::Install,
        "update" => Occasion::UpdateFromOld,
        other => errors::bad_argument(
            pgrx::PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("snowid cannot create its state for \"{other}\""),
            Some("Only the extension's install and update scripts call this function."),
        ),
    };
    if let Err(unavailable) = startup::ensure(occasion, settings::epoch_unix_ms()) {
        errors::state_unavailable(&unavailable)
    }
}

extension_sql!(
    r#"
-- The durable state, created once with the extension (see src/sql/install.rs).
CREATE FUNCTION snowid_create_state(occasion text) RETURNS void
STRICT VOLATILE LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_create_state_wrapper';
SELECT @extschema@.snowid_create_state('install');
DROP FUNCTION @extschema@.snowid_create_state(text);
"#,
    name = "create_state",
    finalize
);
