//! The operations that hand shards between servers, for superusers only:
//! - `snowid_release(shard)` hands a shard off: durably, so the server's standbys, restores and
//!   promoted standbys refuse it too, and recorded in every database, so that a lost state or
//!   `pg_upgrade` refuses it too;
//! - `snowid_take_back(shard, id)` takes back a shard released here, above its other owner's
//!   last ID: a separate, explicit act (a resume never takes a shard back; see [`super::resume`]).
//!
//! Like `setval`, neither is undone by ROLLBACK: each is durable when it returns. How they are
//! carried out, and recorded, is `crate::server::releases`.

use super::decode;
use crate::errors;
use crate::server::issuing::generating_state;
use crate::server::resumes::parts_of;
use crate::server::{releases, settings};
use pgrx::pg_sys;
use pgrx::prelude::*;
use snowid_core::layout::Shard;

/// The time base's new floor, as a timestamp.
pub(super) fn floor_timestamp(floor_unix_ms: i64) -> TimestampWithTimeZone {
    decode::timestamptz(floor_unix_ms)
        .unwrap_or_else(|| errors::exhausted(settings::epoch_unix_ms()))
}

/// Refuses, before any change, where no background worker can record a change of the released
/// shards in the databases: in single-user mode.
pub(super) fn needs_workers(what: &str) {
    // SAFETY: a plain read of a flag set at process start.
    if !unsafe { pg_sys::IsUnderPostmaster } {
        errors::single_user_mode(what);
    }
}

/// Releases a shard on this server, for handing it to another: from the moment this is called no
/// statement here issues another ID for it, and once it returns neither does any server that
/// replays this one's WAL, nor this one after its state is lost. Returns the last ID issued for
/// it.
#[pg_extern(volatile, strict)]
fn snowid_release(shard: i32) -> i64 {
    let Some(valid) = Shard::new(shard) else {
        errors::shard_out_of_range(shard)
    };
    let state = generating_state("snowid_release()");
    needs_workers("snowid_release()");
    releases::release(state, valid)
}

/// Takes back a shard released here, above an ID of that shard issued by its other owner.
#[pg_extern(volatile, strict)]
fn snowid_take_back(shard: i32, above_id: i64) -> TimestampWithTimeZone {
    let Some(valid) = Shard::new(shard) else {
        errors::shard_out_of_range(shard)
    };
    let parts = parts_of(above_id);
    if parts.shard != shard {
        errors::take_back_of_another_shard(shard, above_id, parts.shard);
    }
    let state = generating_state("snowid_take_back()");
    needs_workers("snowid_take_back()");
    floor_timestamp(releases::take_back(state, valid, parts))
}

extension_sql!(
    r#"
REVOKE ALL ON FUNCTION snowid_take_back(int, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION snowid_release(int) FROM PUBLIC;
COMMENT ON FUNCTION snowid_take_back(int, bigint) IS
    'Superuser: takes back a shard this server released, above an ID of that shard (its other owner''s last ID, from snowid_release there), durably, and records that in every database. Not undone by ROLLBACK. Returns the new floor of the time base.';
COMMENT ON FUNCTION snowid_release(int) IS
    'Superuser: stops this server, and every server that replays its WAL, issuing IDs for a shard, including in running statements, records that in every database, makes it durable, and returns the last ID issued for it. Not undone by ROLLBACK.';
"#,
    name = "operations",
    requires = [snowid_take_back, snowid_release]
);
