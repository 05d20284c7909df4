//! A simulated machine for the core's tests: clocks the test moves, a "disk" holding the durable
//! state that can fail, panic or "crash" between writing and publishing, another caller that
//! races the writer, and waits that stop. The protocol's tests (`generator/tests.rs`) and the
//! plans' (`release_plan/tests.rs`) run against it.

use crate::clock::Sample;
use crate::durable::{Change, DurableState, Header};
use crate::generator::{Generator, Shared};
use crate::host::{Clock, DurableStore, Event, Interrupted, Report, Wait};
use crate::layout::{decompose, Parts, Shard};
use crate::startup::{self, Context, Found, Occasion, Plan, Reading, Write};
use std::cell::{Cell, RefCell};

pub(crate) const EPOCH: i64 = 1_767_225_600_000;
pub(crate) const T0: i64 = EPOCH + 100_000_000;
pub(crate) const LEAD: u64 = 1000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DiskFull;

/// A simulated machine. Time moves only when the test, or a wait, moves it.
pub(crate) struct Host {
    pub(crate) mono: Cell<i64>,
    pub(crate) wall_offset: Cell<i64>,
    /// The durable state, as a restart would find it.
    pub(crate) disk: RefCell<Option<DurableState>>,
    /// Every change made durable, in order.
    pub(crate) changes: RefCell<Vec<Change>>,
    /// The claimer number of this "process".
    pub(crate) claimer: Cell<u32>,
    pub(crate) fail_persist: Cell<bool>,
    /// Every write fails once this many changes are durable.
    pub(crate) fail_after_persists: Cell<Option<usize>>,
    pub(crate) panic_persist: Cell<bool>,
    /// The wait for the synchronous standbys is cancelled: every change is durable here, in
    /// force, and then fails.
    pub(crate) standbys_cancelled: Cell<bool>,
    /// Runs inside `persist`, before the change is durable: another caller racing the writer.
    pub(crate) during_persist: RefCell<Option<Box<dyn Fn()>>>,
    /// How many waits may still pass before a wait is "cancelled".
    pub(crate) waits_left: Cell<u32>,
    pub(crate) waited: RefCell<Vec<u64>>,
    pub(crate) events: RefCell<Vec<Event>>,
    /// The store's timeline (0: none), which a promotion moves on.
    pub(crate) timeline: Cell<u32>,
    /// Whether the disk ever held the state: its witness.
    pub(crate) had_state: Cell<bool>,
}

impl Host {
    /// A host whose disk holds the state `CREATE EXTENSION` created, as start-up plans it.
    pub(crate) fn new() -> Host {
        let host = Host::bare();
        host.start(Occasion::Install, &|reading| {
            startup::plan(reading, Occasion::Install, &context_at(host.wall_ms()))
        })
        .unwrap();
        host
    }

    /// A host whose disk holds nothing, and never did.
    pub(crate) fn bare() -> Host {
        Host {
            mono: Cell::new(1_000),
            wall_offset: Cell::new(T0 - 1_000),
            disk: RefCell::new(None),
            changes: RefCell::new(Vec::new()),
            claimer: Cell::new(1),
            fail_persist: Cell::new(false),
            fail_after_persists: Cell::new(None),
            panic_persist: Cell::new(false),
            standbys_cancelled: Cell::new(false),
            during_persist: RefCell::new(None),
            waits_left: Cell::new(u32::MAX),
            waited: RefCell::new(Vec::new()),
            events: RefCell::new(Vec::new()),
            timeline: Cell::new(0),
            had_state: Cell::new(false),
        }
    }

    /// A host whose disk already holds a state.
    pub(crate) fn with_disk(header: Header) -> Host {
        let host = Host::bare();
        *host.disk.borrow_mut() = Some(DurableState::new(header));
        host.had_state.set(true);
        host
    }

    /// Whether the next write fails, or panics, as the test set it up to.
    pub(crate) fn write_fails(&self) -> Result<(), DiskFull> {
        if let Some(racer) = self.during_persist.borrow().as_ref() {
            racer();
        }
        if self.panic_persist.get() {
            panic!("an error raised by the store");
        }
        if self.fail_persist.get()
            || self
                .fail_after_persists
                .get()
                .is_some_and(|n| self.persists() >= n)
        {
            return Err(DiskFull);
        }
        Ok(())
    }

    pub(crate) fn now(&self) -> Sample {
        Sample {
            mono_ms: self.mono.get(),
            wall_ms: self.wall_ms(),
        }
    }

    pub(crate) fn advance(&self, ms: i64) {
        self.mono.set(self.mono.get() + ms);
    }

    /// Shared memory as a start, or a crash restart, leaves it: nothing loaded.
    pub(crate) fn restart(&self) -> Shared {
        Shared::new(self.now())
    }

    pub(crate) fn header(&self) -> Header {
        self.disk.borrow().as_ref().unwrap().header.clone()
    }

    pub(crate) fn persists(&self) -> usize {
        self.changes.borrow().len()
    }
}

impl Clock for Host {
    fn monotonic_ms(&self) -> i64 {
        self.mono.get()
    }
    fn wall_ms(&self) -> i64 {
        self.mono.get() + self.wall_offset.get()
    }
}

impl DurableStore for Host {
    type Error = DiskFull;

    fn claimer(&self) -> u32 {
        self.claimer.get()
    }

    fn start(
        &self,
        _occasion: Occasion,
        plan: &dyn Fn(Reading<'_>) -> Plan,
    ) -> Result<Plan, DiskFull> {
        let found = match self.disk.borrow().clone() {
            Some(state) => Found::State(Box::new(state)),
            None => Found::Missing,
        };
        let plan = plan(Reading {
            found,
            witnessed: &|| self.had_state.get(),
            timeline: self.timeline.get(),
        });
        match &plan.write {
            Write::Nothing => {}
            Write::State => {
                self.write_fails()?;
                *self.disk.borrow_mut() = Some(plan.state.clone());
                self.had_state.set(true);
                self.changes
                    .borrow_mut()
                    .push(Change::Init(Box::new(plan.state.header.clone())));
            }
            Write::Change(change) => self.persist(change, &mut || {})?,
        }
        Ok(plan)
    }

    fn persist(&self, change: &Change, in_force: &mut dyn FnMut()) -> Result<(), DiskFull> {
        self.write_fails()?;
        {
            let mut disk = self.disk.borrow_mut();
            let state = disk.get_or_insert_with(|| DurableState::new(Header::fresh(0)));
            change.apply(state);
            self.changes.borrow_mut().push(change.clone());
        }
        in_force();
        match self.standbys_cancelled.get() {
            true => Err(DiskFull),
            false => Ok(()),
        }
    }
}

/// The settings start-up plans with in these tests, at a wall clock.
pub(crate) fn context_at(now_wall_ms: i64) -> Context {
    Context {
        epoch_unix_ms: EPOCH,
        max_lead_ms: LEAD,
        promotion_margin_ms: None,
        now_wall_ms,
    }
}

impl Wait for Host {
    fn wait(&self, ms: u64) -> Result<(), Interrupted> {
        self.waited.borrow_mut().push(ms);
        if self.waits_left.get() == 0 {
            return Err(Interrupted);
        }
        self.waits_left.set(self.waits_left.get() - 1);
        self.advance(ms as i64);
        Ok(())
    }
}

impl Report for Host {
    fn report(&self, event: Event) {
        self.events.borrow_mut().push(event);
    }
}

pub(crate) fn shard(n: i32) -> Shard {
    Shard::new(n).unwrap()
}

pub(crate) fn generator<'a>(shared: &'a Shared, host: &'a Host) -> Generator<'a, Host> {
    Generator::new(shared, host, EPOCH, LEAD)
}

pub(crate) fn ms_of(id: i64) -> u64 {
    decompose(id).unwrap().ms
}

pub(crate) fn now_ms(host: &Host) -> u64 {
    (host.wall_ms() - EPOCH) as u64
}

pub(crate) fn parts(id: i64) -> Parts {
    decompose(id).unwrap()
}

pub(crate) fn lease_end_ms(host: &Host) -> u64 {
    host.header().end_ms_under(EPOCH).unwrap()
}
