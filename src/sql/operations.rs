//! The operations that hand shards between servers, for superusers only:
//! - `snowid_release(shard)` hands a shard off: durably, so the server's standbys, restores and
//!   promoted standbys refuse it too, and recorded in every database, so that a lost state or
//!   `pg_upgrade` refuses it too;
//! - `snowid_take_back(shard, id)` takes back a shard released here, above its other owner's
//!   last ID: a separate, explicit act (a resume never takes a shard back; see [`super::resume`]).
//!
//! Like `setval`, neither is undone by ROLLBACK: each is durable when it returns.

use super::decode;
use crate::errors;
use crate::server::databases::release_records::ReleaseRecord;
use crate::server::databases::{self, Recorded};
use crate::server::issuing::{generating_state, generator, raise_refusal};
use crate::server::settings;
use crate::server::state::witness;
use pgrx::pg_sys;
use pgrx::prelude::*;
use snowid_core::durable::{Change, Unavailable};
use snowid_core::generator::Refused;
use snowid_core::layout::{self, Parts, Shard};
use snowid_core::shard_set::ShardSet;

/// An ID decoded, or the error for a negative one.
pub(super) fn parts_of(id: i64) -> Parts {
    layout::decompose(id).unwrap_or_else(|| errors::negative_id(id))
}

/// The time base's new floor, as a timestamp.
pub(super) fn floor_timestamp(floor_unix_ms: i64) -> TimestampWithTimeZone {
    decode::timestamptz(floor_unix_ms)
        .unwrap_or_else(|| errors::exhausted(settings::epoch_unix_ms()))
}

/// Records the released shards, as the durable state holds them now, in the cluster's witness and
/// in every database where snowid is installed. Returns what could not record them, for the caller to say: an ERROR
/// where a release would otherwise be forgotten with a lost state (`released` names it), a
/// WARNING where the worst that can follow is a shard refused again.
pub(super) fn record_releases(released: Option<(Shard, i64)>) {
    let Some(record) = ReleaseRecord::of_state() else {
        return;
    };
    witness::record_released(&record.shard_set());
    let Recorded { failed, .. } = databases::record_in_every_database(Some(&record));
    let Some((database, failure)) = failed.first() else {
        return;
    };
    match released {
        Some((shard, last_id)) => errors::release_not_recorded(
            shard.get(),
            last_id,
            database,
            failure.code.as_str(),
            &failure.message,
        ),
        None => {
            for (database, failure) in &failed {
                warning!(
                    "snowid could not record the released shards in database \"{database}\": {}; a lost state there would refuse them again, or forget one released since: SELECT snowid_release(<a released shard>) records them again",
                    failure.message
                );
            }
        }
    }
}

/// Refuses, before any change, where no background worker can record a change of the released
/// shards in the databases: in single-user mode.
fn needs_workers(what: &str) {
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
    let g = generator(state);
    // A fenced server's records are what its fence lifts with: refused before they are touched.
    if let Some(refused) = g.status().map_or_else(Some, |s| s.refusal()) {
        raise_refusal(refused, valid);
    }
    // Every record emptied first: one that cannot be written after the release then knows
    // nothing, rather than lists the released shards without this one.
    let Recorded { failed, .. } = databases::record_in_every_database(None);
    if let Some((database, failure)) = failed.first() {
        record_releases(None);
        errors::records_not_writable(database, failure.code.as_str(), &failure.message);
    }
    // The cluster's witness lists the shard before the release is made: a crash between them
    // leaves it listed, never missing.
    let mut listed = ReleaseRecord::of_state().map_or_else(ShardSet::empty, |r| r.shard_set());
    listed.insert(valid.index());
    witness::record_released(&listed);
    match g.release(valid) {
        Ok(last_id) => {
            record_releases(Some((valid, last_id)));
            last_id
        }
        Err(Refused::Persist(Unavailable::NotReplicated(change))) => {
            // Durable here all the same: recorded before the cancel is reported.
            if let Change::Release { last_id, .. } = *change {
                record_releases(Some((valid, last_id)));
            }
            raise_refusal(Refused::Persist(Unavailable::NotReplicated(change)), valid)
        }
        Err(refused) => {
            // Nothing released: the records back as the state has them, if it can be read.
            record_releases(None);
            raise_refusal(refused, valid)
        }
    }
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
    let taken = generator(state).take_back(parts);
    // Durable here even when the wait for the standbys was cancelled: recorded either way.
    if matches!(
        taken,
        Ok(_) | Err(Refused::Persist(Unavailable::NotReplicated(_)))
    ) {
        record_releases(None);
    }
    floor_timestamp(taken.unwrap_or_else(|refused| raise_refusal(refused, valid)))
}

extension_sql!(
    r#"
REVOKE ALL ON FUNCTION snowid_take_back(int, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION snowid_release(int) FROM PUBLIC;
COMMENT ON FUNCTION snowid_take_back(int, bigint) IS
    'Superuser: takes back a shard this server released, above an ID of that shard (its other owner''s last ID, from snowid_release there), durably. Not undone by ROLLBACK. Returns the new floor of the time base.';
COMMENT ON FUNCTION snowid_release(int) IS
    'Superuser: stops this server, and every server that replays its WAL, issuing IDs for a shard, including in running statements, durably, records that in every database, and returns the last ID issued for it. Not undone by ROLLBACK.';
"#,
    name = "operations",
    requires = [snowid_take_back, snowid_release]
);
