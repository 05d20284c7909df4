//! On Citus: `snowid_citus_nodes()`, what this node's last check of its shards against the other
//! nodes found, for operators; and `snowid_citus_claim`, what a node answers another node's check
//! with (see `crate::server::citus`).

use crate::errors;
use crate::server::citus;
use crate::server::shared_memory;
use pgrx::prelude::*;
use snowid_core::shard_set::ShardSet;

/// This node's answer to the check of the node in `asker_group`, which claims `asker_claim`:
/// what this node claims (see `snowid_core::citus::Answer`). Called by that node's check over
/// Citus's connections, as the superuser.
#[pg_extern(volatile, strict, parallel_unsafe)]
fn snowid_citus_claim(asker_group: i32, asker_claim: &str) -> String {
    let asker_claim = ShardSet::parse(asker_claim)
        .unwrap_or_else(|e| errors::invalid_shard_set(asker_claim, &e.to_string()));
    if !shared_memory::preloaded() {
        // Not preloaded, this node generates nothing.
        return "hand:".into();
    }
    citus::answer(asker_group, &asker_claim)
}

/// Every node of the Citus cluster as this node's last check found it (checking first if a
/// check is due): this node first, then the others in Citus's order. No rows where Citus is not
/// preloaded.
#[allow(clippy::type_complexity)] // pgrx reads the row's columns from the written-out type
#[pg_extern(volatile, parallel_unsafe)]
fn snowid_citus_nodes() -> TableIterator<
    'static,
    (
        name!(node, String),
        name!(citus_group, i32),
        name!(this_node, bool),
        name!(by_hand, Option<bool>),
        name!(claims, String),
        name!(generates, Option<String>),
        name!(shared, String),
        name!(unanswered, Option<String>),
    ),
> {
    if !shared_memory::preloaded() {
        errors::not_preloaded("snowid_citus_nodes()");
    }
    let Some(report) = citus::in_use().then(citus::report).flatten() else {
        return TableIterator::new(Vec::new());
    };
    let this = std::iter::once((report.node.clone(), Some(report.generating.clone())));
    let others = report.peers.into_iter().map(|peer| (peer, None));
    let rows: Vec<_> = this
        .chain(others)
        .enumerate()
        .map(|(i, (node, generates))| {
            (
                node.name,
                node.group,
                i == 0,
                node.by_hand,
                node.claim,
                generates,
                node.shared,
                node.answer.err(),
            )
        })
        .collect();
    TableIterator::new(rows)
}

extension_sql!(
    r#"
REVOKE ALL ON FUNCTION snowid_citus_claim(int, text) FROM PUBLIC;
COMMENT ON FUNCTION snowid_citus_claim(int, text) IS
    'Superuser: what this Citus node claims, as another node''s check of its shards asks it over Citus''s connections (that node''s group and claim given, so that this node checks again if they make its last check out of date).';
COMMENT ON FUNCTION snowid_citus_nodes() IS
    'On Citus: every node of the cluster as this node''s last check of its shards found it (checking first if one is due): the shards each claims, the shards this node generates for, and those of its claim another node claims too, which neither generates for.';
"#,
    name = "citus",
    requires = [snowid_citus_claim, snowid_citus_nodes]
);
