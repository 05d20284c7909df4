//! Microbenchmarks of the core, outside PostgreSQL: `cargo bench -p snowid-core`.
//!
//! The per-shard step alone, the whole protocol with the machine's clock, and the time base
//! read, each beside a plain atomic increment as the floor; threads racing on one shard; and the
//! public IDs' mask.
//! Timings vary with the machine: compare each row with its floor from the same run.

use divan::{black_box, Bencher};
use snowid_core::clock::{sample_patiently, SystemClock};
use snowid_core::durable::{Change, DurableState, Header};
use snowid_core::generator::{FastIssue, Generator, Shared};
use snowid_core::host::{Clock, DurableStore, Event, Interrupted, Report, Wait};
use snowid_core::layout::Shard;
use snowid_core::mask::Mask;
use snowid_core::shard_state::issue;
use snowid_core::startup::{Found, Occasion, Plan, Reading};
use snowid_core::time_base::TimeBase;
use std::sync::atomic::{AtomicU64, Ordering};

fn main() {
    divan::main();
}

/// A lead large enough that no run reaches it: this measures the step, not the throttle.
const UNBOUNDED: u64 = 1 << 30;

#[divan::bench]
fn floor_fetch_add(b: Bencher) {
    let counter = AtomicU64::new(0);
    b.bench(|| counter.fetch_add(1, Ordering::Relaxed));
}

#[divan::bench]
fn issue_one_thread(b: Bencher) {
    let cell = AtomicU64::new(0);
    b.bench(|| issue(&cell, black_box(1_000), UNBOUNDED, u64::MAX));
}

#[divan::bench]
fn time_base_read(b: Bencher) {
    let base = TimeBase::starting_at(sample_patiently(&SystemClock), 0);
    b.bench(|| base.read(black_box(12_345)));
}

#[divan::bench]
fn monotonic_clock_read(b: Bencher) {
    b.bench(|| SystemClock.monotonic_ms());
}

/// The machine's clock with a store that never needs to wait: the protocol as PostgreSQL runs
/// it, minus the WAL and the pages.
struct Bench;

impl Clock for Bench {
    #[inline]
    fn monotonic_ms(&self) -> i64 {
        SystemClock.monotonic_ms()
    }
    fn wall_ms(&self) -> i64 {
        SystemClock.wall_ms()
    }
}
impl DurableStore for Bench {
    type Error = ();
    fn claimer(&self) -> u32 {
        1
    }
    /// The state `CREATE EXTENSION` created, loaded as start-up plans it.
    fn start(&self, _occasion: Occasion, plan: &dyn Fn(Reading<'_>) -> Plan) -> Result<Plan, ()> {
        Ok(plan(Reading {
            found: Found::State(Box::new(DurableState::new(Header::fresh(EPOCH)))),
            witnessed: &|| true,
            timeline: 0,
        }))
    }
    fn persist(&self, _: &Change, in_force: &mut dyn FnMut()) -> Result<(), ()> {
        in_force();
        Ok(())
    }
}
impl Wait for Bench {
    fn wait(&self, ms: u64) -> Result<(), Interrupted> {
        std::thread::sleep(std::time::Duration::from_millis(ms));
        Ok(())
    }
}
impl Report for Bench {
    fn report(&self, _: Event) {}
}

const EPOCH: i64 = 1_767_225_600_000;

fn shared() -> Box<Shared> {
    Box::new(Shared::new(sample_patiently(&SystemClock)))
}

/// The fast path alone, on one shard: what `snowid_next(5)` runs inside PostgreSQL.
#[divan::bench]
fn try_issue_one_shard(b: Bencher) {
    let shared = shared();
    let generator = Generator::new(&shared, &Bench, EPOCH, 1000);
    generator.next_id(Shard::new(5).unwrap()).unwrap();
    let shard = Shard::new(5).unwrap();
    b.bench_local(|| {
        let mono = SystemClock.monotonic_ms();
        match shared.try_issue(shard, mono, EPOCH, 1000) {
            FastIssue::Issued(id) | FastIssue::Renew(id) => id,
            FastIssue::Slow => generator.next_id(shard).unwrap_or(0),
        }
    });
}

#[divan::bench]
fn next_id_across_many_shards(b: Bencher) {
    let shared = shared();
    let generator = Generator::new(&shared, &Bench, EPOCH, 1000);
    let mut n = 0;
    b.bench_local(|| {
        n = (n + 1) & 8191;
        generator.next_id(Shard::new(n).unwrap())
    });
}

#[divan::bench(threads = [1, 2])]
fn issue_racing_on_one_shard(b: Bencher) {
    static CELL: AtomicU64 = AtomicU64::new(0);
    b.bench(|| issue(&CELL, black_box(1_000), UNBOUNDED, u64::MAX));
}

#[divan::bench(threads = [1, 2])]
fn floor_fetch_add_racing(b: Bencher) {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    b.bench(|| COUNTER.fetch_add(1, Ordering::Relaxed));
}

/// The public IDs' mask under each key length, and deriving it from a key (the AES key
/// schedule), which the extension does once per key change.
#[divan::bench(args = [32, 48, 64])]
fn mask_one(b: Bencher, hex_digits: usize) {
    let mask = Mask::from_hex(&"5a".repeat(hex_digits / 2)).unwrap();
    let mut id = 1i64 << 50;
    b.bench_local(|| {
        id += 1;
        mask.mask(black_box(id))
    });
}

#[divan::bench]
fn unmask_one(b: Bencher) {
    let mask = Mask::from_hex(&"5a".repeat(16)).unwrap();
    let mut masked = 1i64 << 50;
    b.bench_local(|| {
        masked += 1;
        mask.unmask(black_box(masked))
    });
}

/// The mask in a domain, with the domain's state computed on every call (one AES block more for
/// a name of up to 11 bytes), as the extension does.
#[divan::bench]
fn mask_one_in_a_domain(b: Bencher) {
    let mask = Mask::from_hex(&"5a".repeat(16)).unwrap();
    let mut id = 1i64 << 50;
    b.bench_local(|| {
        id += 1;
        let domain = mask.domain(black_box(b"orders"));
        mask.mask_in(&domain, black_box(id))
    });
}

/// The mask as the `fpe` crate computes it in general (0.7.0's way, with its own numeral
/// strings): the baseline of the specialised FF1 above.
#[divan::bench]
fn mask_one_by_the_general_ff1(b: Bencher) {
    let f = fpe::ff1::FF1::<aes::Aes128>::new(&[0x5a; 16], 2).unwrap();
    let mut id = 1i64 << 50;
    b.bench_local(|| {
        id += 1;
        let bits: Vec<u16> = (0..63).rev().map(|i| ((id >> i) & 1) as u16).collect();
        f.encrypt(&[], &fpe::ff1::FlexibleNumeralString::from(black_box(bits)))
    });
}

#[divan::bench]
fn mask_key_derivation(b: Bencher) {
    let key = "5a".repeat(16);
    b.bench(|| Mask::from_hex(black_box(&key)));
}

/// A database's keys from a key file of a default and 100 databases' own lines: what each
/// backend does once per database after a reload.
#[divan::bench]
fn a_databases_keys_from_the_key_file(b: Bencher) {
    let mut file = String::from(
        "* 1 5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a\n* 2 a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5\n",
    );
    for n in 0..100 {
        file += &format!("db{n} 1 {:032x}\n", n + 1);
    }
    b.bench(|| {
        let keys = snowid_core::mask::keys::KeyFile::parse(black_box(file.as_bytes())).unwrap();
        keys.for_database(b"shop").map(|keys| keys.versions.len())
    });
}
