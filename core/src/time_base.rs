//! The time base: the wall clock, except that it never steps backwards, and follows a forward
//! step only once the step has lasted.
//!
//! Generation reads the monotonic clock, which never jumps, and adds a shared offset:
//! `base = monotonic + offset`. The offset only ever grows, so the base never goes back and,
//! between adjustments, advances at exactly real-time rate.
//!
//! Every [`CHECK_INTERVAL_MS`] one caller (whichever wins a CAS on the due time) compares the
//! base with a fresh [`Sample`] of the wall clock:
//! - wall clock within [`FORWARD_TOLERANCE_MS`] ahead (ordinary drift, or catching up after a
//!   backward step): the offset grows so that the base follows it at once;
//! - wall clock further ahead (a forward step): the base keeps its pace until the step has been
//!   seen for [`CONFIRM_FORWARD_MS`], then jumps to the wall clock. A step that reverts before
//!   that (an NTP misstep, a VM restored to an image with the wrong time) is a glitch: it is
//!   never followed, so no ID, lease or restart carries its date. A sustained step (a VM resumed
//!   from suspend, whose monotonic clock stood still) is followed within about a second;
//! - wall clock behind (a backward step, or a restart with the clock set back): the base carries
//!   on at real-time rate from where it was, until the wall clock catches up. A sudden growth of
//!   that gap is reported as a backward step.
//!
//! The base can also be raised on purpose ([`TimeBase::raise_to`]): to a recorded base, or to
//! resume above IDs issued elsewhere. That is a forward step, never a backward one.
//!
//! So reading the base costs one clock read and two loads from a line that only the comparison,
//! every [`CHECK_INTERVAL_MS`], writes.

use crate::clock::Sample;
use crate::sync::{AtomicI64, AtomicU64};
use std::sync::atomic::Ordering::Relaxed;

/// How often the base is compared with the wall clock, in monotonic milliseconds.
pub const CHECK_INTERVAL_MS: i64 = 10;
/// A jump of the wall clock behind the base smaller than this is rounding, not a step.
pub const STEP_TOLERANCE_MS: i64 = 5;
/// How far ahead of the base the wall clock may be and still be followed at once.
pub const FORWARD_TOLERANCE_MS: i64 = 5;
/// How long a forward step must last before the base follows it.
pub const CONFIRM_FORWARD_MS: i64 = 1000;
const NONE: i64 = i64::MIN;

/// The shared time base. All values are milliseconds.
#[repr(C, align(64))]
pub struct TimeBase {
    /// The base minus the monotonic clock: Unix time of monotonic zero, as the base sees it.
    offset_ms: AtomicI64,
    /// The monotonic time at which the next comparison with the wall clock is due.
    next_check_ms: AtomicI64,
    /// How far the wall clock was behind the base at the last comparison (0 when not behind).
    wall_behind_ms: AtomicI64,
    /// Backward steps of the wall clock seen since start.
    steps_back: AtomicU64,
    /// The monotonic time a forward step not yet followed was first seen ([`NONE`]: there is
    /// none), and the most it has been ahead since.
    ahead_since_ms: AtomicI64,
    ahead_peak_ms: AtomicI64,
}

/// What a comparison with the wall clock found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Comparison {
    /// How far the wall clock is behind the base now (0 when it is not).
    pub wall_behind_ms: i64,
    /// How far the wall clock stepped back since the last comparison (0 when it did not).
    pub stepped_back_ms: i64,
    /// A forward step this comparison followed or gave up on.
    pub forward: Option<Forward>,
}

/// The fate of a forward step of the wall clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forward {
    /// It lasted, and the base now follows it.
    Followed { ms: i64, confirmed_after_ms: i64 },
    /// It reverted before it was confirmed: the base never followed it.
    Ignored { ms: i64, lasted_ms: i64 },
}

impl TimeBase {
    /// A base that starts at the wall clock, or at `floor_unix_ms` if the wall clock is behind
    /// it (the persisted base of an earlier run).
    pub fn starting_at(now: Sample, floor_unix_ms: i64) -> TimeBase {
        let base = TimeBase {
            offset_ms: AtomicI64::new(0),
            next_check_ms: AtomicI64::new(0),
            wall_behind_ms: AtomicI64::new(0),
            steps_back: AtomicU64::new(0),
            ahead_since_ms: AtomicI64::new(NONE),
            ahead_peak_ms: AtomicI64::new(0),
        };
        base.restart(now, floor_unix_ms);
        base
    }

    /// Starts the base afresh, as [`TimeBase::starting_at`] does, in place.
    pub fn restart(&self, now: Sample, floor_unix_ms: i64) {
        let start = now.wall_ms.max(floor_unix_ms);
        self.offset_ms.store(start - now.mono_ms, Relaxed);
        self.next_check_ms
            .store(now.mono_ms + CHECK_INTERVAL_MS, Relaxed);
        self.wall_behind_ms.store(start - now.wall_ms, Relaxed);
        self.steps_back.store(0, Relaxed);
        self.ahead_since_ms.store(NONE, Relaxed);
        self.ahead_peak_ms.store(0, Relaxed);
    }

    /// The base in Unix milliseconds at monotonic time `mono_ms`, and whether a comparison with
    /// the wall clock is due.
    #[inline]
    pub fn read(&self, mono_ms: i64) -> (i64, bool) {
        let base = mono_ms + self.offset_ms.load(Relaxed);
        (base, mono_ms >= self.next_check_ms.load(Relaxed))
    }

    /// Compares the base with the wall clock and follows it forward (at once for drift, after
    /// [`CONFIRM_FORWARD_MS`] for a step). Only one caller per interval does the work; the others
    /// get `None`.
    pub fn compare(&self, now: Sample) -> Option<Comparison> {
        let due = self.next_check_ms.load(Relaxed);
        if now.mono_ms < due
            || self
                .next_check_ms
                .compare_exchange(due, now.mono_ms + CHECK_INTERVAL_MS, Relaxed, Relaxed)
                .is_err()
        {
            return None;
        }
        let ahead = now.wall_ms - (now.mono_ms + self.offset_ms.load(Relaxed));
        let forward = if ahead > FORWARD_TOLERANCE_MS {
            self.pending_step(now, ahead)
        } else {
            if ahead > 0 {
                self.follow(now);
            }
            self.forget_step(now)
        };
        let base = now.mono_ms + self.offset_ms.load(Relaxed);
        let behind = (base - now.wall_ms).max(0);
        let before = self.wall_behind_ms.swap(behind, Relaxed);
        let stepped_back_ms = if behind - before > STEP_TOLERANCE_MS {
            behind - before
        } else {
            0
        };
        if stepped_back_ms > 0 {
            self.steps_back.fetch_add(1, Relaxed);
        }
        Some(Comparison {
            wall_behind_ms: behind,
            stepped_back_ms,
            forward,
        })
    }

    /// Lets the base jump to the wall clock. `fetch_max`, not a store: a comparer that was
    /// descheduled must not pull the base back below what a later comparer (or a raise) set.
    fn follow(&self, now: Sample) {
        self.offset_ms.fetch_max(now.wall_ms - now.mono_ms, Relaxed);
    }

    /// The wall clock is `ahead` of the base by more than drift: starts timing the step, or
    /// follows it once it has lasted.
    fn pending_step(&self, now: Sample, ahead: i64) -> Option<Forward> {
        let since = self.ahead_since_ms.load(Relaxed);
        if since == NONE {
            if self
                .ahead_since_ms
                .compare_exchange(NONE, now.mono_ms, Relaxed, Relaxed)
                .is_ok()
            {
                self.ahead_peak_ms.store(ahead, Relaxed);
            }
            return None;
        }
        self.ahead_peak_ms.fetch_max(ahead, Relaxed);
        let lasted_ms = now.mono_ms - since;
        if lasted_ms < CONFIRM_FORWARD_MS
            || self
                .ahead_since_ms
                .compare_exchange(since, NONE, Relaxed, Relaxed)
                .is_err()
        {
            return None;
        }
        self.follow(now);
        Some(Forward::Followed {
            ms: ahead,
            confirmed_after_ms: lasted_ms,
        })
    }

    /// The wall clock is back near the base: a step still pending was a glitch.
    fn forget_step(&self, now: Sample) -> Option<Forward> {
        let since = self.ahead_since_ms.swap(NONE, Relaxed);
        if since == NONE {
            return None;
        }
        Some(Forward::Ignored {
            ms: self.ahead_peak_ms.load(Relaxed),
            lasted_ms: now.mono_ms - since,
        })
    }

    /// Raises the base to at least `floor_unix_ms` at the sample's monotonic time: a forward
    /// step, taken on purpose. The gap it opens to the wall clock is not reported as a backward
    /// step.
    pub fn raise_to(&self, floor_unix_ms: i64, now: Sample) {
        let previous = self
            .offset_ms
            .fetch_max(floor_unix_ms - now.mono_ms, Relaxed);
        let base = now.mono_ms + previous.max(floor_unix_ms - now.mono_ms);
        self.wall_behind_ms
            .fetch_max((base - now.wall_ms).max(0), Relaxed);
    }

    /// How far the wall clock was behind the base at the last comparison.
    pub fn wall_behind_ms(&self) -> i64 {
        self.wall_behind_ms.load(Relaxed)
    }

    /// Backward steps of the wall clock seen since start.
    pub fn steps_back(&self) -> u64 {
        self.steps_back.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::stamp_ms;
    use crate::shard_state::{issue, Refusal};
    use proptest::prelude::*;
    use std::sync::atomic::{AtomicI64, AtomicU64};
    use std::sync::Arc;
    use std::thread;

    fn at(mono_ms: i64, wall_ms: i64) -> Sample {
        Sample { mono_ms, wall_ms }
    }

    /// A simulated machine: a monotonic clock and a wall clock that can be stepped.
    struct Clocks {
        mono: i64,
        wall_offset: i64,
    }

    impl Clocks {
        fn wall(&self) -> i64 {
            self.mono + self.wall_offset
        }
        fn now(&self) -> Sample {
            at(self.mono, self.wall())
        }
        /// Advances real time, comparing with the wall clock as often as generation would.
        fn run(&mut self, base: &TimeBase, ms: i64) -> Vec<Comparison> {
            let mut seen = Vec::new();
            for _ in 0..ms {
                self.mono += 1;
                seen.extend(base.compare(self.now()));
            }
            seen
        }
    }

    const T0: i64 = 1_800_000_000_000;

    #[test]
    fn follows_drift_at_once_and_a_forward_step_once_it_has_lasted() {
        let mut clocks = Clocks {
            mono: 5_000,
            wall_offset: T0 - 5_000,
        };
        let base = TimeBase::starting_at(clocks.now(), 0);
        clocks.run(&base, 100);
        assert_eq!(base.read(clocks.mono).0, clocks.wall());
        clocks.wall_offset += FORWARD_TOLERANCE_MS;
        clocks.run(&base, CHECK_INTERVAL_MS);
        assert_eq!(base.read(clocks.mono).0, clocks.wall(), "drift is followed");

        // A VM resumed from suspend: the wall clock is a minute ahead, for good.
        clocks.wall_offset += 60_000;
        let before = base.read(clocks.mono).0;
        let seen = clocks.run(&base, CONFIRM_FORWARD_MS - CHECK_INTERVAL_MS);
        assert_eq!(
            base.read(clocks.mono).0 - before,
            CONFIRM_FORWARD_MS - CHECK_INTERVAL_MS,
            "real-time rate while the step is unconfirmed"
        );
        assert!(seen.iter().all(|c| c.forward.is_none()));
        let seen = clocks.run(&base, 2 * CHECK_INTERVAL_MS);
        assert_eq!(
            base.read(clocks.mono).0,
            clocks.wall(),
            "followed within a second"
        );
        let followed: Vec<_> = seen.iter().filter_map(|c| c.forward).collect();
        assert!(
            matches!(followed[..], [Forward::Followed { ms: 60_000, confirmed_after_ms }] if confirmed_after_ms >= CONFIRM_FORWARD_MS),
            "{followed:?}"
        );
        assert_eq!(base.steps_back(), 0);
    }

    #[test]
    fn a_forward_glitch_that_reverts_is_never_followed() {
        // Guards against a wall clock that jumps a day ahead for half a second (an NTP misstep):
        // followed at once, it would date every later ID, lease and restart a day ahead.
        let mut clocks = Clocks {
            mono: 0,
            wall_offset: T0,
        };
        let base = TimeBase::starting_at(clocks.now(), 0);
        clocks.run(&base, 50);
        clocks.wall_offset += 86_400_000;
        let mut seen = clocks.run(&base, 500);
        assert_eq!(base.read(clocks.mono).0, clocks.wall() - 86_400_000);
        clocks.wall_offset -= 86_400_000;
        seen.extend(clocks.run(&base, 3 * CONFIRM_FORWARD_MS));
        assert_eq!(
            base.read(clocks.mono).0,
            clocks.wall(),
            "never ahead of the real clock"
        );
        let glitches: Vec<_> = seen.iter().filter_map(|c| c.forward).collect();
        assert!(
            matches!(glitches[..], [Forward::Ignored { ms: 86_400_000, lasted_ms }] if (490..=510).contains(&lasted_ms)),
            "{glitches:?}"
        );
        assert!(
            seen.iter().all(|c| c.stepped_back_ms == 0),
            "the revert is no backward step"
        );
    }

    #[test]
    fn a_backward_step_neither_stalls_nor_reverses() {
        let mut clocks = Clocks {
            mono: 0,
            wall_offset: T0,
        };
        let base = TimeBase::starting_at(clocks.now(), 0);
        clocks.run(&base, 50);
        let before = base.read(clocks.mono).0;

        clocks.wall_offset -= 600_000; // ten minutes back
        let seen = clocks.run(&base, 3_000);
        let after = base.read(clocks.mono).0;
        assert_eq!(after - before, 3_000, "the base advances at real-time rate");
        assert_eq!(base.steps_back(), 1, "one step, reported once");
        assert_eq!(seen.iter().filter(|c| c.stepped_back_ms > 0).count(), 1);
        assert!(seen.iter().any(|c| c.stepped_back_ms == 600_000));
        assert!(seen.iter().all(|c| c.wall_behind_ms == 600_000));
        assert_eq!(base.wall_behind_ms(), 600_000);
        assert!(seen.iter().all(|c| c.forward.is_none()));
    }

    #[test]
    fn a_step_back_within_the_tolerance_is_rounding() {
        for (step, reported) in [(STEP_TOLERANCE_MS, false), (STEP_TOLERANCE_MS + 1, true)] {
            let mut clocks = Clocks {
                mono: 0,
                wall_offset: T0,
            };
            let base = TimeBase::starting_at(clocks.now(), 0);
            clocks.run(&base, 50);
            clocks.wall_offset -= step;
            let seen = clocks.run(&base, CHECK_INTERVAL_MS);
            assert_eq!(seen.len(), 1);
            assert_eq!(seen[0].wall_behind_ms, step);
            assert_eq!(seen[0].stepped_back_ms > 0, reported, "a step of {step} ms");
            assert_eq!(base.steps_back(), u64::from(reported));
        }
    }

    #[test]
    fn a_further_step_back_is_measured_from_the_gap_already_there() {
        let mut clocks = Clocks {
            mono: 0,
            wall_offset: T0,
        };
        let base = TimeBase::starting_at(clocks.now(), 0);
        clocks.wall_offset -= 1_000;
        clocks.run(&base, 50);
        assert_eq!(base.steps_back(), 1);
        clocks.wall_offset -= STEP_TOLERANCE_MS;
        let seen = clocks.run(&base, 50);
        assert!(
            seen.iter().all(|c| c.stepped_back_ms == 0),
            "a step within the tolerance on top of a gap is rounding: {seen:?}"
        );
        clocks.wall_offset -= 600;
        let seen = clocks.run(&base, 50);
        let steps: Vec<i64> = seen
            .iter()
            .map(|c| c.stepped_back_ms)
            .filter(|&s| s > 0)
            .collect();
        assert_eq!(steps, [600], "the step, not the whole gap");
        assert_eq!(base.steps_back(), 2);
        assert_eq!(base.wall_behind_ms(), 1_000 + STEP_TOLERANCE_MS + 600);
    }

    #[test]
    fn resumes_following_once_the_wall_clock_catches_up() {
        let mut clocks = Clocks {
            mono: 0,
            wall_offset: T0,
        };
        let base = TimeBase::starting_at(clocks.now(), 0);
        clocks.wall_offset -= 1_000;
        clocks.run(&base, 100);
        assert_eq!(base.wall_behind_ms(), 1_000);
        clocks.wall_offset += 1_000; // the operator puts the clock right
        clocks.run(&base, CHECK_INTERVAL_MS);
        assert_eq!(
            base.read(clocks.mono).0,
            clocks.wall(),
            "caught up: followed at once"
        );
        assert_eq!(base.wall_behind_ms(), 0);

        clocks.wall_offset -= 1_000;
        clocks.run(&base, 100);
        clocks.wall_offset += 5_000; // put right again, overshooting: a forward step
        clocks.run(&base, 100);
        assert!(base.read(clocks.mono).0 < clocks.wall());
        clocks.run(&base, CONFIRM_FORWARD_MS);
        assert_eq!(base.read(clocks.mono).0, clocks.wall());
        assert_eq!(base.wall_behind_ms(), 0);
    }

    #[test]
    fn starts_at_a_persisted_floor_when_the_clock_was_set_back() {
        let base = TimeBase::starting_at(at(10, T0 - 3_600_000), T0);
        assert_eq!(base.read(10).0, T0);
        assert_eq!(base.read(1_010).0, T0 + 1_000);
        assert_eq!(base.wall_behind_ms(), 3_600_000);
        let base = TimeBase::starting_at(at(10, T0), T0 - 5);
        assert_eq!(
            base.read(10).0,
            T0,
            "a floor behind the clock changes nothing"
        );
        assert_eq!(base.wall_behind_ms(), 0);
    }

    #[test]
    fn only_one_caller_per_interval_compares() {
        let base = TimeBase::starting_at(at(0, T0), 0);
        assert!(!base.read(CHECK_INTERVAL_MS - 1).1);
        assert!(
            base.read(CHECK_INTERVAL_MS).1,
            "due exactly at the interval"
        );
        assert!(base.compare(at(CHECK_INTERVAL_MS - 1, T0)).is_none());
        assert!(base.compare(at(CHECK_INTERVAL_MS, T0)).is_some());
        assert!(base.compare(at(CHECK_INTERVAL_MS, T0)).is_none());
        assert!(!base.read(2 * CHECK_INTERVAL_MS - 1).1);
        assert!(base.compare(at(2 * CHECK_INTERVAL_MS - 1, T0)).is_none());
        assert!(base.compare(at(2 * CHECK_INTERVAL_MS, T0)).is_some());
    }

    #[test]
    fn a_raise_is_a_forward_step_and_not_a_backward_one() {
        let mut clocks = Clocks {
            mono: 0,
            wall_offset: T0,
        };
        let base = TimeBase::starting_at(clocks.now(), 0);
        clocks.run(&base, 20);
        base.raise_to(T0 + 600_000, clocks.now());
        assert_eq!(base.read(clocks.mono).0, T0 + 600_000);
        assert_eq!(
            base.wall_behind_ms(),
            600_000 - 20,
            "the gap is known at once, before the next comparison"
        );
        let seen = clocks.run(&base, 100);
        assert_eq!(base.steps_back(), 0, "{seen:?}");
        assert_eq!(base.wall_behind_ms(), 600_000 - 20);
        assert_eq!(
            base.read(clocks.mono).0,
            T0 + 600_000 + 100,
            "real-time rate"
        );
        base.raise_to(T0, clocks.now());
        assert_eq!(
            base.read(clocks.mono).0,
            T0 + 600_100,
            "a raise below the base changes nothing"
        );
        assert_eq!(base.wall_behind_ms(), 600_000 - 20);
    }

    #[derive(Clone, Debug)]
    enum Change {
        Tick(i64),
        Step(i64),
        Stall(i64),
        Raise(i64),
    }

    fn changes() -> impl Strategy<Value = Vec<Change>> {
        prop::collection::vec(
            prop_oneof![
                (1i64..50).prop_map(Change::Tick),
                (-900_000i64..900_000).prop_map(Change::Step),
                (1i64..30).prop_map(Change::Stall),
                (-10_000i64..10_000).prop_map(Change::Raise),
            ],
            1..200,
        )
    }

    proptest! {
        /// Whatever the wall clock does, the base never goes back and never lags the monotonic
        /// clock's progress; and once the wall clock has held still for a confirmation period,
        /// the base is exactly as far ahead of it as the comparisons say, never behind it.
        #[test]
        fn the_base_is_monotonic_and_catches_up_with_a_lasting_wall_clock(changes in changes()) {
            let mut clocks = Clocks { mono: 1_000, wall_offset: T0 };
            let base = TimeBase::starting_at(clocks.now(), 0);
            let (mut last, mut last_mono) = (base.read(clocks.mono).0, clocks.mono);
            for change in changes {
                match change {
                    Change::Tick(ms) => { clocks.run(&base, ms); }
                    Change::Step(ms) => clocks.wall_offset += ms,
                    // The wall clock stands still while real time passes.
                    Change::Stall(ms) => { clocks.wall_offset -= ms; clocks.run(&base, ms); }
                    Change::Raise(ms) => base.raise_to(base.read(clocks.mono).0 + ms, clocks.now()),
                }
                let now = base.read(clocks.mono).0;
                prop_assert!(now - last >= clocks.mono - last_mono, "never slower than real time");
                (last, last_mono) = (now, clocks.mono);
                clocks.run(&base, CONFIRM_FORWARD_MS + 2 * CHECK_INTERVAL_MS);
                let now = base.read(clocks.mono).0;
                prop_assert!(now - last >= clocks.mono - last_mono, "never slower than real time");
                prop_assert!(now >= clocks.wall(), "caught up with the wall clock");
                prop_assert_eq!(base.wall_behind_ms(), now - clocks.wall());
                (last, last_mono) = (now, clocks.mono);
            }
        }

        /// Threads race on one shard while another thread steps the wall clock about; every
        /// thread's IDs increase, none repeats, and none runs past the lead.
        #[test]
        fn racing_threads_on_one_shard_with_a_jumping_clock(steps in prop::collection::vec(-5_000i64..5_000, 1..20)) {
            let base = Arc::new(TimeBase::starting_at(at(0, T0), 0));
            let mono = Arc::new(AtomicI64::new(0));
            let wall_offset = Arc::new(AtomicI64::new(T0));
            let cell = Arc::new(AtomicU64::new(0));
            let max_lead = 20;
            let workers: Vec<_> = (0..3).map(|_| {
                let (base, mono, wall_offset, cell) =
                    (base.clone(), mono.clone(), wall_offset.clone(), cell.clone());
                thread::spawn(move || {
                    let mut mine = Vec::new();
                    while mine.len() < 3_000 {
                        let m = mono.load(Relaxed);
                        let (now, due) = base.read(m);
                        if due { base.compare(at(m, m + wall_offset.load(Relaxed))); }
                        let now_ms = (now - T0) as u64;
                        match issue(&cell, now_ms, max_lead, u64::MAX) {
                            Ok(s) => {
                                assert!(stamp_ms(s) <= now_ms + max_lead);
                                mine.push(s);
                            }
                            Err(Refusal::Ahead { .. }) => { mono.fetch_add(1, Relaxed); }
                            Err(other) => panic!("{other:?}"),
                        }
                    }
                    mine
                })
            }).collect();
            for step in steps {
                wall_offset.fetch_add(step, Relaxed);
                mono.fetch_add(3, Relaxed);
                thread::yield_now();
            }
            let mut all = Vec::new();
            for w in workers {
                let mine = w.join().unwrap();
                prop_assert!(mine.windows(2).all(|p| p[0] < p[1]));
                all.extend(mine);
            }
            let n = all.len();
            all.sort_unstable();
            all.dedup();
            prop_assert_eq!(all.len(), n);
        }
    }
}
