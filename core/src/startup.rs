//! The one start-up decision: what the durable state is when a server first needs it after a
//! (re)start, or when `CREATE EXTENSION` or `ALTER EXTENSION ... UPDATE` makes sure it exists.
//!
//! Every case and its outcome:
//!
//! | the state's pages | an old version's file | the occasion | outcome |
//! |---|---|---|---|
//! | a readable state | (ignored) | any | loaded as it is, with its fence if it has one |
//! | damaged (a checksum failure, an unknown layout, a bad field) | (ignored) | any | created again, fenced as unreadable |
//! | missing (no file, fewer pages than the state has, block 0 never written), and a database's witness says the cluster had it | (ignored) | any | created fenced as lost |
//! | missing, no witness | there, judged at this start | any | created from the file, fenced if the file was stale or unreadable |
//! | missing, no witness | none | `CREATE EXTENSION` | created fresh under the configured epoch |
//! | missing, no witness | none | `ALTER EXTENSION ... UPDATE` from a version that did not create the state at install | created fresh, as that version would have at its first generation |
//! | missing, no witness | none | generation, where the database's snowid was installed by a version that did not create the state at install | created fresh, likewise |
//! | missing, no witness | none | generation, where the database's snowid was installed by this version | created fenced as lost: the state existed, and the IDs it covered are unknown |
//!
//! Only a cluster that never had the state starts fresh: since 0.4.0 `CREATE EXTENSION` creates
//! the state (with its WAL record) before any ID can be issued, and leaves a witness in its
//! database, so an installed extension without its state, or a witness without it, means the
//! state was lost, whether its file was deleted, cut or zeroed, or the cluster was made by
//! `pg_upgrade`, which carries neither over. Every outcome but "loaded" is
//! made durable (WAL flushed, and confirmed by the synchronous standbys) before anything uses it,
//! so a crash or an immediate stop cannot lose a verdict.

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
    /// `CREATE EXTENSION snowid` in some database.
    Install,
    /// `ALTER EXTENSION snowid UPDATE` from a version that did not create the state at install.
    UpdateFromOld,
    /// The first generation (or `snowid_info()`, release, resume) since the server started.
    Generate {
        /// Whether the calling database's snowid was installed by a version that did not create
        /// the state at install (0.1.0 to 0.3.0), so that a missing state may be a first start.
        installed_by_old_version: bool,
    },
}

/// The decision.
#[derive(Debug, PartialEq, Eq)]
pub enum StartUp {
    /// The pages hold the state: use it.
    Loaded(Box<DurableState>),
    /// Create the state with this header (and no released shard's last ID), durably, then use it.
    Create(Box<Header>),
}

/// Decides what the state is, from what the pages hold, whether a database witnesses that the
/// cluster had the state, what an old version's file says (already judged at this start, see
/// [`crate::legacy`]), and why it is needed.
pub fn decide(
    found: Found,
    witnessed: bool,
    old_file: Option<Header>,
    occasion: Occasion,
    epoch_unix_ms: i64,
) -> StartUp {
    let fenced = |fence| Header {
        fence: Some(fence),
        ..Header::fresh(epoch_unix_ms)
    };
    match found {
        Found::State(state) => StartUp::Loaded(state),
        Found::Damaged(_) => StartUp::Create(Box::new(fenced(Fence::Unreadable))),
        Found::Missing if witnessed => StartUp::Create(Box::new(fenced(Fence::Lost))),
        Found::Missing => StartUp::Create(Box::new(match (old_file, occasion) {
            (Some(imported), _) => imported,
            (None, Occasion::Install | Occasion::UpdateFromOld) => Header::fresh(epoch_unix_ms),
            (
                None,
                Occasion::Generate {
                    installed_by_old_version: true,
                },
            ) => Header::fresh(epoch_unix_ms),
            (
                None,
                Occasion::Generate {
                    installed_by_old_version: false,
                },
            ) => fenced(Fence::Lost),
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EPOCH: i64 = 1_767_225_600_000;
    const NEW: Occasion = Occasion::Generate {
        installed_by_old_version: false,
    };
    const OLD: Occasion = Occasion::Generate {
        installed_by_old_version: true,
    };
    const EVERY_OCCASION: [Occasion; 4] = [Occasion::Install, Occasion::UpdateFromOld, NEW, OLD];

    fn created(decision: StartUp) -> Header {
        match decision {
            StartUp::Create(header) => *header,
            StartUp::Loaded(state) => panic!("loaded {state:?}"),
        }
    }

    #[test]
    fn a_readable_state_is_loaded_whatever_the_occasion_or_old_file() {
        let state = DurableState::new(Header {
            fence: Some(Fence::Stale),
            ..Header::fresh(EPOCH - 5)
        });
        for occasion in EVERY_OCCASION {
            let decision = decide(
                Found::State(Box::new(state.clone())),
                true,
                Some(Header::fresh(EPOCH)),
                occasion,
                EPOCH,
            );
            assert_eq!(decision, StartUp::Loaded(Box::new(state.clone())));
        }
    }

    #[test]
    fn damaged_pages_are_created_again_fenced_as_unreadable() {
        for occasion in EVERY_OCCASION {
            let header = created(decide(
                Found::Damaged(Damage::NotAState),
                false,
                None,
                occasion,
                EPOCH,
            ));
            assert_eq!(header.fence, Some(Fence::Unreadable), "{occasion:?}");
        }
    }

    #[test]
    fn a_lost_state_is_fenced_where_this_version_installed_snowid() {
        // Guards against a deleted, cut or zeroed state file read as a first start: the new
        // state would begin at the clock, below every ID issued before.
        let header = created(decide(Found::Missing, false, None, NEW, EPOCH));
        assert_eq!(header.fence, Some(Fence::Lost));
        assert_eq!(header.epoch_unix_ms, EPOCH);
    }

    #[test]
    fn only_an_install_or_an_older_version_starts_fresh() {
        for occasion in [Occasion::Install, Occasion::UpdateFromOld, OLD] {
            let header = created(decide(Found::Missing, false, None, occasion, EPOCH));
            assert_eq!(header, Header::fresh(EPOCH), "{occasion:?}");
        }
    }

    #[test]
    fn a_witness_fences_a_missing_state_whatever_the_occasion() {
        // Guards against a fresh state where a database says the cluster had one: CREATE
        // EXTENSION in another database (or again in the same one) after the state file was
        // deleted, a database still on an old version's SQL, an old file left beside it.
        for occasion in EVERY_OCCASION {
            for old_file in [None, Some(Header::fresh(EPOCH - 9))] {
                let header = created(decide(Found::Missing, true, old_file, occasion, EPOCH));
                assert_eq!(header.fence, Some(Fence::Lost), "{occasion:?}");
            }
        }
    }

    #[test]
    fn an_old_versions_file_decides_wherever_the_state_is_missing() {
        // Guards against a fresh state beside an old version's file: its lease covers IDs issued
        // before, whichever database first needs the state.
        let imported = Header {
            lease_end_unix_ms: EPOCH + 90_000,
            fence: Some(Fence::Stale),
            ..Header::fresh(EPOCH - 1)
        };
        for occasion in EVERY_OCCASION {
            let header = created(decide(
                Found::Missing,
                false,
                Some(imported.clone()),
                occasion,
                EPOCH,
            ));
            assert_eq!(header, imported, "{occasion:?}");
        }
    }
}
