//! Start-up, decided in one place: what the durable state is when a server first needs it after
//! a (re)start, when `CREATE EXTENSION` or `ALTER EXTENSION ... UPDATE` makes sure it exists,
//! and when `pg_upgrade` brings a database with snowid into the cluster; what must be written
//! before it is used; and what it lets generation do. The host reads (the pages, and only where
//! they hold no state, the witnesses), [`plan`] decides, and the host carries the plan out: it
//! writes, durably, then uses the state. Every case and its outcome:
//!
//! | the state's pages | a witness that the cluster had the state | the occasion | plan |
//! |---|---|---|---|
//! | a readable state | (not looked for) | install, need | use it as it is; on another WAL timeline than it recorded, when needed, record the promotion first |
//! | damaged (a checksum failure, an unknown layout, a bad field) | (not looked for) | install, need | create it again, fenced as unreadable |
//! | missing (no file, fewer pages than the state has, block 0 never written) | none | install | create it fresh under the configured epoch |
//! | missing | there | install | create it fenced as lost |
//! | missing | either | need | create it fenced as lost |
//! | any | (not looked for) | `pg_upgrade` | create it fenced as upgraded, keeping nothing of what was there |
//!
//! A state created records the timeline it is created on. "Need" is the first generation,
//! release, resume or `snowid_info()` since the server started. A witness is anything that
//! outlives a lost state and proves the cluster had one: the cluster's own (`global/9129`) and
//! each database's (`base/<database>/9128`), left once the state is durable, or a file an earlier
//! version left in the data directory.
//!
//! Generation never starts fresh: `CREATE EXTENSION` creates the state (in WAL) before any ID
//! can be issued, so an extension that generates without its state has lost it, whether its
//! file was deleted, cut or zeroed, or the cluster was made by `pg_upgrade`, which carries
//! neither the state nor the witnesses. Where nothing was ever issued, the state is created at
//! install and nothing is fenced; a crash or an error before its creation is durable leaves it
//! missing, and the next try plans again from the same evidence. While `pg_upgrade` brings a
//! database with snowid in, the cluster's state, whatever it held before (a trial of the new
//! cluster, say), is not the state of the IDs coming in: it is created again, fenced, with none of
//! its releases (the cluster's witness forgets them too, see the server's `pg_upgrade` module),
//! since the databases coming in bring their own records of the releases that are theirs.
//!
//! The first load on a WAL timeline the state has not recorded (a promoted standby, a
//! point-in-time restore) records the timeline; where a promotion margin is set and the state
//! recorded an earlier timeline (a promotion, rather than the first load of a state written
//! before timelines were recorded), its time-base floor rises to the wall clock plus `max_lead`
//! plus the margin: above whatever an old primary could have dated before it died, if the
//! clocks agree, even where its last leases were never received. A fence or a release is left as
//! it is.

use crate::durable::{Change, Damage, DurableState, Fence, Header};

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
    /// `CREATE EXTENSION snowid`, or `ALTER EXTENSION snowid UPDATE` (from a version that
    /// created the state at the first generation rather than at install, or any other).
    Install,
    /// Generation, a release, a resume, or `snowid_info()`: the first since the server started.
    Need,
    /// `pg_upgrade` is bringing a database with snowid into the cluster.
    PgUpgrade,
}

/// What the host read for the plan.
pub struct Reading<'a> {
    pub found: Found,
    /// Whether anything witnesses that the cluster had the state: asked only where the pages
    /// hold none, and only for an install.
    pub witnessed: &'a dyn Fn() -> bool,
    /// The WAL timeline the server writes on, or 0 where there is none (or it is not known).
    pub timeline: u32,
}

/// The settings and the clock the plan depends on.
#[derive(Clone, Copy, Debug)]
pub struct Context {
    pub epoch_unix_ms: i64,
    pub max_lead_ms: u64,
    /// How far past the wall clock plus `max_lead` the time base starts after a promotion;
    /// `None` leaves it where the state says.
    pub promotion_margin_ms: Option<u64>,
    /// The wall clock, in Unix milliseconds.
    pub now_wall_ms: i64,
}

/// Whether the server generates, as far as the shared state knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// The durable state has not been loaded since the server (re)started.
    NotLoaded,
    Generating,
    Fenced(Fence),
    EpochMovedLater {
        recorded_epoch_unix_ms: i64,
    },
}

impl Status {
    /// What a loaded state lets a server configured with `epoch_unix_ms` do. A fence comes
    /// first: a fenced state issued nothing under the epoch it records (see
    /// [`Header::epoch_unix_ms`]), so that epoch constrains nothing, and the fence lifts under
    /// whichever epoch is configured then.
    pub fn of(header: &Header, epoch_unix_ms: i64) -> Status {
        if let Some(fence) = header.fence {
            return Status::Fenced(fence);
        }
        if !header.allows_epoch(epoch_unix_ms) {
            return Status::EpochMovedLater {
                recorded_epoch_unix_ms: header.epoch_unix_ms,
            };
        }
        Status::Generating
    }
}

/// What must be written, durably, before the state is used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Write {
    Nothing,
    /// The whole state, over whatever the pages hold.
    State,
    /// One change of the state as the pages hold it.
    Change(Change),
}

/// The plan: what to write, the state once written, and what it lets generation do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub write: Write,
    pub state: DurableState,
    pub status: Status,
}

/// Decides what the state is, what to write first, and what generation may do (the table at the
/// top of this module).
pub fn plan(reading: Reading<'_>, occasion: Occasion, context: &Context) -> Plan {
    let created = |header| {
        let header = Header {
            timeline: reading.timeline,
            ..header
        };
        (DurableState::new(header), Write::State)
    };
    let epoch = context.epoch_unix_ms;
    let timeline = reading.timeline;
    let (state, write) = match (reading.found, occasion) {
        (_, Occasion::PgUpgrade) => created(Header::fenced(Fence::Upgraded, epoch)),
        (Found::State(mut state), _) => match promotion(&state.header, timeline, occasion, context)
        {
            Some(change) => {
                change.apply(&mut state);
                (*state, Write::Change(change))
            }
            None => (*state, Write::Nothing),
        },
        (Found::Damaged(_), _) => created(Header::fenced(Fence::Unreadable, epoch)),
        (Found::Missing, Occasion::Install) if !(reading.witnessed)() => {
            created(Header::fresh(epoch))
        }
        (Found::Missing, _) => created(Header::fenced(Fence::Lost, epoch)),
    };
    let status = Status::of(&state.header, epoch);
    Plan {
        write,
        state,
        status,
    }
}

/// The promotion a load for generation on a timeline the state has not recorded writes (see the
/// top of this module), if any.
fn promotion(
    header: &Header,
    timeline: u32,
    occasion: Occasion,
    context: &Context,
) -> Option<Change> {
    if occasion != Occasion::Need || timeline == 0 || timeline == header.timeline {
        return None;
    }
    let floor = match context.promotion_margin_ms {
        Some(margin_ms) if header.timeline != 0 => context
            .now_wall_ms
            .saturating_add(context.max_lead_ms.saturating_add(margin_ms) as i64),
        _ => header.base_unix_ms,
    };
    Some(Change::Promotion {
        timeline,
        base_unix_ms: floor.max(header.base_unix_ms),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const EPOCH: i64 = 1_767_225_600_000;
    const CONTEXT: Context = Context {
        epoch_unix_ms: EPOCH,
        max_lead_ms: 1_000,
        promotion_margin_ms: Some(2_000),
        now_wall_ms: EPOCH + 50_000,
    };

    fn planned(found: Found, witnessed: bool, timeline: u32, occasion: Occasion) -> Plan {
        plan(
            Reading {
                found,
                witnessed: &|| witnessed,
                timeline,
            },
            occasion,
            &CONTEXT,
        )
    }

    fn created(plan: Plan) -> Header {
        assert_eq!(plan.write, Write::State, "{plan:?}");
        plan.state.header
    }

    #[test]
    fn a_readable_state_is_used_as_it_is_and_no_witness_is_looked_for() {
        let state = DurableState::new(Header {
            timeline: 1,
            ..Header::fenced(Fence::Stale, EPOCH)
        });
        for occasion in [Occasion::Install, Occasion::Need] {
            let plan = plan(
                Reading {
                    found: Found::State(Box::new(state.clone())),
                    witnessed: &|| panic!("a witness looked up for a state that is there"),
                    timeline: 1,
                },
                occasion,
                &CONTEXT,
            );
            assert_eq!(plan.write, Write::Nothing);
            assert_eq!(plan.state, state);
            assert_eq!(plan.status, Status::Fenced(Fence::Stale));
        }
    }

    #[test]
    fn damaged_pages_are_created_again_fenced_as_unreadable() {
        for occasion in [Occasion::Install, Occasion::Need] {
            for witnessed in [false, true] {
                let plan = planned(Found::Damaged(Damage::NotAState), witnessed, 3, occasion);
                assert_eq!(plan.status, Status::Fenced(Fence::Unreadable));
                let header = created(plan);
                assert_eq!(
                    header.timeline, 3,
                    "created on the timeline it is created on"
                );
            }
        }
    }

    #[test]
    fn generation_never_starts_fresh() {
        // Guards against a deleted, cut or zeroed state read as a first start where nothing
        // witnesses the state (a cluster made by pg_upgrade, every witness gone): the new state
        // would begin at the clock, below every ID issued before.
        for witnessed in [false, true] {
            let plan = planned(Found::Missing, witnessed, 0, Occasion::Need);
            assert_eq!(plan.status, Status::Fenced(Fence::Lost));
            assert_eq!(created(plan), Header::fenced(Fence::Lost, EPOCH));
        }
    }

    #[test]
    fn only_an_install_with_nothing_witnessed_starts_fresh() {
        let plan = planned(Found::Missing, false, 1, Occasion::Install);
        assert_eq!(plan.status, Status::Generating);
        assert_eq!(
            created(plan),
            Header {
                timeline: 1,
                ..Header::fresh(EPOCH)
            }
        );
        // Guards against CREATE EXTENSION in another database (or again in the same one) after
        // the state was lost: a witness says the cluster had it.
        let plan = planned(Found::Missing, true, 1, Occasion::Install);
        assert_eq!(created(plan).fence, Some(Fence::Lost));
    }

    #[test]
    fn pg_upgrade_fences_whatever_state_the_cluster_held() {
        // Guards against a trial of the new cluster before pg_upgrade: its state, fresh and
        // unfenced, knows nothing of the IDs the upgraded databases hold.
        let mut trial = DurableState::new(Header::fresh(EPOCH));
        trial.header.lease_end_unix_ms = EPOCH + 9_000;
        trial.header.released.insert(7);
        trial.last_ids[7] = 12_345;
        let plan = planned(
            Found::State(Box::new(trial.clone())),
            false,
            1,
            Occasion::PgUpgrade,
        );
        assert_eq!(plan.status, Status::Fenced(Fence::Upgraded));
        let fresh = Header {
            timeline: 1,
            ..Header::fenced(Fence::Upgraded, EPOCH)
        };
        assert_eq!(created(plan.clone()), fresh, "nothing of the trial is kept");
        assert_eq!(plan.state.last_ids[7], 0);

        for found in [
            Found::Missing,
            Found::Damaged(Damage::NotAState),
            Found::State(Box::new(DurableState::new(Header::fenced(
                Fence::Lost,
                EPOCH,
            )))),
        ] {
            let header = created(planned(found, true, 1, Occasion::PgUpgrade));
            assert_eq!(header, fresh);
        }
    }

    #[test]
    fn the_first_need_on_a_new_timeline_records_the_promotion() {
        let mut header = Header {
            timeline: 1,
            base_unix_ms: EPOCH + 10,
            ..Header::fresh(EPOCH)
        };
        header.released.insert(9);
        let found = |header: &Header| Found::State(Box::new(DurableState::new(header.clone())));
        // The same timeline, an install, or no timeline known: nothing to write.
        for (timeline, occasion) in [
            (1, Occasion::Need),
            (2, Occasion::Install),
            (0, Occasion::Need),
        ] {
            assert_eq!(
                planned(found(&header), false, timeline, occasion).write,
                Write::Nothing
            );
        }
        let plan = planned(found(&header), false, 2, Occasion::Need);
        let floor = CONTEXT.now_wall_ms + 1_000 + 2_000;
        assert_eq!(
            plan.write,
            Write::Change(Change::Promotion {
                timeline: 2,
                base_unix_ms: floor
            })
        );
        assert_eq!(
            (plan.state.header.timeline, plan.state.header.base_unix_ms),
            (2, floor)
        );
        assert!(plan.state.header.released.contains(9), "a release stays");
        // A state that recorded no timeline (written before 0.5.0) records it, and stays where
        // it is: its first load is no promotion.
        header.timeline = 0;
        let plan = planned(found(&header), false, 2, Occasion::Need);
        assert_eq!(
            plan.write,
            Write::Change(Change::Promotion {
                timeline: 2,
                base_unix_ms: EPOCH + 10
            })
        );
    }

    #[test]
    fn a_later_epoch_than_the_ids_refuses_whatever_else_the_state_says() {
        let state = DurableState::new(Header::fresh(EPOCH - 1_000));
        let plan = planned(Found::State(Box::new(state)), false, 0, Occasion::Need);
        assert_eq!(
            plan.status,
            Status::EpochMovedLater {
                recorded_epoch_unix_ms: EPOCH - 1_000
            }
        );
    }
}
