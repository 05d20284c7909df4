//! Where the durable state lives: a small relation of its own, kept by PostgreSQL's buffer
//! manager and changed only through the WAL, like an index's metapage.
//!
//! The relation is `global/9128` in the data directory ([`RELATION_NUMBER`]), [`BLOCKS`] pages:
//! block 0 holds the state's header (lease, time-base floor, earliest epoch, fence, released
//! shards), the others the released shards' last IDs (see `snowid_core::durable`). It belongs to
//! no database and to no catalog, and PostgreSQL never creates a relation file over an existing
//! one.
//!
//! - [`create`] writes every page whole, in one WAL record of full-page images (PostgreSQL's own
//!   kind, so that it replays on any server, with snowid preloaded or not), over whatever the
//!   file held: for the state's creation, and for its fencing by `pg_upgrade`;
//! - [`write`] makes one change: one record of snowid's resource manager that names the pages it
//!   changes, inserted with the buffers locked exclusively, as for any page;
//! - standbys, crash recovery and restores replay both into the same pages
//!   ([`super::wal_records`]); checkpoints and restartpoints write the pages to disk, durably,
//!   with full-page images in the WAL protecting them from torn writes and data checksums from
//!   rot, and no write of snowid's own at replay or at exit;
//! - base backups copy the file; `pg_rewind` follows the records' page references; `pg_upgrade`
//!   leaves it behind (see [`super::startup`]).
//!
//! [`write_pages`] also writes the witnesses' one-page relations ([`super::witness`]).
//!
//! Before a change is used, its record is made durable ([`super::durability`]).

use super::faults;
use pgrx::pg_sys;
use pgrx::prelude::*;
use snowid_core::durable::{
    last_ids_from_bytes, last_ids_to_bytes, shards_of_block, Change, Damage, DurableState, Header,
    Kind, BLOCKS, HEADER_LEN, LAST_IDS_LEN, RELATION_NUMBER, RMGR_ID,
};
use snowid_core::startup::Found;
use std::ffi::c_int;
/// The size of PostgreSQL's page header: the contents start after it.
const PAGE_HEADER: usize = 24;
const BLOCK_SIZE: usize = pg_sys::BLCKSZ as usize;

#[cfg(feature = "pg15")]
pub(super) type Locator = pg_sys::RelFileNode;
#[cfg(not(feature = "pg15"))]
pub(super) type Locator = pg_sys::RelFileLocator;

/// A relation numbered `number` in a tablespace and database.
pub(super) fn locator_in(tablespace: pg_sys::Oid, database: pg_sys::Oid, number: u32) -> Locator {
    #[cfg(feature = "pg15")]
    return pg_sys::RelFileNode {
        spcNode: tablespace,
        dbNode: database,
        relNode: pg_sys::Oid::from(number),
    };
    #[cfg(not(feature = "pg15"))]
    return pg_sys::RelFileLocator {
        spcOid: tablespace,
        dbOid: database,
        relNumber: pg_sys::Oid::from(number),
    };
}

/// The relation: in the global tablespace, in no database.
fn locator() -> Locator {
    locator_in(
        pg_sys::GLOBALTABLESPACE_OID,
        pg_sys::InvalidOid,
        RELATION_NUMBER,
    )
}

/// A relation's storage manager handle.
pub(super) fn smgr_of(locator: Locator) -> pg_sys::SMgrRelation {
    // SAFETY: smgropen only builds (or finds) the handle; -1 is "not a temporary relation".
    unsafe { pg_sys::smgropen(locator, -1) }
}

/// The relation's storage manager handle.
fn smgr() -> pg_sys::SMgrRelation {
    smgr_of(locator())
}

/// A pinned buffer of one of the relation's pages, locked as asked, released when dropped.
struct Page(pg_sys::Buffer);

impl Page {
    /// Reads a page of the state through the buffer manager and locks it.
    fn read(block: u32, mode: pg_sys::ReadBufferMode::Type, lock: u32) -> Page {
        Page::read_in(locator(), block, mode, lock)
    }

    /// Reads a page of a relation through the buffer manager and locks it.
    fn read_in(
        relation: Locator,
        block: u32,
        mode: pg_sys::ReadBufferMode::Type,
        lock: u32,
    ) -> Page {
        // SAFETY: the relation's pages exist (callers check) or are being created (zeroing
        // modes); the buffer is pinned until this value is dropped.
        unsafe {
            let buffer = pg_sys::ReadBufferWithoutRelcache(
                relation,
                pg_sys::ForkNumber::MAIN_FORKNUM,
                block,
                mode,
                std::ptr::null_mut(),
                true,
            );
            // The zeroing modes return the buffer already locked exclusively.
            if !matches!(
                mode,
                pg_sys::ReadBufferMode::RBM_ZERO_AND_LOCK
                    | pg_sys::ReadBufferMode::RBM_ZERO_AND_CLEANUP_LOCK
            ) {
                // 19 made `LockBuffer` a static inline function over `LockBufferInternal` (for
                // any mode but unlocking), which pgrx binds only through its C shim.
                #[cfg(feature = "pg19")]
                pg_sys::LockBufferInternal(buffer, lock as _);
                #[cfg(not(feature = "pg19"))]
                pg_sys::LockBuffer(buffer, lock as _);
            }
            Page(buffer)
        }
    }

    fn header(&self) -> *mut pg_sys::PageHeaderData {
        // SAFETY: the buffer is valid and pinned.
        unsafe { pg_sys::BufferGetPage(self.0).cast() }
    }

    /// The page's contents after its header, `len` bytes.
    fn contents(&self, len: usize) -> &[u8] {
        // SAFETY: the page is BLCKSZ bytes, pinned and locked by this value; `len` fits after
        // the header (checked by the constants' assertions in the core).
        unsafe { std::slice::from_raw_parts(self.header().cast::<u8>().add(PAGE_HEADER), len) }
    }

    /// Replaces the page's contents after its header with `bytes`.
    fn set_contents(&self, bytes: &[u8]) {
        // SAFETY: as in `contents`; the buffer is locked exclusively by the caller.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.header().cast::<u8>().add(PAGE_HEADER),
                bytes.len(),
            )
        };
    }

    /// PostgreSQL's `PageIsNew`: a page never initialised has `pd_upper` 0 (a static inline
    /// function from 16 on, which pgrx binds only through its C shim, left out: see Cargo.toml).
    fn is_new(&self) -> bool {
        // SAFETY: as in `header`.
        unsafe { (*self.header()).pd_upper == 0 }
    }

    /// Formats the page and writes `bytes` as its contents; the hole after them is what a
    /// full-page image leaves out.
    fn format(&self, bytes: &[u8]) {
        // SAFETY: as in `contents`.
        unsafe {
            pg_sys::PageInit(self.header().cast(), BLOCK_SIZE, 0);
            (*self.header()).pd_lower = (PAGE_HEADER + bytes.len()) as u16;
        }
        self.set_contents(bytes);
    }

    fn set_lsn(&self, lsn: pg_sys::XLogRecPtr) {
        // The page's LSN is two 32-bit words, the high one first, on every major (19 declares
        // them as one 64-bit field stored word-swapped, with the same bytes).
        // SAFETY: as in `header`; the buffer is locked exclusively by the caller, and `pd_lsn`
        // is 8 bytes at the start of the header, aligned for `u32`.
        unsafe {
            std::ptr::addr_of_mut!((*self.header()).pd_lsn)
                .cast::<[u32; 2]>()
                .write([(lsn >> 32) as u32, lsn as u32]);
        }
    }

    fn mark_dirty(&self) {
        // SAFETY: the buffer is pinned and locked exclusively by the caller.
        unsafe { pg_sys::MarkBufferDirty(self.0) };
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        // SAFETY: the buffer is pinned and locked by this value. This also runs while an error
        // unwinds past it (pgrx turns PostgreSQL's error into a panic after cleaning up its
        // error state), before the transaction's abort would release the lock and pin itself.
        unsafe { pg_sys::UnlockReleaseBuffer(self.0) };
    }
}

/// Whether the relation holds all its pages.
pub fn exists() -> bool {
    let smgr = smgr();
    // SAFETY: plain calls on a valid handle.
    unsafe {
        pg_sys::smgrexists(smgr, pg_sys::ForkNumber::MAIN_FORKNUM)
            && pg_sys::smgrnblocks(smgr, pg_sys::ForkNumber::MAIN_FORKNUM) >= BLOCKS
    }
}

/// The lease end the pages record, without loading them into shared memory: for
/// `snowid_info()`.
pub fn recorded_lease_end() -> Option<i64> {
    match read() {
        Found::State(s) if s.header.lease_end_unix_ms > s.header.epoch_unix_ms => {
            Some(s.header.lease_end_unix_ms)
        }
        _ => None,
    }
}

/// Reads the state from its pages. A page the buffer manager finds damaged (a checksum failure
/// or a broken header) comes back zeroed with a warning in the log; a zeroed block 0 whose file
/// block is not all zero is damage, not a state never created.
pub fn read() -> Found {
    if !exists() {
        return Found::Missing;
    }
    let block0 = Page::read(
        0,
        pg_sys::ReadBufferMode::RBM_ZERO_ON_ERROR,
        pg_sys::BUFFER_LOCK_SHARE,
    );
    if block0.is_new() {
        drop(block0);
        return match file_block_is_zero(0) {
            true => Found::Missing,
            false => Found::Damaged(Damage::NotAState),
        };
    }
    let header = match Header::from_bytes(block0.contents(HEADER_LEN)) {
        Ok(header) => header,
        Err(damage) => return Found::Damaged(damage),
    };
    drop(block0);
    let mut state = DurableState::new(header);
    for block in 1..BLOCKS {
        let page = Page::read(
            block,
            pg_sys::ReadBufferMode::RBM_ZERO_ON_ERROR,
            pg_sys::BUFFER_LOCK_SHARE,
        );
        if !page.is_new() {
            let shards = shards_of_block(block);
            // A last ID only tells which ID a released shard stopped at: a damaged page of them
            // costs that information, never an ID.
            let _ = last_ids_from_bytes(page.contents(LAST_IDS_LEN), &mut state.last_ids[shards]);
        }
    }
    Found::State(Box::new(state))
}

/// Whether a block of the relation's file is all zeros on disk.
fn file_block_is_zero(block: u32) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let path = format!("global/{RELATION_NUMBER}");
    let mut bytes = vec![0u8; BLOCK_SIZE];
    std::fs::File::open(path)
        .and_then(|mut f| {
            f.seek(SeekFrom::Start(u64::from(block) * BLOCK_SIZE as u64))?;
            f.read_exact(&mut bytes)
        })
        .map_or(true, |()| bytes.iter().all(|&b| b == 0))
}

/// A zeroed page, aligned as PostgreSQL's I/O wants its buffers.
#[repr(C, align(4096))]
pub(super) struct ZeroPage(pub(super) [u8; BLOCK_SIZE]);
pub(super) static ZERO_PAGE: ZeroPage = ZeroPage([0; BLOCK_SIZE]);

/// Writes a whole state over whatever the relation holds (nothing, a short or zeroed file,
/// damaged pages, or a state that `pg_upgrade` fences): the relation's file and all its pages,
/// with the header in block 0 and the released shards' last IDs after it, in one WAL record of
/// full-page images, which any server replays, snowid preloaded or not. Returns the record's
/// location (see [`super::durability::make_durable`]).
pub fn create(state: &DurableState) -> pg_sys::XLogRecPtr {
    let contents: Vec<Vec<u8>> = (0..BLOCKS)
        .map(|b| match b {
            0 => state.header.to_bytes().to_vec(),
            b => last_ids_to_bytes(&state.last_ids[shards_of_block(b)]).to_vec(),
        })
        .collect();
    extend(locator(), BLOCKS);
    faults::at(faults::Point::Extended);
    write_pages(locator(), &contents)
}

/// Writes the first pages of a relation whole, creating its file if needed, with `contents`
/// after each page's header, in one WAL record of full-page images (PostgreSQL's own `FPI`, as
/// `log_newpages` writes it). The pages are formatted and marked dirty in shared buffers before
/// the record is inserted, in one critical section, so a checkpoint that begins after the record
/// writes them, and one that began before is followed by the record's replay. Room for the
/// record's block references is made before the critical section, where an allocation may fail
/// (inside one it would be a PANIC, and an assert-enabled server traps on it). Returns the
/// record's location.
pub(super) fn write_pages(relation: Locator, contents: &[Vec<u8>]) -> pg_sys::XLogRecPtr {
    let count = contents.len() as u32;
    assert!(
        (1..=pg_sys::XLR_MAX_BLOCK_ID + 1).contains(&count),
        "one record holds the pages"
    );
    extend(relation, count);
    let pages: Vec<Page> = (0..count)
        .map(|b| {
            Page::read_in(
                relation,
                b,
                pg_sys::ReadBufferMode::RBM_ZERO_AND_LOCK,
                pg_sys::BUFFER_LOCK_EXCLUSIVE,
            )
        })
        .collect();
    let buffers: Vec<pg_sys::Buffer> = pages.iter().map(|p| p.0).collect();
    // SAFETY: outside any critical section, as PostgreSQL requires: it allocates room for a
    // record with `count` block references (more than the 5 it keeps ready) and no data.
    unsafe { pg_sys::XLogEnsureRecordSpace(count as c_int - 1, 0) };
    in_critical_section(|| {
        for (page, bytes) in pages.iter().zip(contents) {
            page.format(bytes);
            page.mark_dirty();
        }
        // SAFETY: every buffer is pinned, locked exclusively, formatted and dirty, and room for
        // their references was made above; the record is PostgreSQL's own full-page image,
        // which any server replays.
        let lsn = unsafe {
            pg_sys::XLogBeginInsert();
            for (id, &buffer) in buffers.iter().enumerate() {
                pg_sys::XLogRegisterBuffer(
                    id as u8,
                    buffer,
                    (pg_sys::REGBUF_FORCE_IMAGE | pg_sys::REGBUF_STANDARD) as u8,
                );
            }
            pg_sys::XLogInsert(pg_sys::RmgrIds::RM_XLOG_ID as u8, pg_sys::XLOG_FPI as u8)
        };
        for page in &pages {
            page.set_lsn(lsn);
        }
        lsn
    })
}

/// Creates a relation's file if it is missing, and extends it with zeroed pages to `count`
/// pages, as the first step of writing them whole.
fn extend(relation: Locator, count: u32) {
    let smgr = smgr_of(relation);
    // SAFETY: plain storage-manager calls on the relation's handle; extending writes zeroed
    // pages that the caller's record initialises, and registers them for the next checkpoint's
    // fsync.
    unsafe {
        if !pg_sys::smgrexists(smgr, pg_sys::ForkNumber::MAIN_FORKNUM) {
            pg_sys::smgrcreate(smgr, pg_sys::ForkNumber::MAIN_FORKNUM, false);
        }
        let present = pg_sys::smgrnblocks(smgr, pg_sys::ForkNumber::MAIN_FORKNUM);
        for block in present..count {
            pg_sys::smgrextend(
                smgr,
                pg_sys::ForkNumber::MAIN_FORKNUM,
                block,
                ZERO_PAGE.0.as_ptr() as _,
                false,
            );
        }
    }
}

/// A relation's first page's contents after its header, read through the buffer manager, if the
/// relation has pages (a damaged page reads as zeros, with a warning in the log).
pub(super) fn first_page_contents(relation: Locator) -> Option<Vec<u8>> {
    if !has_pages(relation) {
        return None;
    }
    let page = Page::read_in(
        relation,
        0,
        pg_sys::ReadBufferMode::RBM_ZERO_ON_ERROR,
        pg_sys::BUFFER_LOCK_SHARE,
    );
    Some(page.contents(BLOCK_SIZE - PAGE_HEADER).to_vec())
}

/// Whether a relation has at least one page.
pub(super) fn has_pages(relation: Locator) -> bool {
    let smgr = smgr_of(relation);
    // SAFETY: plain calls on a valid handle, which open nothing that stays open.
    unsafe {
        pg_sys::smgrexists(smgr, pg_sys::ForkNumber::MAIN_FORKNUM)
            && pg_sys::smgrnblocks(smgr, pg_sys::ForkNumber::MAIN_FORKNUM) > 0
    }
}

/// Makes a change to the state: computes the new contents of the pages it touches, then, in a
/// critical section, writes them and the WAL record. Returns the record's location (see
/// [`make_durable`]), or the damage that kept it from computing the pages.
pub fn write(change: &Change) -> Result<pg_sys::XLogRecPtr, Damage> {
    let blocks = change.blocks();
    let pages: Vec<Page> = blocks
        .iter()
        .map(|&b| {
            Page::read(
                b,
                pg_sys::ReadBufferMode::RBM_NORMAL,
                pg_sys::BUFFER_LOCK_EXCLUSIVE,
            )
        })
        .collect();
    let mut contents = Vec::with_capacity(blocks.len());
    for (&block, page) in blocks.iter().zip(&pages) {
        contents.push(changed(change, block, page)?);
    }
    let data = change.to_bytes();
    let buffers: Vec<pg_sys::Buffer> = pages.iter().map(|p| p.0).collect();
    Ok(in_critical_section(|| {
        for (page, bytes) in pages.iter().zip(&contents) {
            page.set_contents(bytes);
            page.mark_dirty();
        }
        let lsn = log_change(
            change.kind(),
            &data,
            &buffers,
            pg_sys::REGBUF_STANDARD as u8,
        );
        for page in &pages {
            page.set_lsn(lsn);
        }
        lsn
    }))
}

/// A page's contents once `change` is applied to them.
fn changed(change: &Change, block: u32, page: &Page) -> Result<Vec<u8>, Damage> {
    if block == 0 {
        let mut header = Header::from_bytes(page.contents(HEADER_LEN))?;
        change.apply_to_header(&mut header);
        Ok(header.to_bytes().to_vec())
    } else {
        let mut ids = vec![0i64; shards_of_block(block).len()];
        last_ids_from_bytes(page.contents(LAST_IDS_LEN), &mut ids)?;
        change.apply_to_last_ids(block, &mut ids);
        Ok(last_ids_to_bytes(&ids).to_vec())
    }
}

/// Inserts a record: its kind, its data, and the buffers it changes (registered as blocks 0, 1,
/// ... in that order, with `flags`). Call in a critical section, with the buffers locked
/// exclusively; returns the record's location.
pub fn log_change(
    kind: Kind,
    data: &[u8],
    buffers: &[pg_sys::Buffer],
    flags: u8,
) -> pg_sys::XLogRecPtr {
    // SAFETY: the standard sequence for a record with main data and block references; `data`
    // outlives the insert, which copies it; the caller holds the buffers as it requires.
    unsafe {
        pg_sys::XLogBeginInsert();
        pg_sys::XLogRegisterData(data.as_ptr() as _, data.len() as _);
        for (id, &buffer) in buffers.iter().enumerate() {
            pg_sys::XLogRegisterBuffer(id as u8, buffer, flags);
        }
        pg_sys::XLogInsert(RMGR_ID as _, kind as u8)
    }
}

/// Replays a change into its pages (in the startup process): each page the record names is
/// changed unless it is already newer than the record or was restored whole from an image in
/// it. A page too damaged to change is left as it is: loading it later fences generation. So is
/// a page that is not there at all (the file deleted or cut short while `full_page_writes` is
/// off, so that the record carries no image of it): it is added zeroed, which reads as a
/// missing state, rather than stopping recovery.
///
/// # Safety
///
/// `record` is the reader state PostgreSQL passes to a resource manager's redo callback.
pub unsafe fn replay(record: *mut pg_sys::XLogReaderState, change: &Change) {
    for (id, block) in change.blocks().into_iter().enumerate() {
        let mut buffer: pg_sys::Buffer = 0;
        // SAFETY: guaranteed by the caller; the block IDs are those `write` registered.
        let action = unsafe {
            pg_sys::XLogReadBufferForRedoExtended(
                record,
                id as u8,
                pg_sys::ReadBufferMode::RBM_ZERO_ON_ERROR,
                false,
                &mut buffer,
            )
        };
        if buffer == 0 {
            continue;
        }
        let page = Page(buffer);
        if action != pg_sys::XLogRedoAction::BLK_NEEDS_REDO {
            continue;
        }
        if page.is_new() {
            warning!(
                "snowid state page {block} is missing or zeroed; it is left so, and the state will be found missing"
            );
            continue;
        }
        match changed(change, block, &page) {
            Ok(bytes) => {
                page.set_contents(&bytes);
                // SAFETY: guaranteed by the caller.
                page.set_lsn(unsafe { (*record).EndRecPtr });
                page.mark_dirty();
            }
            Err(damage) => warning!(
                "snowid state page {block} is damaged ({damage}); it is left as it is, and generation will be fenced"
            ),
        }
        // Dropped: the redo read returned the buffer pinned and locked exclusively.
    }
}

/// Runs `work` in a critical section, where any error is a PANIC: what it does must not fail.
fn in_critical_section<T>(work: impl FnOnce() -> T) -> T {
    // SAFETY: START_CRIT_SECTION and END_CRIT_SECTION, as PostgreSQL's macros do them.
    unsafe { pg_sys::CritSectionCount += 1 };
    let result = work();
    // SAFETY: as above.
    unsafe { pg_sys::CritSectionCount -= 1 };
    result
}
