//! Every failure point of every plan, against the simulated host (`crate::simulated_host`): each
//! step of each plan fails, as an error of its own, a cancel and a FATAL (the database writes at
//! each database in turn), and afterwards, and after a restart, memory agrees with the durable
//! state, and the witness and the records together list every shard the state holds released,
//! each at a last ID at or above the state's.

use super::*;
use crate::durable::Header;
use crate::generator::Shared;
use crate::layout::{compose, decompose};
use crate::simulated_host::*;

/// Three databases' records and the witness, in memory, failing where the test says.
#[derive(Default)]
struct FakeRecords {
    witness: Released,
    databases: Vec<Released>,
    /// The databases the current write reached.
    written: usize,
    /// Fail at this step (at this database, for the records), ended so.
    fail: Option<(Step, usize, Ending)>,
    /// What a FATAL would undo, as the host's exit callback would find it.
    in_flight: Option<InFlight>,
}

impl FakeRecords {
    fn with(released: &Released) -> FakeRecords {
        FakeRecords {
            witness: released.clone(),
            databases: vec![released.clone(); 3],
            ..FakeRecords::default()
        }
    }

    fn fails(&self, step: Step, at: usize) -> Option<Ending> {
        match self.fail {
            Some((s, n, ending)) if s == step && n == at => Some(ending),
            _ => None,
        }
    }
}

impl Records for FakeRecords {
    type Failure = Ending;

    fn ending(failure: &Ending) -> Ending {
        *failure
    }

    fn entering(&mut self, in_flight: Option<InFlight>) {
        self.in_flight = in_flight;
    }

    fn write_witness(&mut self, released: &Released) -> Result<(), Ending> {
        if let Some(ending) = self.fails(Step::Witness, 0) {
            return Err(ending);
        }
        self.witness = released.clone();
        Ok(())
    }

    fn write_records(&mut self, released: &Released) -> Result<(), Ending> {
        self.written = 0;
        for at in 0..self.databases.len() {
            if let Some(ending) = self.fails(Step::Records, at) {
                return Err(ending);
            }
            self.databases[at] = released.clone();
            self.written = at + 1;
        }
        Ok(())
    }

    fn write_back(&mut self, released: &Released) {
        self.witness = released.clone();
        for at in 0..self.written {
            self.databases[at] = released.clone();
        }
    }
}

/// The shards the durable state holds released, with their last IDs.
fn durable_list(host: &Host) -> Released {
    let disk = host.disk.borrow();
    let state = disk.as_ref().unwrap();
    Released::from_pairs(state.released().map(|(s, id)| (s.get(), id)))
}

/// Whether `record` lists every shard of `state` at a last ID at or above the state's.
fn covers(record: &Released, state: &Released) -> bool {
    state
        .iter()
        .all(|(shard, last)| record.iter().any(|(s, at)| s == shard && at >= last))
}

/// What must hold after any plan, however it ended: memory agrees with the durable state, also
/// after a restart; the witness and the records together list every released shard; and, for a
/// release and a take-back, every record does on its own.
fn assert_agree(host: &Host, shared: &Shared, records: &FakeRecords, plan: Plan, what: &str) {
    let state = durable_list(host);
    assert_eq!(
        shared.released(),
        state,
        "{what}: memory agrees with the state"
    );
    let restarted = host.restart();
    generator(&restarted, host).status().unwrap();
    assert_eq!(restarted.released(), state, "{what}: and after a restart");
    let all = records
        .databases
        .iter()
        .fold(records.witness.clone(), |all, r| all.union(r));
    assert!(
        covers(&all, &state),
        "{what}: the records list every released shard"
    );
    if matches!(plan, Plan::Release | Plan::TakeBack) {
        for (at, record) in records.databases.iter().enumerate() {
            assert!(
                covers(record, &state),
                "{what}: database {at} lists every released shard"
            );
        }
    }
}

/// A host whose state has shard 9 released and shard 7 issued, and its shared memory.
fn a_host_that_issued() -> (Host, Shared) {
    let host = Host::new();
    let shared = host.restart();
    let g = generator(&shared, &host);
    g.next_id(shard(7)).unwrap();
    g.release(shard(9)).unwrap();
    (host, shared)
}

/// Every way a step can end that is not success, for a step that writes records at `databases`.
fn failures(step: Step, databases: usize) -> Vec<(Step, usize, Ending)> {
    let at: Vec<usize> = match step {
        Step::Records => (0..databases).collect(),
        _ => vec![0],
    };
    at.into_iter()
        .flat_map(|n| [Ending::Error, Ending::Cancel, Ending::Fatal].map(|e| (step, n, e)))
        .collect()
}

/// Runs `plan` with the records failing as `fail` says (none: succeeding), on a fresh host.
fn run(plan: Plan, fail: Option<(Step, usize, Ending)>) {
    let (host, shared) = a_host_that_issued();
    let g = generator(&shared, &host);
    let mut records = FakeRecords::with(&durable_list(&host));
    records.fail = fail;
    let what = format!("{plan:?} failing at {fail:?}");
    let outcome = match plan {
        Plan::Release => g.carry_out_release(shard(7), &mut records).map(|_| ()),
        Plan::TakeBack => {
            let above = compose(now_ms(&host) + 5_000, 9, 0).unwrap();
            g.carry_out_take_back(decompose(above).unwrap(), &mut records)
                .map(|_| ())
        }
        Plan::FenceLift => {
            // The state lost: fenced, with the release of shard 9 in the records only.
            *host.disk.borrow_mut() = None;
            let fenced = host.restart();
            let g = generator(&fenced, &host);
            assert!(g.status().unwrap().refusal::<DiskFull>().is_some());
            let above = decompose(compose(now_ms(&host) + 1_000, 7, 0).unwrap()).unwrap();
            let again = records.databases[0].iter().collect::<Vec<_>>();
            let lifted = g.carry_out_fence_lift(above, &again, &mut records);
            let outcome = lifted.map(|_| ());
            if let Some((_, _, Ending::Fatal)) = fail {
                if let Some(in_flight) = records.in_flight.take() {
                    g.undo(&in_flight, Ending::Fatal);
                }
            }
            if outcome.is_ok() || fail.is_some() {
                assert_agree(&host, &fenced, &records, plan, &what);
            }
            return;
        }
        Plan::Install => {
            records.databases.truncate(1);
            records.databases[0] = Released::default();
            g.carry_out_install(&mut records).map(|_| ())
        }
    };
    // A FATAL runs nothing more in the process but its exit callback, which undoes what the
    // plan in flight says: the executor returned at once, as the process would have ended.
    if let (Err(_), Some((_, _, Ending::Fatal))) = (&outcome, fail) {
        if let Some(in_flight) = records.in_flight.take() {
            g.undo(&in_flight, Ending::Fatal);
        }
    }
    match fail {
        None => {
            assert!(outcome.is_ok(), "{what}");
            let state = durable_list(&host);
            assert_eq!(records.witness, state, "{what}: the witness is the state's");
            for record in &records.databases {
                assert_eq!(*record, state, "{what}: every record is the state's");
            }
        }
        Some((_, _, ending)) => {
            assert!(outcome.is_err(), "{what}: the failure is returned");
            // A release's own error writes the witness and the records back as the state has
            // them; a cancel or a FATAL leaves them saying more.
            if plan == Plan::Release {
                let state = durable_list(&host);
                let listing = records.databases.iter().filter(|r| r.contains(shard(7)));
                match ending {
                    Ending::Error => {
                        assert_eq!(records.witness, state, "{what}: the witness written back");
                        assert_eq!(listing.count(), 0, "{what}: the records written back");
                    }
                    _ => assert!(!state.contains(shard(7)), "{what}: not released"),
                }
            }
        }
    }
    assert_agree(&host, &shared, &records, plan, &what);
}

#[test]
fn every_failure_point_of_every_plan_leaves_memory_the_state_and_the_records_agreeing() {
    for plan in [
        Plan::Release,
        Plan::TakeBack,
        Plan::FenceLift,
        Plan::Install,
    ] {
        run(plan, None);
        for &step in plan.steps() {
            if matches!(step, Step::StopIssuing | Step::Durable) {
                continue;
            }
            let databases = if plan == Plan::Install { 1 } else { 3 };
            for fail in failures(step, databases) {
                run(plan, Some(fail));
            }
        }
    }
}

#[test]
fn a_release_that_cannot_be_made_durable_issues_again_and_leaves_the_records_listing_it() {
    let (host, shared) = a_host_that_issued();
    let g = generator(&shared, &host);
    let mut records = FakeRecords::with(&durable_list(&host));
    host.fail_after_persists.set(Some(host.persists()));
    let failed = g.carry_out_release(shard(7), &mut records).unwrap_err();
    assert!(matches!(
        failed,
        Failed::Refused {
            step: Step::Durable,
            durable: false,
            undone: Undo {
                memory: true,
                write_back: false
            },
            ..
        }
    ));
    host.fail_after_persists.set(None);
    assert!(g.next_id(shard(7)).is_ok(), "shard 7 issues again");
    assert!(records.databases.iter().all(|r| r.contains(shard(7))));
    assert_agree(&host, &shared, &records, Plan::Release, "not durable");
}

#[test]
fn a_change_whose_standbys_did_not_confirm_holds_and_is_recorded() {
    for plan in [Plan::Release, Plan::TakeBack] {
        let (host, shared) = a_host_that_issued();
        let g = generator(&shared, &host);
        let mut records = FakeRecords::with(&durable_list(&host));
        host.standbys_cancelled.set(true);
        let failed = match plan {
            Plan::Release => g.carry_out_release(shard(7), &mut records).unwrap_err(),
            _ => {
                let above = compose(now_ms(&host) + 5_000, 9, 0).unwrap();
                g.carry_out_take_back(decompose(above).unwrap(), &mut records)
                    .unwrap_err()
            }
        };
        assert!(
            matches!(
                failed,
                Failed::Refused {
                    durable: true,
                    undone: Undo { memory: false, .. },
                    ..
                }
            ),
            "{plan:?}: {failed:?}"
        );
        host.standbys_cancelled.set(false);
        let state = durable_list(&host);
        for record in &records.databases {
            assert_eq!(*record, state, "{plan:?}: recorded");
        }
        assert_agree(&host, &shared, &records, plan, "standbys cancelled");
    }
}

#[test]
fn an_install_on_a_fenced_state_writes_nothing() {
    let host = Host::with_disk(Header::fresh(0));
    *host.disk.borrow_mut() = None;
    host.had_state.set(true);
    let shared = host.restart();
    let g = generator(&shared, &host);
    let mut records = FakeRecords {
        databases: vec![Released::from_pairs([(3, 1)])],
        ..FakeRecords::default()
    };
    assert_eq!(g.carry_out_install(&mut records), Ok(false));
    assert_eq!(records.databases[0], Released::from_pairs([(3, 1)]));
}

#[test]
fn the_plans_undo_what_the_table_says() {
    for ending in [Ending::Error, Ending::Cancel, Ending::Fatal] {
        for step in [Step::Witness, Step::Records] {
            assert_eq!(
                Plan::Release.undo(step, ending),
                Undo {
                    memory: true,
                    write_back: ending == Ending::Error
                }
            );
        }
        for plan in [Plan::TakeBack, Plan::FenceLift, Plan::Install] {
            for &step in plan.steps() {
                assert_eq!(
                    plan.undo(step, ending),
                    Undo::default(),
                    "{plan:?} {step:?}"
                );
            }
        }
    }
    assert_eq!(Plan::Release.steps()[0], Step::StopIssuing);
    assert_eq!(Plan::TakeBack.steps()[0], Step::Durable);
}
