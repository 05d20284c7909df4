//! On Citus: `snowid_citus_nodes()`, what this node's last check of its shards against the other
//! nodes found, for operators; and what the check reads of this server's own IDs (see
//! `crate::server::citus`, where the check and the answers to other nodes are).

use crate::errors;
use crate::server::{citus, settings, shared_memory};
use pgrx::prelude::*;
use snowid_core::citus::Issued;
use snowid_core::clock::SystemClock;
use snowid_core::host::Clock;
use snowid_core::layout::{id_from_stamp, Shard, TIME_SHIFT};
use snowid_core::shard_set::ShardSet;

/// How the check on Citus reads this server's own IDs.
pub const OWN_IDS: citus::OwnIds = citus::OwnIds {
    outside: issued_outside,
    above,
};

/// Whether this server's next ID for `shard` is above `id`: its last ID for it is at or above
/// `id`, or its time base (which a resume raises) is past `id`'s millisecond.
fn above(shard: usize, id: i64) -> bool {
    let Some((state, shard)) = shared_memory::state().zip(Shard::new(shard as i32)) else {
        return true;
    };
    let (base_unix_ms, _) = state.time_base.read(SystemClock.monotonic_ms());
    let base_ms = base_unix_ms - settings::epoch_unix_ms();
    id_from_stamp(state.shard(shard).last().0, shard) >= id || base_ms > id >> TIME_SHIFT
}

/// The IDs this server issued since it started (or since the last crash restart) for shards
/// outside `claim` that it has not released: shards an earlier claim held (such as those of a
/// server that generated on its own before `citus_add_node` joined it to a cluster), with the
/// highest of those IDs. `None` where there are none.
fn issued_outside(claim: &ShardSet) -> Option<Issued> {
    let state = shared_memory::state()?;
    let mut shards = ShardSet::empty();
    let mut last_id = i64::MIN;
    for (n, (cell, tally)) in state.shards().iter().zip(state.tallies()).enumerate() {
        let (stamp, released) = cell.last();
        if claim.contains(n) || released || tally.issued() == 0 {
            continue;
        }
        let shard = Shard::new(n as i32)?;
        shards.insert(n);
        last_id = last_id.max(id_from_stamp(stamp, shard));
    }
    (!shards.is_empty()).then_some(Issued { shards, last_id })
}

/// Every node of the Citus cluster as this node's last check found it (waiting for a check that
/// is due first): this node first, then the others, in Citus's order, then the nodes that asked
/// this one without being in Citus's record here. No rows where Citus is not preloaded.
#[allow(clippy::type_complexity)] // pgrx reads the row's columns from the written-out type
#[pg_extern(volatile, parallel_unsafe)]
fn snowid_citus_nodes() -> TableIterator<
    'static,
    (
        name!(node, String),
        name!(citus_group, Option<i32>),
        name!(this_node, bool),
        name!(by_hand, Option<bool>),
        name!(claims, String),
        name!(generates, Option<String>),
        name!(shared, String),
        name!(unanswered, Option<String>),
        name!(own_group, Option<i32>),
        name!(issued_outside, Option<String>),
    ),
> {
    if !shared_memory::preloaded() {
        errors::not_preloaded("snowid_citus_nodes()");
    }
    let Some(report) = citus::in_use().then(citus::report).flatten() else {
        return TableIterator::new(Vec::new());
    };
    if report.left_out > 0 {
        warning!(
            "snowid_citus_nodes() leaves out {} nodes that share no shard with this one: the last \
             check's report holds about a thousand",
            report.left_out
        );
    }
    let this = std::iter::once((report.node.clone(), Some(report.generating.clone())));
    let others = report.peers.into_iter().map(|peer| (peer, None));
    let rows: Vec<_> = this
        .chain(others)
        .enumerate()
        .map(|(i, (node, generates))| {
            let about = node.about;
            (
                about.name,
                about.group,
                i == 0,
                about.by_hand,
                about.claim,
                generates,
                node.shared,
                about.unanswered,
                about.own_group,
                about
                    .issued
                    .map(|(shards, last)| format!("{shards} (up to ID {last})")),
            )
        })
        .collect();
    TableIterator::new(rows)
}

extension_sql!(
    r#"
COMMENT ON FUNCTION snowid_citus_nodes() IS
    'On Citus: every node of the cluster as this node''s last check of its shards found it (waiting for a check that is due): the shards each claims, the group each takes itself to be in, the shards this node generates for, and those of its claim another node claims too, which neither generates for.';
"#,
    name = "citus",
    requires = [snowid_citus_nodes]
);
