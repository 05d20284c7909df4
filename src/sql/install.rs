//! What `CREATE EXTENSION snowid` and `ALTER EXTENSION snowid UPDATE` do beyond creating the
//! functions: make sure the durable state exists, so that from then on a missing state means a
//! lost one (see `crate::server::state::startup`), and have this database's record of the
//! released shards written from it when the transaction commits (see `crate::server::releases`).
//!
//! The scripts create a function for it, call it once, and drop it again, so that nothing is
//! left in the catalog for a user to call. Both work without preloading: the state is created in
//! a WAL record that any server replays.

use crate::server::{issuing, releases};
use pgrx::prelude::*;
use snowid_core::startup::Occasion;

/// Creates the durable state if it is missing, as start-up plans it for an install: fresh where
/// nothing witnesses that the cluster had it, fenced otherwise; then has this database's record
/// of the released shards written at commit, where the script made the table (0.6.0 on) and the
/// state knows them.
/// (The scripts of 0.2.0 to 0.5.0 declare it with an argument naming themselves, which it does
/// not read.)
#[pg_extern(volatile, sql = false)]
fn snowid_create_state() {
    issuing::start_up(Occasion::Install);
    releases::record_at_commit();
}

extension_sql!(
    r#"
-- Each database's record of the shards the cluster released, which carries them through a lost
-- state and pg_upgrade (see src/server/releases.rs); written when this transaction commits. A
-- heap table in the cluster's own tablespace, whatever the installer's
-- default_table_access_method and default_tablespace, so that every release can write it (a
-- columnar record refused the DELETE each release makes; one on her tablespace's full disk would
-- refuse its write); its types are PostgreSQL's own, whatever she created in her schemas.
CREATE TABLE snowid_released_shards (
    recorded_at pg_catalog.timestamptz NOT NULL,
    shards pg_catalog.int4[] NOT NULL,
    last_ids pg_catalog.int8[] NOT NULL,
    CHECK (pg_catalog.cardinality(shards) OPERATOR(pg_catalog.=) pg_catalog.cardinality(last_ids))
) USING heap TABLESPACE pg_default;
REVOKE ALL ON TABLE snowid_released_shards FROM PUBLIC;
GRANT SELECT ON TABLE snowid_released_shards TO PUBLIC;
COMMENT ON TABLE snowid_released_shards IS
    'The shards this cluster released, each with the last ID it was released at, as this database records them: what a resume that lifts a fence releases again. Written by snowid only.';
-- The durable state, created once with the extension (see src/sql/install.rs).
CREATE FUNCTION snowid_create_state() RETURNS void
VOLATILE LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_create_state_wrapper';
SELECT @extschema@.snowid_create_state();
DROP FUNCTION @extschema@.snowid_create_state();
"#,
    name = "create_state",
    finalize
);
