//! Files that earlier versions left in the data directory, as evidence only.
//!
//! - `snowid.state`: the durable state of snowid 0.1.0 and 0.2.0. This version no longer
//!   imports it: such a cluster goes through 0.4.0 first, or, if it comes straight here, finds
//!   its state missing with this file beside it and is fenced until resumed above the keys its
//!   databases hold.
//! - `snowid.upgraded`: the mark 0.3.0 and 0.4.0 left in a cluster started by `pg_upgrade`.
//!
//! Either proves that the cluster had a state, so where the state is missing it counts as a
//! witness (see [`super::startup`]). Neither is read, changed or removed: where the state
//! exists they decide nothing, and they can be deleted by hand.

use pgrx::prelude::*;
use std::path::Path;

const FILES: [&str; 2] = ["snowid.state", "snowid.upgraded"];

/// Whether an earlier version left one of its files in the data directory, logging which.
pub fn any_left() -> bool {
    let left: Vec<&str> = FILES
        .into_iter()
        .filter(|file| Path::new(file).exists())
        .collect();
    for file in &left {
        log!("snowid found \"{file}\", left by an earlier version: the cluster had a state");
    }
    !left.is_empty()
}
