//! snowid's state in PostgreSQL shared memory, and how it starts.
//!
//! # Concurrency rules
//!
//! - The segment holds [`snowid_core::generator::Shared`]: the time base, the lease as generation
//!   sees it, the writer's claim, and one cell per shard (8,192), each on its own 64-byte cache
//!   line, so that shards never contend through false sharing and the read-mostly lines (time
//!   base, lease) are written only by the slow path.
//! - The postmaster zeroes the segment in the shared-memory startup hook, before any backend
//!   exists, and starts the time base at the wall clock. Nothing is read from disk there but a
//!   state file of snowid 0.1.0 or 0.2.0, if one is still there ([`LegacyImport`]). After a
//!   backend crash the postmaster builds a fresh segment the same way.
//! - The durable state lives in pages of the buffer manager (see [`crate::storage`]), not here.
//!   The first caller that needs it after a (re)start, once recovery has ended, loads it into
//!   the segment while holding the writer's claim; until then the lease end is 0 and every caller
//!   takes the slow path, which waits for the loader.
//! - Issuing (the fast path) takes no lock: it loads the lease end (acquire), the time base and
//!   the shard's stamp, and advances the stamp with one compare-and-swap. A shard's stamp is
//!   otherwise changed only by `fetch_or` (a release), `fetch_max` (loading) and a CAS loop (taking
//!   a shard back); stamps only move forward, and a process that dies between its load and its
//!   CAS leaves nothing half-done.
//! - The time base's offset only grows (`fetch_max`); its comparison with the wall clock is done
//!   by whichever caller wins a CAS on the due time, every 10 ms.
//! - The durable state is changed only by the holder of the writer's claim, an atomic taken by
//!   CAS (acquire) and given back with a release store. Nobody ever blocks on it: a caller that
//!   needs the holder's work waits on its latch, where a cancel or `statement_timeout` ends the
//!   wait. The holder makes its change durable (WAL flushed, and on the synchronous standbys)
//!   before it publishes anything; the lease end is published with a release store, so a caller
//!   that sees a lease also sees the shards and time base it was published with. A process that
//!   exits without unwinding (FATAL) gives the claim back in a `before_shmem_exit` callback.
//! - How many IDs a shard issued is counted by each process in its own memory, off the hot
//!   path's shared lines, and added to the shard's cell when its transaction ends (see
//!   [`crate::counters`]).
//! - Every backend and parallel worker inherits the segment's address from the postmaster.

use crate::gucs;
use pgrx::pg_sys;
use pgrx::prelude::*;
use snowid_core::clock::{sample_patiently, SystemClock};
use snowid_core::durable::Header;
use snowid_core::generator::Shared;
use snowid_core::legacy::{self, LastStop, Record};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr, AtomicU8, Ordering::Relaxed};

/// Everything snowid keeps in shared memory.
#[repr(C)]
struct Segment {
    shared: Shared,
    legacy: LegacyImport,
}

/// The state an old version's file (and its WAL records, replayed here) says the new durable
/// state should start from, decided when the server starts. Written by the postmaster before any
/// backend exists and by the startup process during recovery; read by the loader afterwards.
#[repr(C)]
pub struct LegacyImport {
    /// 0: nothing to import; 1: import; 2: import, fenced as stale; 3: fenced as unreadable.
    kind: AtomicU8,
    epoch_unix_ms: AtomicI64,
    base_unix_ms: AtomicI64,
    lease_end_unix_ms: AtomicI64,
}

const NOTHING: u8 = 0;

impl LegacyImport {
    fn set(&self, header: Option<Header>) {
        let Some(h) = header else {
            return self.kind.store(NOTHING, Relaxed);
        };
        self.epoch_unix_ms.store(h.epoch_unix_ms, Relaxed);
        self.base_unix_ms.store(h.base_unix_ms, Relaxed);
        self.lease_end_unix_ms.store(h.lease_end_unix_ms, Relaxed);
        self.kind
            .store(1 + h.fence.map_or(0, |f| f.code()), Relaxed);
    }

    /// The header to create the durable state from, if an old version left one.
    pub fn header(&self) -> Option<Header> {
        let kind = self.kind.load(Relaxed);
        (kind != NOTHING).then(|| Header {
            epoch_unix_ms: self.epoch_unix_ms.load(Relaxed),
            base_unix_ms: self.base_unix_ms.load(Relaxed),
            lease_end_unix_ms: self.lease_end_unix_ms.load(Relaxed),
            fence: snowid_core::durable::Fence::from_code(kind - 1),
            released: snowid_core::shard_set::ShardSet::empty(),
        })
    }

    /// Raises the import to cover an old version's WAL record, replayed here.
    pub fn raise(&self, record: &Record) {
        if self.kind.load(Relaxed) == NOTHING {
            self.set(Some(record.header()));
            return;
        }
        self.epoch_unix_ms.fetch_min(record.epoch_unix_ms, Relaxed);
        self.base_unix_ms.fetch_max(record.base_unix_ms, Relaxed);
        self.lease_end_unix_ms
            .fetch_max(record.lease_end_unix_ms, Relaxed);
    }
}

/// The segment, for every process the postmaster forks (null until the startup hook has run).
static SEGMENT: AtomicPtr<Segment> = AtomicPtr::new(std::ptr::null_mut());

/// Set in the postmaster when the library is preloaded; inherited by every backend it forks.
static PRELOADED: AtomicBool = AtomicBool::new(false);

static mut PREVIOUS_REQUEST_HOOK: pg_sys::shmem_request_hook_type = None;
static mut PREVIOUS_STARTUP_HOOK: pg_sys::shmem_startup_hook_type = None;

/// Installs the hooks that request and build the segment. Call only from `_PG_init` during
/// `shared_preload_libraries` processing, after the settings are defined.
pub fn init() {
    // SAFETY: the postmaster runs this once while loading preloaded libraries, when hooks are
    // installed; the previous hooks are called first, as every extension must.
    unsafe {
        PREVIOUS_REQUEST_HOOK = pg_sys::shmem_request_hook;
        pg_sys::shmem_request_hook = Some(request_segment);
        PREVIOUS_STARTUP_HOOK = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(start_segment);
    }
    PRELOADED.store(true, Relaxed);
}

const SEGMENT_NAME: &std::ffi::CStr = c"snowid";

#[pg_guard]
unsafe extern "C-unwind" fn request_segment() {
    // SAFETY: called by PostgreSQL from its shared-memory request phase.
    unsafe {
        if let Some(previous) = PREVIOUS_REQUEST_HOOK {
            previous();
        }
        pg_sys::RequestAddinShmemSpace(size_of::<Segment>());
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn start_segment() {
    // SAFETY: called by PostgreSQL once shared memory exists, in the postmaster (and again after
    // a crash restart), before any backend that could use the segment is started.
    unsafe {
        if let Some(previous) = PREVIOUS_STARTUP_HOOK {
            previous();
        }
        let mut found = false;
        let segment =
            pg_sys::ShmemInitStruct(SEGMENT_NAME.as_ptr(), size_of::<Segment>(), &mut found)
                .cast::<Segment>();
        if !found {
            // All zero is a valid segment: nothing loaded, nothing to import.
            std::ptr::write_bytes(segment, 0, 1);
            (*segment).shared.restart(sample_patiently(&SystemClock));
            (*segment).legacy.set(legacy_import());
        }
        SEGMENT.store(segment, Relaxed);
    }
}

/// Whether this server loaded snowid through `shared_preload_libraries`.
#[inline]
pub fn preloaded() -> bool {
    PRELOADED.load(Relaxed)
}

/// The shared state, or `None` when the library was not preloaded.
#[inline(always)]
pub fn state() -> Option<&'static Shared> {
    // SAFETY: the pointer is null or points to the segment, which lives as long as the process.
    unsafe { SEGMENT.load(Relaxed).as_ref() }.map(|s| &s.shared)
}

/// What an old version's state says the new durable state should start from.
pub fn legacy() -> Option<&'static LegacyImport> {
    // SAFETY: as in `state`.
    unsafe { SEGMENT.load(Relaxed).as_ref() }.map(|s| &s.legacy)
}

/// Judges an old version's state file, if one is left, as 0.2.0 would have at this start. Runs
/// in the postmaster; says in the log what it found.
fn legacy_import() -> Option<Header> {
    let found = legacy::read(Path::new("."));
    if matches!(found, Ok(None)) {
        return None;
    }
    if crate::storage::exists_on_disk() {
        log!(
            "snowid ignores \"{}\": its state lives in \"global/{}\"",
            legacy::FILE_NAME,
            crate::storage::RELATION_NUMBER
        );
        return None;
    }
    let header = legacy::import(found.clone(), last_stop(), gucs::epoch_unix_ms())?;
    match (&found, header.fence) {
        (Err(reason), _) => log!(
            "snowid found \"{}\" of an earlier version, unreadable ({reason}): its state will be created fenced",
            legacy::FILE_NAME
        ),
        (_, Some(fence)) => log!(
            "snowid found \"{}\" of an earlier version: its state will be created fenced, as {}",
            legacy::FILE_NAME,
            fence.describe()
        ),
        _ => log!(
            "snowid found \"{}\" of an earlier version: its state will be created from it",
            legacy::FILE_NAME
        ),
    }
    Some(header)
}

/// How the server last stopped, from `global/pg_control`. A file that cannot be read counts as
/// an unclean stop, after which WAL replay restores what the old state file lacks.
fn last_stop() -> LastStop {
    let unclean = LastStop {
        clean: false,
        checkpoint_lsn: 0,
    };
    let Ok(bytes) = std::fs::read("global/pg_control") else {
        return unclean;
    };
    if bytes.len() < size_of::<pg_sys::ControlFileData>() {
        return unclean;
    }
    // SAFETY: the file holds a ControlFileData at its start (PostgreSQL checked its CRC when it
    // started); every field is plain data, and the read copes with any alignment.
    let control =
        unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<pg_sys::ControlFileData>()) };
    LastStop {
        clean: matches!(
            control.state,
            pg_sys::DBState::DB_SHUTDOWNED | pg_sys::DBState::DB_SHUTDOWNED_IN_RECOVERY
        ),
        checkpoint_lsn: control.checkPoint,
    }
}

/// This process's number as holder of the writer's claim: its PID, registering (once) the
/// callback that gives the claim back if the process exits without unwinding.
pub fn claimer() -> u32 {
    static REGISTERED: AtomicBool = AtomicBool::new(false);
    if !REGISTERED.swap(true, Relaxed) {
        // SAFETY: a plain registration; the callback only touches shared memory.
        unsafe { pg_sys::before_shmem_exit(Some(give_back_claim), pg_sys::Datum::from(0)) };
    }
    // SAFETY: a plain read of this process's PID, set before it runs SQL.
    unsafe { pg_sys::MyProcPid as u32 }
}

#[pg_guard]
unsafe extern "C-unwind" fn give_back_claim(_code: i32, _arg: pg_sys::Datum) {
    if let Some(shared) = state() {
        // SAFETY: as in `claimer`.
        shared.release_claim_of(unsafe { pg_sys::MyProcPid as u32 });
    }
}
