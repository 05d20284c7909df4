//! The one owner of start-up: every decision about what snowid's durable state is, when a server
//! first needs it after a (re)start, when `CREATE EXTENSION` or `ALTER EXTENSION ... UPDATE`
//! makes sure it exists, and when `snowid_info()` reports what generation would do. The rule
//! itself is `snowid_core::startup::decide`; this module gathers what it needs and carries out
//! what it says.
//!
//! Every case, with its outcome:
//! - **The pages hold a readable state**: loaded as it is, with its fence if it has one. Any old
//!   version's file or mark left beside it is ignored, and removed by the next load.
//! - **The pages are damaged** (a checksum failure, an unknown layout, a bad field): created
//!   again, fenced as unreadable.
//! - **The pages are missing** (no file, fewer pages than the state has, or block 0 never
//!   written), with no witness, and an old version left a file, judged when the postmaster
//!   started:
//!   - snowid 0.1.0's or 0.2.0's `snowid.state`: created from it; fenced as stale if it was not
//!     sealed at the last clean stop, or as unreadable if it cannot be read. A stale verdict is
//!     written into the file at once, durably, so that the start after a crash (when
//!     `pg_control` no longer tells how the server stopped before) judges the same;
//!   - snowid 0.3.0's `snowid.upgraded`, left by a cluster in binary-upgrade mode: fenced as
//!     upgraded. The mark decides nothing where the state exists (the old cluster of a
//!     `pg_upgrade --check`, a standby copied before the resume).
//! - **The pages are missing, and a database's witness says the cluster had them** (every
//!   database where this version installed snowid, or generated, holds one: see
//!   [`super::witness`]): created **fenced as lost**, whatever the occasion.
//! - **The pages are missing and nothing old is left**:
//!   - `CREATE EXTENSION`: created fresh under the configured epoch;
//!   - `ALTER EXTENSION ... UPDATE` from 0.1.0 to 0.3.0, which created the state at the first
//!     generation rather than at install, and generation in a database whose snowid such a
//!     version installed: created fresh, as that version would have;
//!   - generation in a database whose snowid this version installed: created **fenced as
//!     lost**. Since 0.4.0 `CREATE EXTENSION` creates the state before any ID can be issued, so
//!     an installed extension without its state means the state was lost: its file deleted, cut
//!     or zeroed, or the cluster made by `pg_upgrade`, which does not carry it over.
//!
//! Every outcome but "loaded" is created in one WAL record and made durable (flushed, and
//! confirmed by the synchronous standbys) before anything uses it, under a lock that serialises
//! every creation in the cluster, so a crash, an immediate stop or a race cannot lose a verdict
//! or replace one.

use super::durability::make_durable;
use super::{pages, witness};
use pgrx::pg_sys;
use pgrx::prelude::*;
use snowid_core::durable::{DurableState, Fence, Header, Unavailable, RELATION_NUMBER};
use snowid_core::generator::Status;
use snowid_core::legacy::{self, LastStop, Record};
use snowid_core::shard_set::ShardSet;
use snowid_core::startup::{decide, Found, Occasion, StartUp};
use std::path::Path;
use std::sync::atomic::{AtomicI64, AtomicPtr, AtomicU8, Ordering::Relaxed};

/// The file snowid 0.3.0 left in a cluster started in binary-upgrade mode.
const UPGRADED_MARK: &str = "snowid.upgraded";

/// What an old version's file says the state should start from, judged when the postmaster
/// started (and raised by an old version's WAL records replayed since). It lives in shared
/// memory: written by the postmaster before any backend exists and by the startup process
/// during recovery, read by whoever creates the state afterwards.
#[repr(C)]
pub struct OldFile {
    /// 0: nothing; otherwise 1 + the fence's code (0 for none).
    kind: AtomicU8,
    epoch_unix_ms: AtomicI64,
    base_unix_ms: AtomicI64,
    lease_end_unix_ms: AtomicI64,
}

const NOTHING: u8 = 0;

impl OldFile {
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

    /// The header to create the state from, if an old version left a file.
    fn header(&self) -> Option<Header> {
        let kind = self.kind.load(Relaxed);
        (kind != NOTHING).then(|| Header {
            epoch_unix_ms: self.epoch_unix_ms.load(Relaxed),
            base_unix_ms: self.base_unix_ms.load(Relaxed),
            lease_end_unix_ms: self.lease_end_unix_ms.load(Relaxed),
            fence: Fence::from_code(kind - 1),
            released: ShardSet::empty(),
        })
    }

    /// Raises what the file says to cover a 0.2.0 lease record replayed here.
    fn cover(&self, record: &Record) {
        if self.kind.load(Relaxed) == NOTHING {
            return self.set(Some(record.header()));
        }
        self.epoch_unix_ms.fetch_min(record.epoch_unix_ms, Relaxed);
        self.base_unix_ms.fetch_max(record.base_unix_ms, Relaxed);
        self.lease_end_unix_ms
            .fetch_max(record.lease_end_unix_ms, Relaxed);
    }
}

/// The [`OldFile`] in shared memory (null until the segment is built, and when not preloaded).
static OLD_FILE: AtomicPtr<OldFile> = AtomicPtr::new(std::ptr::null_mut());

fn old_file() -> Option<&'static OldFile> {
    // SAFETY: null, or the shared segment's slot, which lives as long as the process.
    unsafe { OLD_FILE.load(Relaxed).as_ref() }
}

/// Judges an old version's file as this start finds it, into `slot` (in the shared segment, which
/// the postmaster has just built), and says in the log what it found. Runs in the postmaster, at
/// every start and after every crash, before any backend exists.
pub fn judge_old_files(slot: &'static OldFile, epoch_unix_ms: i64) {
    OLD_FILE.store(std::ptr::from_ref(slot).cast_mut(), Relaxed);
    slot.set(None);
    if pages::exists_on_disk() {
        for file in [legacy::FILE_NAME, UPGRADED_MARK] {
            if Path::new(file).exists() {
                log!("snowid ignores \"{file}\": its state lives in \"global/{RELATION_NUMBER}\"");
            }
        }
        return;
    }
    let found = legacy::read(Path::new("."));
    let header = match &found {
        Ok(None) if Path::new(UPGRADED_MARK).exists() => {
            log!("snowid found \"{UPGRADED_MARK}\" and no state: the state will be created fenced, as upgraded");
            Some(Header {
                fence: Some(Fence::Upgraded),
                ..Header::fresh(epoch_unix_ms)
            })
        }
        Ok(None) => None,
        Err(reason) => {
            log!(
                "snowid found \"{}\" of an earlier version, unreadable ({reason}): its state will be created fenced",
                legacy::FILE_NAME
            );
            legacy::import(found.clone(), last_stop(), epoch_unix_ms)
        }
        Ok(Some(file)) => {
            let verdict = legacy::verdict(file, last_stop());
            match verdict {
                Some(fence) => {
                    log!(
                        "snowid found \"{}\" of an earlier version: its state will be created fenced, as {}",
                        legacy::FILE_NAME,
                        fence.describe()
                    );
                    if file.refused.is_none() {
                        keep_verdict(file, fence);
                    }
                }
                None => log!(
                    "snowid found \"{}\" of an earlier version: its state will be created from it",
                    legacy::FILE_NAME
                ),
            }
            legacy::import(found.clone(), last_stop(), epoch_unix_ms)
        }
    };
    slot.set(header);
}

/// Writes a verdict into the old file, durably, so that every later start judges the same. If it
/// cannot, the server does not start: a verdict that could change at the next start is worth
/// nothing.
fn keep_verdict(file: &legacy::StateFile, fence: Fence) {
    // SAFETY: plain reads of PostgreSQL's fsync setting and the data directory's mode.
    let (fsync, mode) = unsafe { (pg_sys::enableFsync, pg_sys::data_directory_mode as u32) };
    let refused = file.refused_as(fence);
    if let Err(e) = legacy::write(Path::new("."), &refused, fsync, mode & 0o666) {
        ereport!(
            PgLogLevel::FATAL,
            PgSqlErrorCode::ERRCODE_IO_ERROR,
            format!(
                "could not record snowid's refusal of \"{}\": {e}",
                legacy::FILE_NAME
            )
        );
    }
}

/// Raises what the old file says to cover a 0.2.0 lease record replayed here.
pub fn cover_old_record(record: &Record) {
    if let Some(slot) = old_file() {
        slot.cover(record);
    }
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

/// The occasion for generation in this database: whether its snowid was installed by a version
/// that created the state at its first generation rather than at install.
fn generation_here() -> Occasion {
    let old = Spi::get_one::<bool>(
        "SELECT extversion IN ('0.1.0', '0.2.0', '0.3.0') FROM pg_catalog.pg_extension \
         WHERE extname = 'snowid'",
    );
    Occasion::Generate {
        installed_by_old_version: matches!(old, Ok(Some(true))),
    }
}

/// The state for generation, created first if the decision says so. Call with the writer's
/// claim held, in a transaction, on a server that may write WAL.
pub fn load(epoch_unix_ms: i64) -> Result<DurableState, Unavailable> {
    let state = match pages::read() {
        Found::State(state) => {
            remove_old_files();
            *state
        }
        _ => settle(|found| occasion_for(found, generation_here), epoch_unix_ms)?,
    };
    witness_here();
    Ok(state)
}

/// Makes sure the state exists, for `CREATE EXTENSION` (`Occasion::Install`) and `ALTER
/// EXTENSION ... UPDATE` from an old version (`Occasion::UpdateFromOld`). Returns what was found
/// or done, for the install script's notice.
pub fn ensure(occasion: Occasion, epoch_unix_ms: i64) -> Result<(), Unavailable> {
    if !matches!(pages::read(), Found::State(_)) {
        settle(|_| occasion, epoch_unix_ms)?;
    }
    witness_here();
    Ok(())
}

/// Leaves this database's witness that the cluster has the state, if it is not there yet.
fn witness_here() {
    if let Some(lsn) = witness::leave() {
        // The witness only adds evidence: a wait for the standbys cancelled here loses nothing
        // that the next load would not write again.
        let _ = make_durable(lsn);
    }
}

/// Whether a database witnesses that the cluster had the state; looked up only for pages found
/// missing.
fn witnessed(found: &Found) -> bool {
    matches!(found, Found::Missing) && witness::anywhere()
}

/// The occasion is only looked up (with a query) when the pages are missing: for a state that is
/// there or damaged the decision does not read it, and any value would do.
fn occasion_for(found: &Found, occasion: impl FnOnce() -> Occasion) -> Occasion {
    match found {
        Found::Missing => occasion(),
        _ => Occasion::Install,
    }
}

/// Decides under the creation lock, and creates the state durably if the decision says so.
fn settle(
    occasion: impl FnOnce(&Found) -> Occasion,
    epoch_unix_ms: i64,
) -> Result<DurableState, Unavailable> {
    let _lock = CreationLock::take();
    let found = pages::read();
    let occasion = occasion(&found);
    let witnessed = witnessed(&found);
    let header = match decide(
        found,
        witnessed,
        old_file_header(epoch_unix_ms),
        occasion,
        epoch_unix_ms,
    ) {
        StartUp::Loaded(state) => return Ok(*state),
        StartUp::Create(header) => *header,
    };
    make_durable(pages::create(&header)).map_err(|_| Unavailable::NotReplicated)?;
    remove_old_files();
    match header.fence {
        None => log!("snowid created its state in \"global/{RELATION_NUMBER}\""),
        Some(fence) => log!(
            "snowid created its state in \"global/{RELATION_NUMBER}\" fenced: {}; no ID is issued until a superuser resumes above the IDs already issued",
            fence.describe()
        ),
    }
    Ok(DurableState::new(header))
}

/// What an old version's file says, as judged at this start. Without preloading there was no
/// judgement at start-up, and no `pg_control` to judge by now: any old file is fenced.
fn old_file_header(epoch_unix_ms: i64) -> Option<Header> {
    if let Some(slot) = old_file() {
        return slot.header();
    }
    let unjudged = LastStop {
        clean: false,
        checkpoint_lsn: 0,
    };
    match legacy::import(legacy::read(Path::new(".")), unjudged, epoch_unix_ms) {
        Some(header) => Some(Header {
            fence: header.fence.or(Some(Fence::Stale)),
            ..header
        }),
        None => Path::new(UPGRADED_MARK).exists().then(|| Header {
            fence: Some(Fence::Upgraded),
            ..Header::fresh(epoch_unix_ms)
        }),
    }
}

/// What generation would do if the state were loaded now, without creating anything: for
/// `snowid_info()` on a server that has not loaded it since it started.
pub fn outlook(epoch_unix_ms: i64) -> Status {
    let found = pages::read();
    let occasion = occasion_for(&found, generation_here);
    let witnessed = witnessed(&found);
    match decide(
        found,
        witnessed,
        old_file_header(epoch_unix_ms),
        occasion,
        epoch_unix_ms,
    ) {
        StartUp::Loaded(state) => Status::of(&state.header, epoch_unix_ms),
        StartUp::Create(header) => Status::of(&header, epoch_unix_ms),
    }
}

/// The lease end the pages record, without loading them: for `snowid_info()`.
pub fn recorded_lease_end() -> Option<i64> {
    match pages::read() {
        Found::State(s) if s.header.lease_end_unix_ms > s.header.epoch_unix_ms => {
            Some(s.header.lease_end_unix_ms)
        }
        _ => None,
    }
}

/// Removes an old version's file and mark once the state exists.
fn remove_old_files() {
    for file in [UPGRADED_MARK, legacy::FILE_NAME] {
        match std::fs::remove_file(file) {
            Ok(()) => {
                log!("snowid removed \"{file}\": its state lives in \"global/{RELATION_NUMBER}\"")
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => log!("snowid could not remove \"{file}\": {e}"),
        }
    }
}

/// Leaves snowid 0.3.0's mark in a cluster started in binary-upgrade mode (the new cluster of a
/// `pg_upgrade`, and the old one while it is checked or dumped). It decides something only where
/// the state is missing: in the new cluster of an upgrade from a database whose snowid predates
/// 0.4.0, whose missing state would otherwise read as a first start. Called by `_PG_init`.
pub fn mark_binary_upgrade() {
    if pages::exists_on_disk() {
        return;
    }
    use std::io::Write;
    let written = std::fs::File::create(UPGRADED_MARK).and_then(|mut f| {
        f.write_all(b"snowid: this cluster was started by pg_upgrade; where it has no state, generation is fenced until snowid_resume_above\n")?;
        f.sync_all()?;
        std::fs::File::open(".")?.sync_all()
    });
    if let Err(e) = written {
        warning!("snowid could not leave \"{UPGRADED_MARK}\": {e}");
    }
}

/// The cluster-wide lock every creation of the state takes, so that two databases never both
/// find it missing and create it: a lock on a shared object named after the state's relation,
/// released as soon as the creation is durable.
struct CreationLock;

impl CreationLock {
    fn take() -> CreationLock {
        // SAFETY: a plain heavyweight lock request in a transaction; it waits interruptibly.
        unsafe {
            pg_sys::LockSharedObject(
                pg_sys::RelationRelationId,
                pg_sys::Oid::from(RELATION_NUMBER),
                0,
                pg_sys::AccessExclusiveLock as pg_sys::LOCKMODE,
            )
        };
        CreationLock
    }
}

impl Drop for CreationLock {
    fn drop(&mut self) {
        // SAFETY: releases the lock `take` acquired (an error's abort would release it too).
        unsafe {
            pg_sys::UnlockSharedObject(
                pg_sys::RelationRelationId,
                pg_sys::Oid::from(RELATION_NUMBER),
                0,
                pg_sys::AccessExclusiveLock as pg_sys::LOCKMODE,
            )
        };
    }
}
