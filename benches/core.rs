//! Microbenchmarks of the pure core, outside PostgreSQL: `cargo bench --bench core`.
//!
//! Measures the per-shard step alone, with the time base read, and contended from several
//! threads on one shard, against a plain atomic increment as the floor. Prints ns per operation
//! (medians of several runs); timings vary with the machine, so compare the ratios.

use snowid::shard_state::issue;
use snowid::time_base::TimeBase;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Instant;

const OPS: u64 = 5_000_000;
const RUNS: usize = 7;
/// A lead large enough that no run ever reaches it: this measures the step, not the throttle.
const UNBOUNDED: u64 = 1 << 30;

fn median_ns(mut f: impl FnMut() -> f64) -> f64 {
    let mut samples: Vec<f64> = (0..RUNS).map(|_| f()).collect();
    samples.sort_by(f64::total_cmp);
    samples[RUNS / 2]
}

fn per_op(ops: u64, body: impl FnOnce()) -> f64 {
    let start = Instant::now();
    body();
    start.elapsed().as_nanos() as f64 / ops as f64
}

/// `threads` threads each run `ops` operations on shared state; ns per operation overall.
fn contended(threads: usize, ops: u64, op: impl Fn() + Send + Sync + 'static) -> f64 {
    let op = Arc::new(op);
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (op, barrier) = (op.clone(), barrier.clone());
            thread::spawn(move || {
                barrier.wait();
                for _ in 0..ops {
                    op();
                }
            })
        })
        .collect();
    let start = Instant::now();
    barrier.wait();
    handles.into_iter().for_each(|h| h.join().unwrap());
    start.elapsed().as_nanos() as f64 / (threads as u64 * ops) as f64
}

fn main() {
    let counter = AtomicU64::new(0);
    let floor = median_ns(|| {
        per_op(OPS, || {
            (0..OPS).for_each(|_| {
                counter.fetch_add(1, Ordering::Relaxed);
            })
        })
    });

    let cell = AtomicU64::new(0);
    let step = median_ns(|| {
        per_op(OPS, || {
            (0..OPS).for_each(|i| {
                black_box(issue(&cell, black_box(1_000 + i / 4096), UNBOUNDED, u64::MAX).unwrap());
            })
        })
    });

    let base = TimeBase::starting_at(0, 1_800_000_000_000, 0);
    let read = median_ns(|| {
        per_op(OPS, || {
            (0..OPS).for_each(|i| {
                black_box(base.read(black_box(i as i64)));
            })
        })
    });

    let threads = thread::available_parallelism()
        .map_or(2, |n| n.get())
        .max(2);
    let shared = Arc::new(AtomicU64::new(0));
    let contended_step = median_ns(|| {
        let shared = shared.clone();
        contended(threads, OPS / 5, move || {
            black_box(issue(&shared, 1_000, UNBOUNDED, u64::MAX).unwrap());
        })
    });
    let shared_counter = Arc::new(AtomicU64::new(0));
    let contended_floor = median_ns(|| {
        let shared = shared_counter.clone();
        contended(threads, OPS / 5, move || {
            shared.fetch_add(1, Ordering::Relaxed);
        })
    });

    println!("{:<52} {:>9} {:>9}", "operation", "ns/op", "× floor");
    for (name, ns, base) in [
        ("atomic fetch_add, one thread (floor)", floor, floor),
        ("issue(): load + CAS + arithmetic, one thread", step, floor),
        ("time base read", read, floor),
        (
            "atomic fetch_add, threads on one line (floor)",
            contended_floor,
            contended_floor,
        ),
        (
            "issue() from threads racing on one shard",
            contended_step,
            contended_floor,
        ),
    ] {
        println!("{name:<52} {ns:>9.2} {:>9.2}", ns / base);
    }
    println!("({RUNS} runs each, medians; {threads} threads in the contended rows)");
}
