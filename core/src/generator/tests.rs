//! The protocol against a simulated host (`crate::simulated_host`): clocks the test moves, a
//! "disk" holding the durable state that can fail, panic or "crash" between writing and
//! publishing, another caller that races the writer, and waits that stop.

use super::*;
use crate::durable::Header;
use crate::layout::compose;
use crate::simulated_host::*;
use crate::startup::{Occasion, Plan, Reading};
use std::cell::RefCell;
use std::rc::Rc;

#[test]
fn the_first_id_creates_the_state_and_a_lease_durably_before_it_is_issued() {
    let host = Host::new();
    let shared = host.restart();
    assert_eq!(shared.lease.status(), Status::NotLoaded);
    assert_eq!(
        shared.try_issue(shard(5), host.mono.get(), EPOCH, LEAD),
        FastIssue::Slow,
        "nothing is issued before the state is loaded"
    );
    let id = generator(&shared, &host).next_id(shard(5)).unwrap();
    assert_eq!(ms_of(id), now_ms(&host));
    let changes = host.changes.borrow().clone();
    assert!(
        matches!(&changes[..], [Change::Init(h), Change::Lease { .. }] if **h == Header::fresh(EPOCH))
    );
    assert_eq!(
        changes[1],
        Change::Lease {
            epoch_unix_ms: EPOCH,
            base_unix_ms: T0,
            lease_end_unix_ms: EPOCH + (now_ms(&host) + LEASE_WINDOW_MS + 1) as i64
        },
        "the lease covers the ID and a window, recorded with the time base"
    );
    assert!(ms_of(id) < lease_end_ms(&host));
    assert_eq!(shared.lease.end_ms(), lease_end_ms(&host));
    assert_eq!(shared.lease.status(), Status::Generating);
    assert_eq!(
        shared.lease.writes(),
        1,
        "the lease; the creation is the store's"
    );
    assert_eq!(shared.lease.persisted_base_unix_ms(), T0);
}

#[test]
fn the_fast_path_issues_under_the_lease_and_leaves_the_rest_to_the_slow_one() {
    let host = Host::new();
    let shared = host.restart();
    let g = generator(&shared, &host);
    let first = g.next_id(shard(5)).unwrap();
    let FastIssue::Issued(second) = shared.try_issue(shard(5), host.mono.get(), EPOCH, LEAD) else {
        panic!("the fast path issues under a loaded lease")
    };
    assert_eq!(second, first + 1);
    host.advance(crate::time_base::CHECK_INTERVAL_MS);
    assert_eq!(
        shared.try_issue(shard(5), host.mono.get(), EPOCH, LEAD),
        FastIssue::Slow,
        "a comparison with the wall clock is due"
    );
    assert_eq!(
        shared.try_issue(shard(5), host.mono.get(), T0 + 1_000_000, LEAD),
        FastIssue::Slow,
        "before the epoch"
    );
    assert_eq!(
        shared.try_issue(shard(5), host.mono.get(), EPOCH - MAX_MS as i64 - 1, LEAD),
        FastIssue::Slow,
        "past the end of time"
    );
    // One millisecond before the epoch, the time field would be -1, u64::MAX as the fast path
    // counts it: slow whether a comparison is due or not.
    let shared = host.restart();
    let g = generator(&shared, &host);
    g.next_id(shard(5)).unwrap();
    for due in [false, true] {
        if due {
            host.advance(crate::time_base::CHECK_INTERVAL_MS);
        }
        let base_unix_ms = shared.time_base.read(host.mono.get()).0;
        assert_eq!(
            shared.try_issue(shard(5), host.mono.get(), base_unix_ms + 1, LEAD),
            FastIssue::Slow,
            "a millisecond before the epoch (comparison due: {due})"
        );
    }
}

#[test]
fn after_a_restart_the_first_stamp_is_exactly_the_first_past_the_lease() {
    let host = Host::new();
    let shared = host.restart();
    let before = generator(&shared, &host).next_id(shard(3)).unwrap();
    let end_ms = lease_end_ms(&host);

    // Restart with the clock set back an hour: only the lease keeps the order.
    host.wall_offset.set(host.wall_offset.get() - 3_600_000);
    let shared = host.restart();
    let g = Generator::new(&shared, &host, EPOCH, 10 * LEASE_WINDOW_MS);
    let first = g.next_id(shard(3)).unwrap();
    assert_eq!(
        first,
        id_from_stamp(stamp(end_ms, 0), shard(3)),
        "exactly the first stamp past the lease"
    );
    assert!(first > before);
    let other = g.next_id(shard(4)).unwrap();
    assert_eq!(ms_of(other), end_ms, "every shard resumes past the lease");
}

#[test]
fn a_restart_waits_for_the_time_base_to_come_within_the_lead_of_the_lease() {
    let host = Host::new();
    let shared = host.restart();
    generator(&shared, &host).next_id(shard(1)).unwrap();
    let end_ms = lease_end_ms(&host);
    let shared = host.restart();
    let id = generator(&shared, &host).next_id(shard(1)).unwrap();
    assert_eq!(ms_of(id), end_ms);
    let waited: u64 = host.waited.borrow().iter().sum();
    assert_eq!(
        waited,
        LEASE_WINDOW_MS + 1 - LEAD,
        "waits out the window beyond the lead"
    );
}

#[test]
fn a_persist_failure_issues_nothing_past_the_durable_lease_and_backs_off() {
    let host = Host::new();
    let shared = host.restart();
    let g = generator(&shared, &host);
    let first = g.next_id(shard(2)).unwrap();
    let durable_end = lease_end_ms(&host);

    host.fail_persist.set(true);
    let mut issued = vec![first];
    let refused = loop {
        match g.next_id(shard(2)) {
            Ok(id) => issued.push(id),
            Err(e) => break e,
        }
        host.advance(1);
    };
    assert_eq!(refused, Refused::Persist(DiskFull));
    assert!(issued.iter().all(|&id| ms_of(id) < durable_end));
    assert_eq!(shared.lease.end_ms(), durable_end, "nothing was published");

    // Guards against a failing store making every caller write: after the failure, the next
    // callers wait out the back-off instead of trying, and one tries when it is over.
    let backoff = shared.claim.backing_off(host.mono.get());
    assert!(backoff.is_some_and(|ms| ms >= BACKOFF_FIRST_MS as u64));
    let before = host.persists();
    host.waited.borrow_mut().clear();
    host.fail_persist.set(false);
    let after = g.next_id(shard(2)).unwrap();
    assert!(after > *issued.iter().max().unwrap());
    assert_eq!(
        host.waited.borrow().first().copied(),
        backoff,
        "the next caller waited out the back-off before trying"
    );
    assert_eq!(host.persists(), before + 1, "then one caller wrote, once");

    // A restart from the disk resumes above everything issued.
    let shared = host.restart();
    let again = generator(&shared, &host).next_id(shard(2)).unwrap();
    assert!(again > after);
}

#[test]
fn the_back_off_doubles_and_an_error_raised_through_the_claim_counts_as_a_failure() {
    let host = Host::new();
    let shared = host.restart();
    let g = generator(&shared, &host);
    g.next_id(shard(2)).unwrap();
    let end = shared.lease.end_ms();
    host.advance(LEASE_WINDOW_MS as i64 + 10);
    // PostgreSQL raises errors as panics through the protocol's frames: the claim must be let
    // go and the failure counted, or every later caller would wait forever or retry at once.
    host.panic_persist.set(true);
    let raised = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| g.next_id(shard(2))));
    assert!(raised.is_err());
    host.panic_persist.set(false);
    assert_eq!(shared.claim.owner.load(Relaxed), 0, "the claim was let go");
    assert_eq!(
        shared.claim.backing_off(host.mono.get()),
        Some(BACKOFF_FIRST_MS as u64)
    );
    host.fail_persist.set(true);
    host.advance(BACKOFF_FIRST_MS);
    host.waits_left.set(0);
    assert_eq!(g.next_id(shard(2)), Err(Refused::Persist(DiskFull)));
    assert_eq!(
        shared.claim.backing_off(host.mono.get()),
        Some(2 * BACKOFF_FIRST_MS as u64),
        "doubled"
    );
    assert_eq!(shared.lease.end_ms(), end);

    // A write that succeeds ends the back-off: the next failure backs off from the start again.
    host.fail_persist.set(false);
    host.advance(2 * BACKOFF_FIRST_MS);
    host.waits_left.set(u32::MAX);
    let writes = shared.lease.writes();
    g.next_id(shard(2)).unwrap();
    assert_eq!(shared.lease.writes(), writes + 1, "the renewal was written");
    assert_eq!(shared.claim.backing_off(host.mono.get()), None);
    host.advance(LEASE_WINDOW_MS as i64 + 10);
    host.fail_persist.set(true);
    host.waits_left.set(0);
    assert_eq!(g.next_id(shard(2)), Err(Refused::Persist(DiskFull)));
    assert_eq!(
        shared.claim.backing_off(host.mono.get()),
        Some(BACKOFF_FIRST_MS as u64),
        "from the first step again"
    );
}

#[test]
fn a_caller_racing_the_writer_cannot_use_the_lease_before_it_is_durable() {
    // The writer is inside `persist` (a WAL flush in progress) when another caller asks for an
    // ID on a shard that has used up the lease. That caller must not get an ID the disk does not
    // cover yet: it finds the claim taken and waits (here, the wait is cancelled).
    let host = Rc::new(Host::new());
    let shared = Rc::new(host.restart());
    generator(&shared, &host).next_id(shard(7)).unwrap();
    let end_ms = shared.lease.end_ms();
    for n in [7, 8] {
        shared
            .shard(shard(n))
            .raise_floor(stamp(end_ms - 1, MAX_SEQ as u64));
    }

    let racer_saw = Rc::new(RefCell::new(Vec::new()));
    {
        let (host2, shared2, saw) = (host.clone(), shared.clone(), racer_saw.clone());
        *host.during_persist.borrow_mut() = Some(Box::new(move || {
            host2.waits_left.set(0);
            let result =
                Generator::new(&shared2, &*host2, EPOCH, 10 * LEASE_WINDOW_MS).next_id(shard(8));
            saw.borrow_mut().push(result);
            host2.waits_left.set(u32::MAX);
        }));
    }
    let g = Generator::new(&shared, &*host, EPOCH, 10 * LEASE_WINDOW_MS);
    let id = g.next_id(shard(7)).unwrap();
    assert_eq!(ms_of(id), end_ms);
    assert_eq!(
        racer_saw.borrow().as_slice(),
        [Err(Refused::Interrupted)],
        "the racing caller waited instead of issuing past the durable lease"
    );
}

#[test]
fn renewal_ahead_of_need_is_claimed_by_one_caller_and_keeps_the_others_from_waiting() {
    let host = Rc::new(Host::new());
    let shared = Rc::new(host.restart());
    let g = generator(&shared, &host);
    g.next_id(shard(1)).unwrap();
    let end_ms = shared.lease.end_ms();
    host.advance((end_ms - RENEW_AHEAD_MS - now_ms(&host)) as i64);

    // While one caller renews (its write is slow), a hundred others in the renewal window keep
    // getting IDs without waiting, and none of them tries to write too.
    let others = Rc::new(RefCell::new(Vec::new()));
    {
        let (host2, shared2, others) = (host.clone(), shared.clone(), others.clone());
        *host.during_persist.borrow_mut() = Some(Box::new(move || {
            let g = Generator::new(&shared2, &*host2, EPOCH, LEAD);
            for _ in 0..100 {
                others.borrow_mut().push(g.next_id(shard(1)).unwrap());
            }
        }));
    }
    let writes_before = host.persists();
    let id = g.next_id(shard(1)).unwrap();
    *host.during_persist.borrow_mut() = None;
    assert_eq!(others.borrow().len(), 100);
    assert!(others.borrow().iter().all(|&o| ms_of(o) < end_ms && o > id));
    assert!(host.waited.borrow().is_empty(), "nobody waited");
    assert_eq!(
        host.persists(),
        writes_before + 1,
        "one renewal, by one caller"
    );
    assert!(shared.lease.end_ms() > end_ms, "renewed before running out");
}

#[test]
fn renewal_happens_only_near_the_end() {
    let host = Host::new();
    let shared = host.restart();
    let g = generator(&shared, &host);
    g.next_id(shard(1)).unwrap();
    let renew_at = shared.lease.end_ms() - RENEW_AHEAD_MS;
    host.advance((renew_at - now_ms(&host)) as i64 - 1);
    g.next_id(shard(1)).unwrap();
    assert_eq!(host.persists(), 2, "not yet");
    host.advance(1);
    g.next_id(shard(1)).unwrap();
    assert_eq!(host.persists(), 3, "at the renewal point");
}

#[test]
fn callers_at_the_end_of_the_lease_wait_for_the_writer_interruptibly() {
    let host = Host::new();
    let shared = host.restart();
    let g = generator(&shared, &host);
    g.next_id(shard(1)).unwrap();
    host.advance(LEASE_WINDOW_MS as i64 + 5);
    shared.claim.owner.store(99, Relaxed); // another backend is writing
    host.waits_left.set(3);
    assert_eq!(g.next_id(shard(1)), Err(Refused::Interrupted));
    assert_eq!(host.waited.borrow().as_slice(), [CLAIM_WAIT_MS; 4]);

    // That backend died without letting go (a FATAL exit): its exit hook frees the claim.
    shared.release_claim_of(98);
    assert_eq!(
        shared.claim.owner.load(Relaxed),
        99,
        "only the holder's own number frees it"
    );
    shared.release_claim_of(99);
    host.waits_left.set(u32::MAX);
    assert!(g.next_id(shard(1)).is_ok());
}

#[test]
fn loading_happens_once_by_one_caller_while_the_others_wait() {
    let host = Rc::new(Host::new());
    let shared = Rc::new(host.restart());
    let racer = Rc::new(RefCell::new(None));
    {
        let (host2, shared2, racer) = (host.clone(), shared.clone(), racer.clone());
        *host.during_persist.borrow_mut() = Some(Box::new(move || {
            if racer.borrow().is_none() {
                host2.waits_left.set(0);
                let g = Generator::new(&shared2, &*host2, EPOCH, LEAD);
                *racer.borrow_mut() = Some(g.next_id(shard(2)));
                host2.waits_left.set(u32::MAX);
            }
        }));
    }
    generator(&shared, &host).next_id(shard(1)).unwrap();
    assert_eq!(
        *racer.borrow(),
        Some(Err(Refused::Interrupted)),
        "the racer waited for the loader"
    );
    let inits = host
        .changes
        .borrow()
        .iter()
        .filter(|c| matches!(c, Change::Init(_)))
        .count();
    assert_eq!(inits, 1);
}

#[test]
fn a_burst_borrows_then_waits_at_the_lead() {
    let host = Host::new();
    let shared = host.restart();
    let g = generator(&shared, &host);
    let mut last = 0;
    for _ in 0..(LEAD + 2) * 1024 {
        let id = g.next_id(shard(9)).unwrap();
        assert!(id > last);
        last = id;
    }
    assert!(
        !host.waited.borrow().is_empty(),
        "the burst reached the lead"
    );
    assert!(ms_of(last) <= now_ms(&host) + LEAD);
    assert_eq!(
        shared.tally(shard(9)).waits(),
        host.waited.borrow().len() as u64
    );
}

#[test]
fn a_clock_before_the_epoch_and_the_end_of_time_are_refused() {
    let host = Host::new();
    host.wall_offset.set(EPOCH - 10_000 - host.mono.get());
    let shared = host.restart();
    assert_eq!(
        generator(&shared, &host).next_id(shard(0)),
        Err(Refused::ClockBeforeEpoch {
            base_unix_ms: EPOCH - 10_000
        })
    );

    let host = Host::new();
    host.wall_offset
        .set(EPOCH + MAX_MS as i64 + 1 - host.mono.get());
    let shared = host.restart();
    assert_eq!(
        generator(&shared, &host).next_id(shard(0)),
        Err(Refused::Exhausted)
    );

    // The last millisecond is issued; the lease never reaches past it.
    let host = Host::new();
    host.wall_offset
        .set(EPOCH + MAX_MS as i64 - host.mono.get());
    let shared = host.restart();
    let g = Generator::new(&shared, &host, EPOCH, 0);
    assert_eq!(ms_of(g.next_id(shard(0)).unwrap()), MAX_MS);
    assert_eq!(shared.lease.end_ms(), MAX_MS + 1);
    // (It asks for a renewal too: the lease ends with the time field.)
    let (FastIssue::Issued(id) | FastIssue::Renew(id)) =
        shared.try_issue(shard(0), host.mono.get(), EPOCH, 0)
    else {
        panic!("the fast path issues in the last millisecond")
    };
    assert_eq!(ms_of(id), MAX_MS);
    for _ in 0..1022 {
        g.next_id(shard(0)).unwrap();
    }
    host.waits_left.set(2);
    assert!(g.next_id(shard(0)).is_err(), "never the sign bit");
}

#[test]
fn a_release_is_durable_and_outlives_restarts_and_resumes_until_taken_back() {
    // Guards against a release kept in memory only: a restart, or a standby promoted from this
    // server's WAL, would issue the released shard again, next to the server it was handed to.
    let host = Host::new();
    let shared = host.restart();
    let g = generator(&shared, &host);
    let before = g.next_id(shard(5)).unwrap();
    let last = g.release(shard(5)).unwrap();
    assert_eq!(last, before, "the last ID issued");
    assert_eq!(
        host.changes.borrow().last(),
        Some(&Change::Release {
            shard: shard(5),
            last_id: last
        })
    );
    assert_eq!(g.next_id(shard(5)), Err(Refused::Released));
    assert!(g.next_id(shard(6)).is_ok());

    for _ in 0..2 {
        let shared = host.restart();
        let g = generator(&shared, &host);
        assert!(g.next_id(shard(6)).is_ok());
        assert_eq!(
            g.next_id(shard(5)),
            Err(Refused::Released),
            "after a restart"
        );
        assert_eq!(shared.shard(shard(5)).last(), (stamp_of(last), true));
    }

    let shared = host.restart();
    let g = generator(&shared, &host);
    let theirs = compose(ms_of(last) + 50, 5, 9).unwrap();
    g.resume_above(parts(theirs)).unwrap();
    assert_eq!(
        g.next_id(shard(5)),
        Err(Refused::Released),
        "a resume above an ID of the shard leaves it released"
    );
    g.take_back(parts(theirs), &mut || {}).unwrap();
    assert!(g.next_id(shard(5)).unwrap() > theirs);
    let shared = host.restart();
    assert!(generator(&shared, &host).next_id(shard(5)).unwrap() > theirs);
}

fn stamp_of(id: i64) -> u64 {
    let p = parts(id);
    stamp(p.ms, p.seq as u64)
}

#[test]
fn releasing_a_shard_never_used_since_start_returns_an_id_above_all_before() {
    let host = Host::new();
    let shared = host.restart();
    let first = generator(&shared, &host).next_id(shard(1)).unwrap();
    let shared = host.restart();
    let last = generator(&shared, &host).release(shard(1)).unwrap();
    assert!(last > first);
    assert_eq!(ms_of(last) + 1, lease_end_ms(&host));
}

#[test]
fn a_server_that_cannot_know_its_last_id_releases_nothing() {
    // Guards against a made-up last ID: a fenced server released shard 7 with the ID at the
    // start of its state's epoch, and the next owner, resuming above it, issued IDs below the
    // fenced server's old ones.
    let host = Host::with_disk(Header {
        fence: Some(Fence::Lost),
        ..Header::fresh(EPOCH)
    });
    let shared = host.restart();
    assert_eq!(
        generator(&shared, &host).release(shard(7)),
        Err(Refused::Fenced(Fence::Lost))
    );
    assert_eq!(host.persists(), 0, "nothing recorded");

    let host = Host::new();
    let shared = host.restart();
    generator(&shared, &host).next_id(shard(7)).unwrap();
    let shared = host.restart();
    let later = Generator::new(&shared, &host, EPOCH + 1000, LEAD);
    assert_eq!(
        later.release(shard(7)),
        Err(Refused::EpochMovedLater {
            recorded_epoch_unix_ms: EPOCH
        })
    );
}

#[test]
fn a_fence_refuses_across_restarts_until_a_resume_lifts_it_durably() {
    // Guards against a refusal that lasted one run: 0.2.0 sealed a refused state file again at
    // shutdown, and the next start generated IDs equal to old ones.
    for fence in [
        Fence::Stale,
        Fence::Unreadable,
        Fence::Upgraded,
        Fence::Lost,
    ] {
        let host = Host::with_disk(Header {
            fence: Some(fence),
            lease_end_unix_ms: T0 + 60_000,
            ..Header::fresh(EPOCH)
        });
        for _ in 0..3 {
            let shared = host.restart();
            let g = generator(&shared, &host);
            assert_eq!(g.next_id(shard(1)), Err(Refused::Fenced(fence)));
            assert_eq!(shared.lease.status(), Status::Fenced(fence));
            // The fenced state's lease is not published: the fast path, which reads nothing
            // but the lease, must not issue on the next call.
            assert_eq!(
                shared.try_issue(shard(1), host.mono.get(), EPOCH, LEAD),
                FastIssue::Slow
            );
            assert_eq!(g.next_id(shard(1)), Err(Refused::Fenced(fence)));
        }
        assert_eq!(host.persists(), 0, "a fenced server writes nothing");

        let shared = host.restart();
        let g = generator(&shared, &host);
        let above = compose(now_ms(&host) + 5, 3, 3).unwrap();
        g.resume_above(parts(above)).unwrap();
        assert_eq!(host.header().fence, None, "lifted durably");
        let next = g.next_id(shard(1)).unwrap();
        assert!(next > above);
        assert!(
            ms_of(next) >= (T0 + 60_000 - EPOCH) as u64,
            "and the fenced state's own lease still counts as a floor"
        );
        let shared = host.restart();
        assert!(generator(&shared, &host).next_id(shard(1)).unwrap() > next);
    }
}

#[test]
fn a_later_epoch_is_refused_an_earlier_one_becomes_the_earliest() {
    let host = Host::new();
    let shared = host.restart();
    let old = generator(&shared, &host).next_id(shard(1)).unwrap();

    // The epoch moves a day earlier: allowed, and IDs stay above (their time fields grow).
    let earlier = EPOCH - 86_400_000;
    let shared = host.restart();
    let g = Generator::new(&shared, &host, earlier, LEAD);
    let new = g.next_id(shard(1)).unwrap();
    assert!(new > old);
    assert_eq!(host.header().epoch_unix_ms, earlier, "now the earliest");

    // Back to the later one (a standby that kept the old setting, promoted): refused, and a
    // resume is no way out, since it cannot make new IDs sort above the old.
    let shared = host.restart();
    let g = generator(&shared, &host);
    let refused = Refused::EpochMovedLater {
        recorded_epoch_unix_ms: earlier,
    };
    assert_eq!(g.next_id(shard(1)), Err(refused));
    assert_eq!(g.resume_above(parts(new)), Err(refused));
}

#[test]
fn clock_reports_are_rate_limited_and_use_a_fresh_sample() {
    let host = Host::new();
    let shared = host.restart();
    let g = generator(&shared, &host);
    g.next_id(shard(1)).unwrap();
    host.advance(20);
    g.next_id(shard(1)).unwrap();
    host.wall_offset.set(host.wall_offset.get() - 5_000);
    host.advance(20);
    g.next_id(shard(1)).unwrap();
    assert_eq!(
        host.events.borrow().as_slice(),
        [
            Event::ClockSteppedBack {
                ms: 5_000,
                behind_ms: 5_000
            },
            Event::RunningAhead { behind_ms: 5_000 }
        ]
    );
    host.wall_offset.set(host.wall_offset.get() - 5_000);
    host.advance(20);
    g.next_id(shard(1)).unwrap();
    assert_eq!(
        host.events.borrow().len(),
        2,
        "at most one of each a minute"
    );
    host.advance(REPORT_EVERY_MS);
    g.next_id(shard(1)).unwrap();
    assert_eq!(
        host.events.borrow().len(),
        3,
        "the gap is still there a minute later"
    );
    assert!(matches!(
        host.events.borrow()[2],
        Event::RunningAhead { .. }
    ));
}

#[test]
fn forward_glitches_are_ignored_and_lasting_steps_followed_and_both_reported() {
    let host = Host::new();
    let shared = host.restart();
    let g = generator(&shared, &host);
    g.next_id(shard(1)).unwrap();
    host.wall_offset.set(host.wall_offset.get() + 86_400_000);
    for _ in 0..50 {
        host.advance(10);
        let id = g.next_id(shard(1)).unwrap();
        assert!(
            ms_of(id) < now_ms(&host) - 86_000_000,
            "not dated a day ahead"
        );
    }
    host.wall_offset.set(host.wall_offset.get() - 86_400_000);
    host.advance(20);
    g.next_id(shard(1)).unwrap();
    assert!(
        host.header().base_unix_ms < host.wall_ms() + 1_000,
        "no lease recorded the glitch's time"
    );
    assert!(matches!(
        host.events.borrow()[..],
        [Event::ForwardGlitchIgnored { ms: 86_400_000, .. }]
    ));

    host.wall_offset.set(host.wall_offset.get() + 30_000);
    for _ in 0..110 {
        host.advance(10);
        g.next_id(shard(1)).unwrap();
    }
    let id = g.next_id(shard(1)).unwrap();
    assert!(
        ms_of(id) + 5 >= now_ms(&host),
        "followed within about a second"
    );
    assert!(matches!(
        host.events.borrow()[1..],
        [Event::ForwardStepFollowed { ms: 30_000, .. }]
    ));
}

/// A host whose wall-clock read takes long (the process is descheduled in the middle).
struct Descheduled(Host);

impl Clock for Descheduled {
    fn monotonic_ms(&self) -> i64 {
        self.0.monotonic_ms()
    }
    fn wall_ms(&self) -> i64 {
        let wall = self.0.wall_ms();
        self.0.advance(50);
        wall
    }
}
impl DurableStore for Descheduled {
    type Error = DiskFull;
    fn claimer(&self) -> u32 {
        self.0.claimer()
    }
    fn start(
        &self,
        occasion: Occasion,
        plan: &dyn Fn(Reading<'_>) -> Plan,
    ) -> Result<Plan, DiskFull> {
        self.0.start(occasion, plan)
    }
    fn persist(&self, change: &Change, in_force: &mut dyn FnMut()) -> Result<(), DiskFull> {
        self.0.persist(change, in_force)
    }
}
impl Wait for Descheduled {
    fn wait(&self, ms: u64) -> Result<(), Interrupted> {
        self.0.wait(ms)
    }
}
impl Report for Descheduled {
    fn report(&self, event: Event) {
        self.0.report(event)
    }
}

#[test]
fn a_descheduled_comparer_neither_moves_the_base_ahead_nor_reports_a_step() {
    let host = Descheduled(Host::new());
    let shared = host.0.restart();
    let g = Generator::new(&shared, &host, EPOCH, LEAD);
    for _ in 0..20 {
        g.next_id(shard(1)).unwrap();
        host.0.advance(11);
    }
    let (base, _) = shared.time_base.read(host.0.mono.get());
    assert!(
        base <= host.0.wall_ms(),
        "the base did not run ahead of the wall clock: {}",
        base - host.0.wall_ms()
    );
    assert!(host.0.events.borrow().is_empty());
    assert_eq!(shared.time_base.steps_back(), 0);
}

#[test]
fn resuming_above_an_id_from_elsewhere_needs_no_waiting_and_survives_a_restart() {
    // Another server's clock runs ten minutes ahead of this one; its last ID for shard 5 must
    // be below this server's next ones, at once.
    let host = Host::new();
    let shared = host.restart();
    let g = generator(&shared, &host);
    let theirs = compose(now_ms(&host) + 600_000, 5, 77).unwrap();
    let floor = g.resume_above(parts(theirs)).unwrap();
    assert_eq!(floor, EPOCH + ms_of(theirs) as i64 + 1);
    assert!(
        shared.lease.end_ms() > (floor - EPOCH) as u64,
        "the durable lease covers the new floor"
    );
    let writes = host.persists();
    let mine = g.next_id(shard(5)).unwrap();
    assert_eq!(host.persists(), writes, "the next ID needed no lease write");
    assert!(mine > theirs);
    let other = g.next_id(shard(6)).unwrap();
    assert!(
        ms_of(other) > ms_of(theirs),
        "every shard resumes after its millisecond"
    );
    assert!(host.waited.borrow().is_empty(), "no waiting on clocks");

    // Durable before returning: a restart with the clock still behind resumes above it.
    let shared = host.restart();
    let g = Generator::new(&shared, &host, EPOCH, 10 * LEASE_WINDOW_MS);
    assert!(g.next_id(shard(5)).unwrap() > mine);
    assert!(shared.time_base.read(host.mono.get()).0 >= floor);
}

#[test]
fn a_take_back_is_its_own_act_and_keeps_the_shards_order() {
    let host = Host::new();
    let shared = host.restart();
    let g = generator(&shared, &host);
    let last = g.next_id(shard(5)).unwrap();
    g.release(shard(5)).unwrap();
    let older = compose(ms_of(last) - 100, 5, 0).unwrap();
    g.resume_above(parts(older)).unwrap();
    assert!(
        host.header().released.contains(5),
        "a resume takes nothing back"
    );
    g.take_back(parts(older), &mut || {}).unwrap();
    assert!(
        g.next_id(shard(5)).unwrap() > last,
        "above its own last ID too"
    );
    assert!(host.header().released.iter().next().is_none());
    assert!(matches!(
        host.changes.borrow().last(),
        Some(Change::TakeBack { .. })
    ));

    // A shard that is not released cannot be taken back, and nothing is written.
    let writes = host.persists();
    assert_eq!(
        g.take_back(parts(older), &mut || {}),
        Err(Refused::NotReleased)
    );
    assert_eq!(host.persists(), writes);
}

#[test]
fn a_fenced_server_takes_nothing_back() {
    let mut header = Header::fenced(Fence::Lost, EPOCH);
    header.released.insert(5);
    let host = Host::with_disk(header);
    let shared = host.restart();
    let above = compose(now_ms(&host), 5, 0).unwrap();
    assert_eq!(
        generator(&shared, &host).take_back(parts(above), &mut || {}),
        Err(Refused::Fenced(Fence::Lost))
    );
    assert_eq!(host.persists(), 0);
}

#[test]
fn a_resume_raises_every_shard_so_a_later_release_returns_an_id_above_it() {
    // Guards against a release after a resume composing its last ID from a shard left at zero:
    // on 0.4.0 a fenced server resumed above an ID of shard 8 returned shard 7 at the epoch
    // (7168) from snowid_release(7), and the next owner resumed below the IDs it had issued.
    let mut header = Header::fenced(Fence::Lost, EPOCH);
    header.released.insert(9);
    let host = Host::with_disk(header);
    let shared = host.restart();
    let g = generator(&shared, &host);
    let above = compose(now_ms(&host) + 600_000, 8, 3).unwrap();
    g.resume_above(parts(above)).unwrap();
    let last = g.release(shard(7)).unwrap();
    let highest_of_7 = compose(ms_of(above), 7, MAX_SEQ).unwrap();
    assert!(
        last >= highest_of_7,
        "{last} is below shard 7's IDs up to the resume's millisecond"
    );
    assert_eq!(
        g.next_id(shard(9)),
        Err(Refused::Released),
        "and a released shard stays released"
    );
    for n in [0, 8, 8191] {
        assert!(g.next_id(shard(n)).unwrap() > above);
    }
}

#[test]
fn a_fence_lifts_with_the_releases_the_databases_recorded() {
    // Guards against a release forgotten with the state: after a lost or damaged state, or
    // pg_upgrade, the re-created state holds no release, and 0.5.0's resume lifted the fence
    // with shard 7 issuing again on a server that had handed it off.
    let host = Host::with_disk(Header::fenced(Fence::Lost, EPOCH));
    let shared = host.restart();
    let g = generator(&shared, &host);
    let recorded = compose(now_ms(&host) + 500, 7, 12).unwrap();
    let above = compose(now_ms(&host) + 600_000, 8, 3).unwrap();
    g.resume_above_releasing(parts(above), &[(shard(7), recorded)], &mut || {})
        .unwrap();
    assert_eq!(g.next_id(shard(7)), Err(Refused::Released));
    assert!(host.header().released.contains(7));
    assert_eq!(host.header().fence, None);
    assert!(matches!(
        &host.changes.borrow()[..],
        [Change::Release { last_id, .. }, Change::Resume { .. }] if *last_id == recorded
    ));
    assert_eq!(
        g.release(shard(7)).unwrap(),
        recorded,
        "a release again returns the recorded last ID"
    );
    assert!(g.next_id(shard(8)).unwrap() > above);

    // Durable: a restart keeps shard 7 released.
    let shared = host.restart();
    assert_eq!(
        generator(&shared, &host).next_id(shard(7)),
        Err(Refused::Released)
    );
}

#[test]
fn a_recorded_release_above_the_states_own_raises_it_and_an_equal_one_writes_nothing() {
    // Guards against a release that returns an ID below its shard's IDs: a state put back from
    // an older copy holds shard 7 released at a lower last ID than the databases recorded (it
    // was taken back and released again since). The resume releases it again at the recorded
    // ID, so that a later release hands that ID on; shard 9, released at the recorded ID
    // already, is left as it is.
    let now = (T0 - EPOCH) as u64;
    let lower = compose(now - 5_000, 7, 1).unwrap();
    let higher = compose(now - 1_000, 7, 4).unwrap();
    let same = compose(now - 2_000, 9, 2).unwrap();
    let mut state = DurableState::new(Header::fenced(Fence::Lost, EPOCH));
    state.header.released.insert(7);
    state.header.released.insert(9);
    state.last_ids[7] = lower;
    state.last_ids[9] = same;
    let host = Host::bare();
    *host.disk.borrow_mut() = Some(state);
    host.had_state.set(true);
    let shared = host.restart();
    let g = generator(&shared, &host);
    let above = compose(now + 10_000, 8, 3).unwrap();
    g.resume_above_releasing(
        parts(above),
        &[(shard(7), higher), (shard(9), same)],
        &mut || {},
    )
    .unwrap();
    let releases: Vec<(i32, i64)> = host
        .changes
        .borrow()
        .iter()
        .filter_map(|c| match c {
            Change::Release { shard, last_id } => Some((shard.get(), *last_id)),
            _ => None,
        })
        .collect();
    assert_eq!(releases, [(7, higher)]);
    assert_eq!(g.release(shard(7)).unwrap(), higher);
    assert_eq!(g.release(shard(9)).unwrap(), same);
}

#[test]
fn a_fence_stays_when_the_resume_fails_after_its_releases() {
    // Guards against a crash between the releases a resume restores and the resume itself:
    // the releases hold, and the fence with them.
    let host = Host::with_disk(Header::fenced(Fence::Upgraded, EPOCH));
    let shared = host.restart();
    let g = generator(&shared, &host);
    let above = compose(now_ms(&host) + 600_000, 8, 3).unwrap();
    // The first write (the release) lands; the second (the resume) fails.
    host.fail_after_persists.set(Some(1));
    assert_eq!(
        g.resume_above_releasing(parts(above), &[(shard(7), 0)], &mut || {}),
        Err(Refused::Persist(DiskFull))
    );
    assert!(host.header().released.contains(7));
    assert_eq!(host.header().fence, Some(Fence::Upgraded));
}

#[test]
fn the_first_load_on_a_new_timeline_records_it_and_raises_the_floor_by_the_margin() {
    // Guards against a promoted standby dating IDs where its old primary's unreceived leases
    // were: with a margin, its time base starts at the wall clock plus max_lead plus the margin.
    let host = Host::new();
    host.timeline.set(1);
    let shared = host.restart();
    let g = generator(&shared, &host);
    g.next_id(shard(1)).unwrap();
    g.release(shard(4)).unwrap();
    assert_eq!(host.header().timeline, 1);

    // A restart on the same timeline (a crash recovery) is no promotion.
    assert_eq!(promotions_after_a_restart(&host), 0);

    // Promoted: timeline 2.
    host.timeline.set(2);
    let shared = host.restart();
    let g = generator(&shared, &host).with_promotion_margin(Some(2_000));
    let wall = host.wall_ms();
    let id = g.next_id(shard(1)).unwrap();
    assert!(
        EPOCH + ms_of(id) as i64 >= wall + LEAD as i64 + 2_000,
        "dated past the wall clock, max_lead and the margin"
    );
    assert_eq!(host.header().timeline, 2);
    assert!(host.header().base_unix_ms >= wall + LEAD as i64 + 2_000);
    assert_eq!(
        g.next_id(shard(4)),
        Err(Refused::Released),
        "a promotion leaves releases alone"
    );

    // Recorded once: the next start on timeline 2 writes no promotion again.
    assert_eq!(promotions_after_a_restart(&host), 0);
}

/// How many promotions a restart, then one ID, writes.
fn promotions_after_a_restart(host: &Host) -> usize {
    let writes = host.persists();
    let shared = host.restart();
    generator(&shared, host)
        .with_promotion_margin(Some(2_000))
        .next_id(shard(1))
        .unwrap();
    host.changes
        .borrow()
        .iter()
        .skip(writes)
        .filter(|c| matches!(c, Change::Promotion { .. }))
        .count()
}

#[test]
fn without_a_margin_or_an_earlier_timeline_a_promotion_only_records_the_timeline() {
    for (recorded, margin) in [(1, None), (0, Some(2_000))] {
        let host = Host::with_disk(Header {
            timeline: recorded,
            ..Header::fresh(EPOCH)
        });
        host.timeline.set(3);
        let shared = host.restart();
        let g = generator(&shared, &host).with_promotion_margin(margin);
        g.next_id(shard(1)).unwrap();
        assert_eq!(host.header().timeline, 3);
        assert!(
            host.header().base_unix_ms < host.wall_ms() + LEAD as i64,
            "no floor raised ({recorded}, {margin:?})"
        );
    }
}

#[test]
fn a_fenced_server_records_a_promotion_and_stays_fenced() {
    let host = Host::with_disk(Header {
        timeline: 1,
        ..Header::fenced(Fence::Upgraded, EPOCH)
    });
    host.timeline.set(2);
    let shared = host.restart();
    let g = generator(&shared, &host).with_promotion_margin(Some(1_000));
    assert_eq!(g.next_id(shard(1)), Err(Refused::Fenced(Fence::Upgraded)));
    assert_eq!(host.header().timeline, 2);
    assert_eq!(host.header().fence, Some(Fence::Upgraded));
}

#[test]
fn resuming_refuses_a_typo_that_would_spend_the_id_space() {
    let host = Host::new();
    let shared = host.restart();
    let g = generator(&shared, &host);
    let far = compose(now_ms(&host) + 2 * MAX_RESUME_AHEAD_MS as u64, 0, 0).unwrap();
    assert!(matches!(
        g.resume_above(parts(far)),
        Err(Refused::TooFarAhead { .. })
    ));
    assert!(
        host.changes
            .borrow()
            .iter()
            .all(|c| matches!(c, Change::Init(_))),
        "nothing but the state's creation was written"
    );
    // The floor is the millisecond after the ID's: exactly a day ahead is allowed, a day and a
    // millisecond is not.
    let over = compose(now_ms(&host) + MAX_RESUME_AHEAD_MS as u64, 0, 0).unwrap();
    assert!(matches!(
        g.resume_above(parts(over)),
        Err(Refused::TooFarAhead { .. })
    ));
    let limit = compose(now_ms(&host) + MAX_RESUME_AHEAD_MS as u64 - 1, 0, 0).unwrap();
    assert!(g.resume_above(parts(limit)).is_ok());
}

#[test]
fn every_shard_has_its_own_cell_in_shard_order() {
    let host = Host::new();
    let shared = host.restart();
    assert_eq!(shared.shards().len(), crate::layout::SHARD_COUNT);
    let id = generator(&shared, &host).next_id(shard(4097)).unwrap();
    assert_eq!(shared.shards()[4097].last().0, stamp_of(id));
    assert!(std::ptr::eq(
        &shared.shards()[4097],
        shared.shard(shard(4097))
    ));
    assert!(shared.shards()[4096].last().0 < stamp_of(id));
    // And every shard its own tally, in the same order.
    assert_eq!(shared.tallies().len(), crate::layout::SHARD_COUNT);
    for n in [0, 1, 3, 4097, 8190, 8191] {
        assert!(
            std::ptr::eq(shared.tally(shard(n)), &shared.tallies()[n as usize]),
            "shard {n}'s tally"
        );
    }
}

#[test]
fn running_ahead_is_reported_only_past_the_lead() {
    for (behind, reported) in [(LEAD as i64, false), (LEAD as i64 + 1, true)] {
        let host = Host::new();
        let shared = host.restart();
        let g = generator(&shared, &host);
        g.next_id(shard(1)).unwrap();
        host.wall_offset.set(host.wall_offset.get() - behind);
        host.advance(20);
        g.next_id(shard(1)).unwrap();
        let ahead = host
            .events
            .borrow()
            .iter()
            .any(|e| matches!(e, Event::RunningAhead { .. }));
        assert_eq!(ahead, reported, "the wall clock {behind} ms behind");
    }
}

#[test]
fn every_wait_at_the_lead_is_counted() {
    let host = Host::new();
    let shared = host.restart();
    let g = Generator::new(&shared, &host, EPOCH, 0);
    g.next_id(shard(9)).unwrap();
    // At lead 0 the fast path still issues in the current millisecond.
    let FastIssue::Issued(id) = shared.try_issue(shard(9), host.mono.get(), EPOCH, 0) else {
        panic!("the fast path issues in the current millisecond at lead 0")
    };
    assert_eq!(ms_of(id), now_ms(&host));
    host.waited.borrow_mut().clear();
    // With no lead, a millisecond holds 1,024 IDs: 3,072 more from a frozen clock wait three
    // times, a millisecond each.
    for _ in 0..3 * 1024 {
        g.next_id(shard(9)).unwrap();
    }
    assert_eq!(host.waited.borrow().as_slice(), [1, 1, 1]);
    assert_eq!(shared.tally(shard(9)).waits(), 3);
}

#[test]
fn a_resume_cancelled_while_waiting_for_the_standbys_is_in_force_here() {
    // Guards against a resume, a take-back or a fence lift whose 57014 says it holds while it
    // did not (0.6.0: after a resume above X cancelled while waiting for the standbys, 1,000 of
    // 1,000 new IDs were at or below X until a restart).
    let host = Host::new();
    let shared = host.restart();
    let g = generator(&shared, &host);
    let last = g.next_id(shard(7)).unwrap();
    let above = compose(ms_of(last) + 600_000, 7, 9).unwrap();
    host.standbys_cancelled.set(true);
    assert_eq!(
        g.resume_above(parts(above)),
        Err(Refused::Persist(DiskFull))
    );
    host.standbys_cancelled.set(false);
    let next = g.next_id(shard(7)).unwrap();
    assert!(next > above, "in force: {next} is not above {above}");
    assert!(g.next_id(shard(8)).unwrap() > above, "every shard");

    // A take-back cancelled so: the shard issues again, above the ID it was taken back above.
    g.release(shard(5)).unwrap();
    let theirs = compose(ms_of(next) + 1000, 5, 3).unwrap();
    host.standbys_cancelled.set(true);
    assert!(g.take_back(parts(theirs), &mut || {}).is_err());
    host.standbys_cancelled.set(false);
    assert!(g.next_id(shard(5)).unwrap() > theirs, "taken back");

    // A fence lift cancelled so: the server generates.
    let fenced = Host::with_disk(Header::fenced(Fence::Lost, EPOCH));
    let shared = fenced.restart();
    let g = generator(&shared, &fenced);
    let above = compose(now_ms(&fenced) + 50, 3, 3).unwrap();
    fenced.standbys_cancelled.set(true);
    assert!(g.resume_above(parts(above)).is_err());
    fenced.standbys_cancelled.set(false);
    assert_eq!(
        shared.lease.status(),
        Status::Generating,
        "the fence is lifted"
    );
    assert!(g.next_id(shard(1)).unwrap() > above);
}

#[test]
fn a_lease_cancelled_while_waiting_for_the_standbys_covers_no_id() {
    // Guards against an ID handed out under a lease the synchronous standbys may not have.
    let host = Host::new();
    let shared = host.restart();
    let g = generator(&shared, &host);
    host.standbys_cancelled.set(true);
    assert_eq!(g.next_id(shard(1)), Err(Refused::Persist(DiskFull)));
    assert_eq!(shared.lease.end_ms(), 0, "not published");
    // A resume's lease is published only once the standbys have it, too.
    let above = compose(now_ms(&host) + 10, 1, 0).unwrap();
    let _ = g.resume_above(parts(above));
    assert_eq!(shared.lease.end_ms(), 0, "not published");
    assert_eq!(
        shared.try_issue(shard(1), host.mono.get(), EPOCH, LEAD),
        FastIssue::Slow
    );
}

#[test]
fn a_release_stopped_then_undone_issues_again_and_one_made_durable_stays() {
    let host = Host::new();
    let shared = host.restart();
    let g = generator(&shared, &host);
    let last = g.next_id(shard(4)).unwrap();
    let stopped = g.stop_issuing(shard(4)).unwrap();
    assert_eq!(stopped.last_id, last);
    assert!(!stopped.was_released);
    assert_eq!(
        g.next_id(shard(4)),
        Err(Refused::Released),
        "stopped at once"
    );
    let writes = host.persists();
    g.resume_issuing(stopped);
    assert_eq!(host.persists(), writes, "nothing durable");
    assert!(g.next_id(shard(4)).unwrap() > last, "issues again, above");

    // Made durable: outlives a restart; a second release returns the same last ID, and undoing
    // that second one leaves the first in place.
    let stopped = g.stop_issuing(shard(4)).unwrap();
    let last = g.make_release_durable(&stopped).unwrap();
    let again = g.stop_issuing(shard(4)).unwrap();
    assert!(again.was_released);
    assert_eq!(again.last_id, last);
    g.resume_issuing(again);
    assert_eq!(g.next_id(shard(4)), Err(Refused::Released));
    let shared = host.restart();
    assert_eq!(
        generator(&shared, &host).next_id(shard(4)),
        Err(Refused::Released)
    );
}

#[test]
fn a_fenced_state_lifts_under_the_epoch_configured_then() {
    // Guards against a fence no statement could lift (0.6.0: a cluster upgraded while the
    // default epoch was configured, then given its old, later epoch back, refused every resume
    // with a detail naming an epoch no ID was issued under).
    let later = EPOCH + 86_400_000 * 300;
    let host = Host::with_disk(Header::fenced(Fence::Upgraded, EPOCH));
    host.wall_offset
        .set(later + 86_400_000 * 20 - host.mono.get());
    let shared = host.restart();
    let g = Generator::new(&shared, &host, later, LEAD);
    assert_eq!(
        g.next_id(shard(2)),
        Err(Refused::Fenced(Fence::Upgraded)),
        "the fence, not the epoch, is what refuses"
    );
    let now = (host.wall_ms() - later) as u64;
    let old_key = compose(now - 5_000, 2, 7).unwrap();
    g.resume_above(parts(old_key)).unwrap();
    assert_eq!(
        host.header().epoch_unix_ms,
        later,
        "the epoch of the resume"
    );
    assert!(g.next_id(shard(2)).unwrap() > old_key);
    let shared = host.restart();
    let g = Generator::new(&shared, &host, later, LEAD);
    assert!(
        g.next_id(shard(2)).unwrap() > old_key,
        "after a restart too"
    );
    // The epoch now constrains as any other: a later one still is refused.
    let shared = host.restart();
    let g = Generator::new(&shared, &host, later + 1, LEAD);
    assert!(matches!(
        g.next_id(shard(2)),
        Err(Refused::EpochMovedLater { .. })
    ));
}
