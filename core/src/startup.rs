//! The one start-up decision: what the durable state is when a server first needs it after a
//! (re)start, or when `CREATE EXTENSION` or `ALTER EXTENSION ... UPDATE` makes sure it exists;
//! and what `pg_upgrade` does to it.
//!
//! Every case and its outcome:
//!
//! | the state's pages | a witness that the cluster had the state | the occasion | outcome |
//! |---|---|---|---|
//! | a readable state | (not looked for) | any | loaded as it is, with its fence if it has one |
//! | damaged (a checksum failure, an unknown layout, a bad field) | (not looked for) | any | created again, fenced as unreadable |
//! | missing (no file, fewer pages than the state has, block 0 never written) | none | the extension installed or updated | created fresh under the configured epoch |
//! | missing | there | the extension installed or updated | created fenced as lost |
//! | missing | either | generation, release, resume, `snowid_info()` | created fenced as lost |
//!
//! A witness is anything that outlives a lost state and proves the cluster had one: the
//! cluster's own (`global/9129`) and each database's (`base/<database>/9128`), left once the
//! state is durable, or a file an earlier version left in the data directory.
//!
//! Generation never starts fresh: `CREATE EXTENSION` creates the state (in WAL) before any ID
//! can be issued, so an extension that generates without its state has lost it, whether its
//! file was deleted, cut or zeroed, or the cluster was made by `pg_upgrade`, which carries
//! neither the state nor the witnesses. Where nothing was ever issued, the state is created at
//! install and nothing is fenced; a crash or an error before its creation is durable leaves it
//! missing, and the next try decides again from the same evidence.
//!
//! Apart from these, [`fence_for_upgrade`]: while `pg_upgrade` brings a database with snowid
//! into a cluster, that cluster's state, whatever it held before (a trial of the new cluster,
//! say), is not the state of the IDs coming in, and is fenced.

use crate::durable::{Damage, DurableState, Fence, Header};

/// What the state's pages were found to hold.
#[derive(Debug)]
pub enum Found {
    /// No state: no file, fewer pages than the state has, or block 0 never written.
    Missing,
    State(Box<DurableState>),
    Damaged(Damage),
}

/// Why the state is needed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Occasion {
    /// `CREATE EXTENSION snowid`, or `ALTER EXTENSION snowid UPDATE` from a version that
    /// created the state at the first generation rather than at install.
    Install,
    /// Generation, a release, a resume, or `snowid_info()`: the first since the server started.
    Need,
}

/// The decision.
#[derive(Debug, PartialEq, Eq)]
pub enum StartUp {
    /// The pages hold the state: use it.
    Loaded(Box<DurableState>),
    /// Write this state over whatever the pages hold, durably, then use it.
    Create(Box<DurableState>),
}

/// Decides what the state is, from what the pages hold, whether anything witnesses that the
/// cluster had the state (looked up only for missing pages), and why it is needed.
pub fn decide(
    found: Found,
    witnessed: impl FnOnce() -> bool,
    occasion: Occasion,
    epoch_unix_ms: i64,
) -> StartUp {
    let created = |header| StartUp::Create(Box::new(DurableState::new(header)));
    match found {
        Found::State(state) => StartUp::Loaded(state),
        Found::Damaged(_) => created(Header::fenced(Fence::Unreadable, epoch_unix_ms)),
        Found::Missing if occasion == Occasion::Install && !witnessed() => {
            created(Header::fresh(epoch_unix_ms))
        }
        Found::Missing => created(Header::fenced(Fence::Lost, epoch_unix_ms)),
    }
}

/// What `pg_upgrade` bringing in a database with snowid makes of the cluster's state: the state
/// to write, fenced as upgraded, or `None` where it is fenced already. A state that is there
/// keeps everything else it records (its releases, its lease, its earliest epoch).
pub fn fence_for_upgrade(found: Found, epoch_unix_ms: i64) -> Option<DurableState> {
    match found {
        Found::State(state) if state.header.fence.is_some() => None,
        Found::State(mut state) => {
            state.header.fence = Some(Fence::Upgraded);
            Some(*state)
        }
        Found::Missing | Found::Damaged(_) => Some(DurableState::new(Header::fenced(
            Fence::Upgraded,
            epoch_unix_ms,
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EPOCH: i64 = 1_767_225_600_000;
    const EVERY_OCCASION: [Occasion; 2] = [Occasion::Install, Occasion::Need];

    fn created(decision: StartUp) -> Header {
        match decision {
            StartUp::Create(state) => state.header,
            StartUp::Loaded(state) => panic!("loaded {state:?}"),
        }
    }

    #[test]
    fn a_readable_state_is_loaded_whatever_the_occasion_and_no_witness_is_looked_for() {
        let state = DurableState::new(Header::fenced(Fence::Stale, EPOCH - 5));
        for occasion in EVERY_OCCASION {
            let decision = decide(
                Found::State(Box::new(state.clone())),
                || panic!("a witness looked up for a state that is there"),
                occasion,
                EPOCH,
            );
            assert_eq!(decision, StartUp::Loaded(Box::new(state.clone())));
        }
    }

    #[test]
    fn damaged_pages_are_created_again_fenced_as_unreadable() {
        for occasion in EVERY_OCCASION {
            for witnessed in [false, true] {
                let header = created(decide(
                    Found::Damaged(Damage::NotAState),
                    || witnessed,
                    occasion,
                    EPOCH,
                ));
                assert_eq!(header.fence, Some(Fence::Unreadable), "{occasion:?}");
            }
        }
    }

    #[test]
    fn generation_never_starts_fresh() {
        // Guards against a deleted, cut or zeroed state read as a first start where nothing
        // witnesses the state (a cluster made by pg_upgrade, every witness gone): the new state
        // would begin at the clock, below every ID issued before.
        for witnessed in [false, true] {
            let header = created(decide(Found::Missing, || witnessed, Occasion::Need, EPOCH));
            assert_eq!(header, Header::fenced(Fence::Lost, EPOCH));
        }
    }

    #[test]
    fn only_an_install_with_nothing_witnessed_starts_fresh() {
        let header = created(decide(Found::Missing, || false, Occasion::Install, EPOCH));
        assert_eq!(header, Header::fresh(EPOCH));
        // Guards against CREATE EXTENSION in another database (or again in the same one) after
        // the state was lost: a witness says the cluster had it.
        let header = created(decide(Found::Missing, || true, Occasion::Install, EPOCH));
        assert_eq!(header.fence, Some(Fence::Lost));
    }

    #[test]
    fn pg_upgrade_fences_whatever_state_the_cluster_held() {
        // Guards against a trial of the new cluster before pg_upgrade: its state, fresh and
        // unfenced, knows nothing of the IDs the upgraded databases hold.
        let mut trial = DurableState::new(Header::fresh(EPOCH));
        trial.header.lease_end_unix_ms = EPOCH + 9_000;
        trial.header.released.insert(7);
        trial.last_ids[7] = 12_345;
        let fenced = fence_for_upgrade(Found::State(Box::new(trial.clone())), EPOCH).unwrap();
        assert_eq!(fenced.header.fence, Some(Fence::Upgraded));
        assert_eq!(fenced.header.lease_end_unix_ms, EPOCH + 9_000);
        assert!(fenced.header.released.contains(7), "its releases are kept");
        assert_eq!(fenced.last_ids[7], 12_345);

        for found in [Found::Missing, Found::Damaged(Damage::NotAState)] {
            let created = fence_for_upgrade(found, EPOCH).unwrap();
            assert_eq!(created.header, Header::fenced(Fence::Upgraded, EPOCH));
        }
        // A fence already there stays as it is: nothing to write.
        let lost = DurableState::new(Header::fenced(Fence::Lost, EPOCH));
        assert_eq!(fence_for_upgrade(Found::State(Box::new(lost)), EPOCH), None);
    }
}
