//! One plan per change of the released shards, decided here and carried out by every host: a
//! release, a take-back, a fence lift, and an install's record. Each plan says which list of
//! released shards the records get (taken from this server's memory after its first step, never
//! read again from the durable state), in which order its steps run, and what each failure
//! undoes, however it ends: an error of its own (a database that cannot record), a cancel (a
//! query cancel, `statement_timeout`), or a FATAL error, after which the process runs nothing
//! but its exit callbacks.
//!
//! | plan | steps | a failure before the durable step undoes | after it |
//! |---|---|---|---|
//! | release | memory (the shard stops issuing), witness, records, durable | the memory step (the shard issues again); after an error of its own, the witness and the records written are written back as the state has them | nothing: the release holds |
//! | take-back | durable (memory with it), witness, records | nothing: the durable write is whole or not made | nothing: the records not yet written still list the shard, more than the state |
//! | fence lift | durable (the releases again, the resume), witness, records | nothing, as for a take-back | nothing: the witness lists every shard first, and a fence lift takes the union of every record |
//! | install | witness, records (its own) | nothing: its transaction aborts, and the witness was written as the state already has it | |
//!
//! So whatever ends a change, memory agrees with the durable state (and so with the WAL every
//! standby replays), and the witness and the records together list at least every shard the
//! state holds released (see [`crate::release_records`]): a cancel or a FATAL leaves the records
//! a release wrote listing the shard, which says more than the state, the safe side, until the
//! next change writes them.
//!
//! A host that can end without unwinding (PostgreSQL's FATAL) is told, at each step, what is in
//! flight ([`Records::entering`]), and undoes it at its exit with [`Generator::undo`], as the
//! executor below undoes an in-band failure.

use crate::generator::{Generator, Refused, Stopped};
use crate::host::{Clock, DurableStore, Report, Wait};
use crate::layout::{Parts, Shard};
use crate::release_records::Released;

/// A change of the released shards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    Release,
    TakeBack,
    FenceLift,
    Install,
}

/// A step of a plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The shard stops issuing here (a release only).
    StopIssuing,
    /// The cluster's witness lists the released shards.
    Witness,
    /// Every database's record lists them (an install's own database, for an install).
    Records,
    /// The change is durable here.
    Durable,
}

/// How a step ended that did not succeed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// An error of the step's own: a database that cannot record, a durable write that failed.
    Error,
    /// A query cancel or a timeout: the caller wants the statement ended now.
    Cancel,
    /// A FATAL error: the process ends, running only its exit callbacks.
    Fatal,
}

/// What a failure undoes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Undo {
    /// The shard issues again: a release that is not durable.
    pub memory: bool,
    /// The witness and the records written are written back as the state has them.
    pub write_back: bool,
}

impl Plan {
    /// The steps, in the order they run.
    pub const fn steps(self) -> &'static [Step] {
        match self {
            Plan::Release => &[
                Step::StopIssuing,
                Step::Witness,
                Step::Records,
                Step::Durable,
            ],
            Plan::TakeBack | Plan::FenceLift => &[Step::Durable, Step::Witness, Step::Records],
            Plan::Install => &[Step::Witness, Step::Records],
        }
    }

    /// What a failure at `step`, ended so, undoes (see the table at the top of this module). A
    /// durable step that completed is not a failure, whatever follows it.
    pub const fn undo(self, step: Step, ending: Ending) -> Undo {
        match (self, step) {
            (Plan::Release, Step::Witness | Step::Records) => Undo {
                memory: true,
                write_back: matches!(ending, Ending::Error),
            },
            (Plan::Release, Step::Durable) => Undo {
                memory: true,
                write_back: false,
            },
            _ => Undo {
                memory: false,
                write_back: false,
            },
        }
    }
}

/// A change under way, as a host must know it to undo what a FATAL error leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InFlight {
    pub plan: Plan,
    pub step: Step,
    /// The release stopped in memory, from the first step on.
    pub stopped: Option<Stopped>,
}

/// Where a host writes the released shards besides its durable state: the cluster's witness and
/// every database's record (or an install's own).
pub trait Records {
    /// Why a write failed.
    type Failure;

    /// How a failure ended its step.
    fn ending(failure: &Self::Failure) -> Ending;

    /// The change is entering a step (`Some`), or has nothing left to undo (`None`): a host that
    /// can end without unwinding keeps this for its exit.
    fn entering(&mut self, in_flight: Option<InFlight>);

    /// Writes the witness: the shards of `released`.
    fn write_witness(&mut self, released: &Released) -> Result<(), Self::Failure>;

    /// Writes every record (each database in turn, stopping at the first that fails).
    fn write_records(&mut self, released: &Released) -> Result<(), Self::Failure>;

    /// Writes the witness, and the records written so far, back as `released`, as far as they
    /// can be (after a failure of a release's own).
    fn write_back(&mut self, released: &Released);
}

/// Why a plan did not complete.
#[derive(Debug, PartialEq, Eq)]
pub enum Failed<F, E> {
    /// The protocol refused or failed, at `step`; `durable` where the change is durable here all
    /// the same (only the wait for the synchronous standbys failed), in which case the records
    /// were written before this was returned.
    Refused {
        step: Step,
        refused: Refused<E>,
        durable: bool,
        undone: Undo,
    },
    /// A write of the witness or the records failed at `step`.
    Unrecorded {
        step: Step,
        failure: F,
        undone: Undo,
    },
}

impl<H: Clock + DurableStore + Wait + Report> Generator<'_, H> {
    /// Undoes what a plan in flight leaves (the memory step: see [`Plan::undo`]), and says what
    /// else must be undone, which the host does.
    pub fn undo(&self, in_flight: &InFlight, ending: Ending) -> Undo {
        let undo = in_flight.plan.undo(in_flight.step, ending);
        if let (true, Some(stopped)) = (undo.memory, in_flight.stopped) {
            self.resume_issuing(stopped);
        }
        undo
    }

    /// A failure of `step`: what it undoes, done.
    fn failed<R: Records>(&self, in_flight: InFlight, ending: Ending, records: &mut R) -> Undo {
        records.entering(None);
        let undo = self.undo(&in_flight, ending);
        if undo.write_back {
            records.write_back(&self.shared().released());
        }
        undo
    }

    /// The witness, then the records, with the list this server's memory holds now.
    fn record<R: Records>(
        &self,
        plan: Plan,
        stopped: Option<Stopped>,
        records: &mut R,
    ) -> Result<(), Failed<R::Failure, H::Error>> {
        let listed = self.shared().released();
        for step in [Step::Witness, Step::Records] {
            let in_flight = InFlight {
                plan,
                step,
                stopped,
            };
            records.entering(Some(in_flight));
            let written = match step {
                Step::Witness => records.write_witness(&listed),
                _ => records.write_records(&listed),
            };
            if let Err(failure) = written {
                let undone = self.failed(in_flight, R::ending(&failure), records);
                return Err(Failed::Unrecorded {
                    step,
                    failure,
                    undone,
                });
            }
        }
        Ok(())
    }

    /// Releases `shard` by the release's plan: stops it here, records it, makes it durable.
    /// Returns its last ID.
    pub fn carry_out_release<R: Records>(
        &self,
        shard: Shard,
        records: &mut R,
    ) -> Result<i64, Failed<R::Failure, H::Error>> {
        let plan = Plan::Release;
        records.entering(Some(InFlight {
            plan,
            step: Step::StopIssuing,
            stopped: None,
        }));
        let stopped = match self.stop_issuing(shard) {
            Ok(stopped) => stopped,
            Err(refused) => {
                records.entering(None);
                return Err(Failed::Refused {
                    step: Step::StopIssuing,
                    refused,
                    durable: false,
                    undone: Undo::default(),
                });
            }
        };
        self.record(plan, Some(stopped), records)?;
        let in_flight = InFlight {
            plan,
            step: Step::Durable,
            stopped: Some(stopped),
        };
        records.entering(Some(in_flight));
        let mut durable = false;
        let made = self.make_release_durable_then(&stopped, &mut || {
            durable = true;
            records.entering(None);
        });
        match made {
            Ok(last_id) => Ok(last_id),
            Err(refused) => {
                let undone = match durable {
                    true => Undo::default(),
                    false => self.failed(in_flight, Ending::Error, records),
                };
                Err(Failed::Refused {
                    step: Step::Durable,
                    refused,
                    durable,
                    undone,
                })
            }
        }
    }

    /// Takes back `above`'s shard by the take-back's plan: durable (and in force) first, then
    /// recorded. Returns the time base's new floor.
    pub fn carry_out_take_back<R: Records>(
        &self,
        above: Parts,
        records: &mut R,
    ) -> Result<i64, Failed<R::Failure, H::Error>> {
        self.durable_then_recorded(Plan::TakeBack, records, |g, durable| {
            g.take_back(above, durable)
        })
    }

    /// Lifts the fence by the fence lift's plan: releases again each of `released` and resumes
    /// above `above`, durably, then records what the state holds. Returns the time base's new
    /// floor.
    pub fn carry_out_fence_lift<R: Records>(
        &self,
        above: Parts,
        released: &[(Shard, i64)],
        records: &mut R,
    ) -> Result<i64, Failed<R::Failure, H::Error>> {
        self.durable_then_recorded(Plan::FenceLift, records, |g, durable| {
            g.resume_above_releasing(above, released, durable)
        })
    }

    /// A take-back's or a fence lift's plan: `change`, durable, then the witness and the records,
    /// even where only the wait for the synchronous standbys failed (the change is in force
    /// here), whose failure is returned then.
    fn durable_then_recorded<R: Records>(
        &self,
        plan: Plan,
        records: &mut R,
        change: impl FnOnce(&Self, &mut dyn FnMut()) -> Result<i64, Refused<H::Error>>,
    ) -> Result<i64, Failed<R::Failure, H::Error>> {
        records.entering(Some(InFlight {
            plan,
            step: Step::Durable,
            stopped: None,
        }));
        let mut durable = false;
        let changed = change(self, &mut || durable = true);
        if durable {
            self.record(plan, None, records)?;
        }
        records.entering(None);
        changed.map_err(|refused| Failed::Refused {
            step: Step::Durable,
            refused,
            durable,
            undone: Undo::default(),
        })
    }

    /// An install's record by its plan: the witness and its own database's record, from this
    /// server's memory (the durable state loaded first, if it is not yet). A state that refuses
    /// to generate (fenced) knows no release: nothing is written, and the record stays empty,
    /// which says so. Returns whether it wrote.
    pub fn carry_out_install<R: Records>(
        &self,
        records: &mut R,
    ) -> Result<bool, Failed<R::Failure, H::Error>> {
        match self.status() {
            Ok(status) if status.refusal::<H::Error>().is_none() => {
                self.record(Plan::Install, None, records)?;
                records.entering(None);
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

#[cfg(test)]
mod tests;
