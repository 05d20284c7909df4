//! snowid's durable state: everything that constrains the IDs a cluster may still issue, in one
//! structure, changed only by [`Change`]s.
//!
//! - The lease end: no ID issued so far is dated at or after it. Generation may only hand out
//!   stamps the lease covers; to go further, a longer lease is made durable first.
//! - The time-base floor: a (re)started time base starts no lower, whatever the clock says.
//! - The earliest epoch IDs were issued under. Under a later epoch new IDs would sort below old
//!   ones, so a server configured with a later one refuses to generate; an earlier one keeps them
//!   above, and becomes the earliest.
//! - The released shards, each with its last ID: whoever holds this state (the server, its
//!   standbys, a restore, a promoted standby) issues none of them until one is taken back, which
//!   is an act of its own ([`Change::TakeBack`]): a resume never takes a shard back.
//! - The fence: "generate nothing until a superuser resumes above the old IDs", and why.
//! - The WAL timeline the state was created on, or of the last promotion it has seen since: the
//!   first load on another timeline (a promoted standby, a point-in-time restore) is a
//!   promotion, which may raise the time base (`snowid.promotion_margin`).
//!
//! Inside PostgreSQL the state is a relation of [`BLOCKS`] pages in the buffer manager, like a
//! metapage: each change is one WAL record that updates the pages it touches, so standbys, crash
//! recovery and restores replay it, and checkpoints and restartpoints write the pages to disk from
//! memory, with full-page images protecting them from torn writes. Nothing else holds durable
//! state, and nothing writes it at exit. This module is the pure part: the state, the changes and
//! how they apply, and the byte forms of both (a WAL record's data, a page's contents).

use crate::layout::{Shard, SHARD_COUNT};
use crate::shard_set::ShardSet;
use std::fmt;

/// Pages of the state: block 0 holds the [`Header`]; the rest hold the released shards' last IDs,
/// [`LAST_IDS_PER_BLOCK`] to a page, in shard order.
pub const BLOCKS: u32 = 1 + LAST_ID_BLOCKS;
/// Last IDs per page: what fits in 8 KiB after PostgreSQL's 24-byte page header.
pub const LAST_IDS_PER_BLOCK: usize = 1016;
const LAST_ID_BLOCKS: u32 = SHARD_COUNT.div_ceil(LAST_IDS_PER_BLOCK) as u32;

/// The relation that holds the state inside PostgreSQL: `global/9128` in the data directory. 9128
/// lies in the range of OIDs PostgreSQL keeps for development (8000 to 9999), which no released
/// version assigns.
pub const RELATION_NUMBER: u32 = 9128;

/// The WAL resource manager whose records change the state. 128 is `RM_EXPERIMENTAL_ID`, the ID
/// PostgreSQL sets aside for extensions in development; a unique one must be reserved on
/// PostgreSQL's list of custom WAL resource managers before snowid 1.0.
pub const RMGR_ID: u8 = 128;

/// Why the durable state could not be read or changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unavailable {
    /// Its pages are damaged (found so while changing them).
    Damaged(Damage),
    /// The change's record is durable here, but the wait for the synchronous standbys to confirm
    /// it was cancelled: the change holds on this server (also after a restart), the standbys
    /// may not have it, and nothing that depends on it may be handed out. The state's creation is
    /// named as [`Change::Init`] of the state created.
    NotReplicated(Box<Change>),
}

/// Why generation is fenced until a superuser resumes above the IDs already issued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fence {
    /// The state was older than the data directory (an old copy of the state file put back).
    Stale,
    /// The state could not be read: damaged, or written by a newer snowid.
    Unreadable,
    /// Databases came in by `pg_upgrade`, which does not carry snowid's state over: set in the
    /// new cluster while `pg_upgrade` restores a database with snowid, whatever state the cluster
    /// held before.
    Upgraded,
    /// The state is missing from a cluster that had it: its file deleted, cut short or zeroed,
    /// or the cluster made by `pg_upgrade` without snowid loaded.
    Lost,
}

impl Fence {
    /// The fence's number in the state's pages (0 is no fence).
    pub fn code(self) -> u8 {
        match self {
            Fence::Stale => 1,
            Fence::Unreadable => 2,
            Fence::Upgraded => 3,
            Fence::Lost => 4,
        }
    }

    pub fn from_code(code: u8) -> Option<Fence> {
        match code {
            1 => Some(Fence::Stale),
            2 => Some(Fence::Unreadable),
            3 => Some(Fence::Upgraded),
            4 => Some(Fence::Lost),
            _ => None,
        }
    }

    /// What happened, in words fit for a log line or an error detail.
    pub fn describe(self) -> &'static str {
        match self {
            Fence::Stale => {
                "the state snowid found was older than the data directory (an old copy put back)"
            }
            Fence::Unreadable => "the state snowid found could not be read",
            Fence::Upgraded => {
                "databases came into this cluster by pg_upgrade, which does not carry snowid's \
                 state over"
            }
            Fence::Lost => {
                "snowid's state in \"global/9128\" is missing, cut short or zeroed in a cluster \
                 that had it: the file was lost or damaged, or the cluster was made by pg_upgrade, \
                 which does not carry snowid's state over"
            }
        }
    }
}

/// Everything in the state but the released shards' last IDs: the contents of block 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// The earliest epoch IDs were issued under, in Unix milliseconds; in a fenced state, the
    /// epoch it was created with, which no ID was issued under (a resume that lifts the fence
    /// replaces it).
    pub epoch_unix_ms: i64,
    /// The time-base floor, in Unix milliseconds.
    pub base_unix_ms: i64,
    /// No ID issued so far is dated at or after this instant (Unix milliseconds).
    pub lease_end_unix_ms: i64,
    pub fence: Option<Fence>,
    pub released: ShardSet,
    /// The WAL timeline the state was created on, or of the last promotion it has seen since (0:
    /// none recorded, as in states written before 0.5.0).
    pub timeline: u32,
}

impl Header {
    /// The state of a cluster that has issued nothing, under an epoch.
    pub fn fresh(epoch_unix_ms: i64) -> Header {
        Header {
            epoch_unix_ms,
            base_unix_ms: 0,
            lease_end_unix_ms: epoch_unix_ms,
            fence: None,
            released: ShardSet::empty(),
            timeline: 0,
        }
    }

    /// The state of a cluster that has issued nothing, fenced: what a lost or damaged state is
    /// created as.
    pub fn fenced(fence: Fence, epoch_unix_ms: i64) -> Header {
        Header {
            fence: Some(fence),
            ..Header::fresh(epoch_unix_ms)
        }
    }

    /// The lease end as a time field under `epoch_unix_ms`: every ID issued so far, under this
    /// state's epoch or any later one, has a time field below it. `None` when the epoch is later
    /// than the lease end, which only a damaged state can say.
    pub fn end_ms_under(&self, epoch_unix_ms: i64) -> Option<u64> {
        u64::try_from(self.lease_end_unix_ms.checked_sub(epoch_unix_ms)?).ok()
    }

    /// Whether new IDs under `epoch_unix_ms` would sort above the old ones: the epoch is not
    /// later than the earliest one IDs were issued under.
    pub fn allows_epoch(&self, epoch_unix_ms: i64) -> bool {
        epoch_unix_ms <= self.epoch_unix_ms
    }
}

/// The whole state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DurableState {
    pub header: Header,
    /// The last ID of each released shard (0 for shards not released).
    pub last_ids: Box<[i64; SHARD_COUNT]>,
}

impl DurableState {
    pub fn new(header: Header) -> DurableState {
        DurableState {
            header,
            last_ids: Box::new([0; SHARD_COUNT]),
        }
    }

    /// The released shards with their last IDs, in shard order.
    pub fn released(&self) -> impl Iterator<Item = (Shard, i64)> + '_ {
        self.header
            .released
            .iter()
            .filter_map(|n| Some((Shard::new(n as i32)?, self.last_ids[n])))
    }
}

/// One change of the state: one WAL record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// The state as it starts, as snowid 0.3.0 recorded it (later versions create the state with
    /// full-page images of its pages); replayed only.
    Init(Box<Header>),
    /// A longer lease, taken under `epoch_unix_ms` with the time base at `base_unix_ms`.
    Lease {
        epoch_unix_ms: i64,
        base_unix_ms: i64,
        lease_end_unix_ms: i64,
    },
    /// A shard handed off: this cluster issues no more IDs for it.
    Release { shard: Shard, last_id: i64 },
    /// Generation resumes above `above_id`, issued where this state could not know it: the fence
    /// is lifted, and the lease and the time base are raised past it. Released shards stay
    /// released, whatever `above_id`'s shard.
    Resume {
        above_id: i64,
        epoch_unix_ms: i64,
        base_unix_ms: i64,
        lease_end_unix_ms: i64,
    },
    /// `above_id`'s shard, released before, is taken back above it: the lease and the time base
    /// are raised past it as by a resume. Written as snowid 0.4.0 wrote its resumes, which took
    /// the ID's shard back and lifted the fence too (a take-back is refused while fenced).
    TakeBack {
        above_id: i64,
        epoch_unix_ms: i64,
        base_unix_ms: i64,
        lease_end_unix_ms: i64,
    },
    /// The first load on WAL timeline `timeline`, after a promotion or a point-in-time restore:
    /// the timeline is recorded, and the time-base floor raised to `base_unix_ms`.
    Promotion { timeline: u32, base_unix_ms: i64 },
    /// A lease as snowid 0.2.0 recorded it, beside its state file `snowid.state`, which this
    /// version does not read. Replayed as nothing: it names no page, and a cluster whose state
    /// only 0.2.0 kept finds the pages missing, beside that file, and is fenced until resumed
    /// above the IDs its databases hold.
    Lease020 {
        epoch_unix_ms: i64,
        base_unix_ms: i64,
        lease_end_unix_ms: i64,
    },
}

/// How a [`Change`] is told apart in the WAL: the high four bits of a record's info byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// snowid 0.2.0's lease.
    Lease020 = 0x00,
    Init = 0x10,
    Lease = 0x20,
    Release = 0x30,
    /// 0.4.0's `RESUME`, which took the ID's shard back.
    TakeBack = 0x40,
    Resume = 0x50,
    Promotion = 0x60,
}

impl Kind {
    pub fn from_info(info: u8) -> Option<Kind> {
        match info {
            0x00 => Some(Kind::Lease020),
            0x10 => Some(Kind::Init),
            0x20 => Some(Kind::Lease),
            0x30 => Some(Kind::Release),
            0x40 => Some(Kind::TakeBack),
            0x50 => Some(Kind::Resume),
            0x60 => Some(Kind::Promotion),
            _ => None,
        }
    }

    pub fn name(self) -> &'static std::ffi::CStr {
        match self {
            Kind::Lease020 => c"LEASE_0_2_0",
            Kind::Init => c"INIT",
            Kind::Lease => c"LEASE",
            Kind::Release => c"RELEASE",
            Kind::TakeBack => c"TAKE_BACK",
            Kind::Resume => c"RESUME",
            Kind::Promotion => c"PROMOTION",
        }
    }
}

/// The block that holds a shard's last ID.
pub fn last_id_block(shard: Shard) -> u32 {
    1 + (shard.index() / LAST_IDS_PER_BLOCK) as u32
}

/// The shards whose last IDs a block (1 or more) holds.
pub fn shards_of_block(block: u32) -> std::ops::Range<usize> {
    let first = (block as usize - 1) * LAST_IDS_PER_BLOCK;
    first..(first + LAST_IDS_PER_BLOCK).min(SHARD_COUNT)
}

impl Change {
    pub fn kind(&self) -> Kind {
        match self {
            Change::Init(_) => Kind::Init,
            Change::Lease { .. } => Kind::Lease,
            Change::Release { .. } => Kind::Release,
            Change::Resume { .. } => Kind::Resume,
            Change::TakeBack { .. } => Kind::TakeBack,
            Change::Promotion { .. } => Kind::Promotion,
            Change::Lease020 { .. } => Kind::Lease020,
        }
    }

    /// The blocks the change writes, block 0 first.
    pub fn blocks(&self) -> Vec<u32> {
        match self {
            Change::Lease020 { .. } => vec![],
            Change::Init(_) => (0..BLOCKS).collect(),
            Change::Release { shard, .. } => vec![0, last_id_block(*shard)],
            Change::Lease { .. }
            | Change::Resume { .. }
            | Change::TakeBack { .. }
            | Change::Promotion { .. } => vec![0],
        }
    }

    /// Applies the change to block 0's contents.
    pub fn apply_to_header(&self, header: &mut Header) {
        match self {
            Change::Init(initial) => *header = (**initial).clone(),
            Change::Lease {
                epoch_unix_ms,
                base_unix_ms,
                lease_end_unix_ms,
            } => raise(header, *epoch_unix_ms, *base_unix_ms, *lease_end_unix_ms),
            Change::Release { shard, .. } => header.released.insert(shard.index()),
            Change::Resume {
                epoch_unix_ms,
                base_unix_ms,
                lease_end_unix_ms,
                ..
            } => {
                // A fenced state issued nothing under the epoch it was created with: the IDs it
                // stands for were issued under an epoch it cannot know, and the resume rose above
                // them as numbers. The fence lifts under the epoch the resume was made with.
                if header.fence.take().is_some() {
                    header.epoch_unix_ms = *epoch_unix_ms;
                }
                raise(header, *epoch_unix_ms, *base_unix_ms, *lease_end_unix_ms);
            }
            Change::TakeBack {
                above_id,
                epoch_unix_ms,
                base_unix_ms,
                lease_end_unix_ms,
            } => {
                raise(header, *epoch_unix_ms, *base_unix_ms, *lease_end_unix_ms);
                header.fence = None;
                if let Some(parts) = crate::layout::decompose(*above_id) {
                    header.released.remove(parts.shard as usize);
                }
            }
            Change::Promotion {
                timeline,
                base_unix_ms,
            } => {
                header.base_unix_ms = header.base_unix_ms.max(*base_unix_ms);
                header.timeline = *timeline;
            }
            Change::Lease020 { .. } => {}
        }
    }

    /// Applies the change to the last IDs a block (1 or more) holds.
    pub fn apply_to_last_ids(&self, block: u32, ids: &mut [i64]) {
        match self {
            Change::Init(_) => ids.fill(0),
            Change::Release { shard, last_id } if last_id_block(*shard) == block => {
                ids[shard.index() - shards_of_block(block).start] = *last_id;
            }
            _ => {}
        }
    }

    /// Applies the change to the whole state.
    pub fn apply(&self, state: &mut DurableState) {
        self.apply_to_header(&mut state.header);
        for block in self.blocks().into_iter().filter(|&b| b > 0) {
            let shards = shards_of_block(block);
            self.apply_to_last_ids(block, &mut state.last_ids[shards]);
        }
    }

    /// The record's data, for the WAL.
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            Change::Init(header) => header.to_bytes().to_vec(),
            Change::Lease {
                epoch_unix_ms,
                base_unix_ms,
                lease_end_unix_ms,
            } => le_bytes(&[*epoch_unix_ms, *base_unix_ms, *lease_end_unix_ms]),
            Change::Release { shard, last_id } => le_bytes(&[shard.get().into(), *last_id]),
            Change::Resume {
                above_id,
                epoch_unix_ms,
                base_unix_ms,
                lease_end_unix_ms,
            }
            | Change::TakeBack {
                above_id,
                epoch_unix_ms,
                base_unix_ms,
                lease_end_unix_ms,
            } => le_bytes(&[*above_id, *epoch_unix_ms, *base_unix_ms, *lease_end_unix_ms]),
            Change::Promotion {
                timeline,
                base_unix_ms,
            } => le_bytes(&[i64::from(*timeline), *base_unix_ms]),
            Change::Lease020 {
                epoch_unix_ms,
                base_unix_ms,
                lease_end_unix_ms,
            } => {
                let mut bytes = LEASE_020_VERSION.to_le_bytes().to_vec();
                bytes.extend([0; 4]);
                bytes.extend(le_bytes(&[
                    *epoch_unix_ms,
                    *base_unix_ms,
                    *lease_end_unix_ms,
                ]));
                bytes
            }
        }
    }

    /// Reads a record's data back, refusing a wrong size or impossible values.
    pub fn from_bytes(kind: Kind, bytes: &[u8]) -> Result<Change, Damage> {
        let change = match kind {
            Kind::Init => Change::Init(Box::new(Header::from_bytes(bytes)?)),
            Kind::Lease => {
                let [epoch_unix_ms, base_unix_ms, lease_end_unix_ms] = i64s(bytes)?;
                Change::Lease {
                    epoch_unix_ms,
                    base_unix_ms,
                    lease_end_unix_ms,
                }
            }
            Kind::Release => {
                let [shard, last_id] = i64s(bytes)?;
                let shard = i32::try_from(shard)
                    .ok()
                    .and_then(Shard::new)
                    .ok_or(Damage::Field("shard"))?;
                Change::Release { shard, last_id }
            }
            Kind::Resume => {
                let [above_id, epoch_unix_ms, base_unix_ms, lease_end_unix_ms] = i64s(bytes)?;
                Change::Resume {
                    above_id,
                    epoch_unix_ms,
                    base_unix_ms,
                    lease_end_unix_ms,
                }
            }
            Kind::TakeBack => {
                let [above_id, epoch_unix_ms, base_unix_ms, lease_end_unix_ms] = i64s(bytes)?;
                Change::TakeBack {
                    above_id,
                    epoch_unix_ms,
                    base_unix_ms,
                    lease_end_unix_ms,
                }
            }
            Kind::Promotion => {
                let [timeline, base_unix_ms] = i64s(bytes)?;
                Change::Promotion {
                    timeline: u32::try_from(timeline).map_err(|_| Damage::Field("timeline"))?,
                    base_unix_ms,
                }
            }
            Kind::Lease020 => {
                let Some((version, instants)) = bytes.split_at_checked(8) else {
                    return Err(Damage::Size {
                        expected: 32,
                        found: bytes.len(),
                    });
                };
                if version != [LEASE_020_VERSION.to_le_bytes(), [0; 4]].concat() {
                    return Err(Damage::Field("version"));
                }
                let [epoch_unix_ms, base_unix_ms, lease_end_unix_ms] = i64s(instants)?;
                Change::Lease020 {
                    epoch_unix_ms,
                    base_unix_ms,
                    lease_end_unix_ms,
                }
            }
        };
        Ok(change)
    }

    /// The record in words, for `pg_walinspect`, `pg_waldump` and error contexts.
    pub fn describe(&self) -> String {
        use crate::epoch::format;
        match self {
            Change::Init(h) => format!(
                "state created: lease until {}, time base {}, epoch {}, {} shards released, {}",
                format(h.lease_end_unix_ms),
                format(h.base_unix_ms),
                format(h.epoch_unix_ms),
                h.released.len(),
                match h.fence {
                    None => "not fenced".to_string(),
                    Some(f) => format!("fenced: {}", f.describe()),
                }
            ),
            Change::Lease {
                epoch_unix_ms,
                base_unix_ms,
                lease_end_unix_ms,
            } => format!(
                "lease until {}, time base {}, epoch {}",
                format(*lease_end_unix_ms),
                format(*base_unix_ms),
                format(*epoch_unix_ms)
            ),
            Change::Release { shard, last_id } => {
                format!("shard {} released, last ID {last_id}", shard.get())
            }
            Change::Resume {
                above_id,
                base_unix_ms,
                lease_end_unix_ms,
                ..
            } => format!(
                "resumed above ID {above_id}: lease until {}, time base {}",
                format(*lease_end_unix_ms),
                format(*base_unix_ms)
            ),
            Change::TakeBack {
                above_id,
                base_unix_ms,
                lease_end_unix_ms,
                ..
            } => format!(
                "shard {} taken back above ID {above_id}: lease until {}, time base {}",
                crate::layout::decompose(*above_id).map_or(-1, |p| p.shard),
                format(*lease_end_unix_ms),
                format(*base_unix_ms)
            ),
            Change::Promotion {
                timeline,
                base_unix_ms,
            } => format!(
                "first load on timeline {timeline}: time base at least {}",
                format(*base_unix_ms)
            ),
            Change::Lease020 {
                lease_end_unix_ms, ..
            } => format!(
                "lease of snowid 0.2.0 until {}, not applied: this version does not read 0.2.0's \
                 state, and fences such a cluster until it is resumed",
                format(*lease_end_unix_ms)
            ),
        }
    }
}

/// The version field of snowid 0.2.0's lease records.
const LEASE_020_VERSION: u32 = 1;

/// A lease taken: the earliest epoch, the higher base and lease end.
fn raise(header: &mut Header, epoch_unix_ms: i64, base_unix_ms: i64, lease_end_unix_ms: i64) {
    header.epoch_unix_ms = header.epoch_unix_ms.min(epoch_unix_ms);
    header.base_unix_ms = header.base_unix_ms.max(base_unix_ms);
    header.lease_end_unix_ms = header.lease_end_unix_ms.max(lease_end_unix_ms);
}

fn le_bytes(values: &[i64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn i64s<const N: usize>(bytes: &[u8]) -> Result<[i64; N], Damage> {
    if bytes.len() != 8 * N {
        return Err(Damage::Size {
            expected: 8 * N,
            found: bytes.len(),
        });
    }
    Ok(std::array::from_fn(|i| i64_at(bytes, 8 * i)))
}

fn i64_at(bytes: &[u8], at: usize) -> i64 {
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&bytes[at..at + 8]);
    i64::from_le_bytes(raw)
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut raw = [0u8; 4];
    raw.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(raw)
}

/// Why bytes are not a state or a change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Damage {
    Size {
        expected: usize,
        found: usize,
    },
    /// The page does not start with snowid's mark: it was never written, or not by snowid.
    NotAState,
    /// Written by a later snowid, with a layout this one does not know.
    UnknownLayout(u32),
    ChecksumMismatch,
    /// A field holds an impossible value.
    Field(&'static str),
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Damage::Size { expected, found } => {
                write!(f, "it is {found} bytes long, not {expected}")
            }
            Damage::NotAState => write!(f, "it does not hold snowid's state"),
            Damage::UnknownLayout(v) => write!(f, "its layout {v} is not one this snowid reads"),
            Damage::ChecksumMismatch => write!(f, "its checksum does not match its contents"),
            Damage::Field(name) => write!(f, "its field \"{name}\" holds an impossible value"),
        }
    }
}

/// The mark block 0 starts with: "snwd".
const MAGIC: u32 = u32::from_le_bytes(*b"snwd");
const LAYOUT: u32 = 1;
/// The timeline sits in bytes that earlier versions left zero and covered by the checksum: they
/// read a state that records one as they always did, and this version reads theirs as "none".
const TIMELINE_AT: usize = 36;
const BITMAP_AT: usize = 40;
/// The size of block 0's contents (after PostgreSQL's page header).
pub const HEADER_LEN: usize = BITMAP_AT + 8 * (SHARD_COUNT / 64) + 8;
/// The size of a last-ID block's contents.
pub const LAST_IDS_LEN: usize = 8 * LAST_IDS_PER_BLOCK;
// Both fit in an 8 KiB page after PostgreSQL's 24-byte page header.
const _: () = assert!(HEADER_LEN + 24 <= 8192 && LAST_IDS_LEN + 24 <= 8192);

impl Header {
    /// Block 0's contents, little-endian: a mark, the layout, the three instants, the fence, the
    /// released shards as a bitmap, and a checksum of all of it.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        out[4..8].copy_from_slice(&LAYOUT.to_le_bytes());
        out[8..16].copy_from_slice(&self.epoch_unix_ms.to_le_bytes());
        out[16..24].copy_from_slice(&self.base_unix_ms.to_le_bytes());
        out[24..32].copy_from_slice(&self.lease_end_unix_ms.to_le_bytes());
        out[32] = self.fence.map_or(0, Fence::code);
        out[TIMELINE_AT..TIMELINE_AT + 4].copy_from_slice(&self.timeline.to_le_bytes());
        for (i, word) in self.released.words().iter().enumerate() {
            out[BITMAP_AT + 8 * i..BITMAP_AT + 8 * i + 8].copy_from_slice(&word.to_le_bytes());
        }
        let sum = fnv1a(&out[..HEADER_LEN - 8]);
        out[HEADER_LEN - 8..].copy_from_slice(&sum.to_le_bytes());
        out
    }

    /// Reads block 0's contents back, refusing anything damaged.
    pub fn from_bytes(bytes: &[u8]) -> Result<Header, Damage> {
        if bytes.len() != HEADER_LEN {
            return Err(Damage::Size {
                expected: HEADER_LEN,
                found: bytes.len(),
            });
        }
        if u32_at(bytes, 0) != MAGIC {
            return Err(Damage::NotAState);
        }
        if u32_at(bytes, 4) != LAYOUT {
            return Err(Damage::UnknownLayout(u32_at(bytes, 4)));
        }
        if i64_at(bytes, HEADER_LEN - 8) as u64 != fnv1a(&bytes[..HEADER_LEN - 8]) {
            return Err(Damage::ChecksumMismatch);
        }
        let fence = match bytes[32] {
            0 => None,
            code => Some(Fence::from_code(code).ok_or(Damage::Field("fence"))?),
        };
        let header = Header {
            epoch_unix_ms: i64_at(bytes, 8),
            base_unix_ms: i64_at(bytes, 16),
            lease_end_unix_ms: i64_at(bytes, 24),
            fence,
            released: ShardSet::from_words(std::array::from_fn(|i| {
                i64_at(bytes, BITMAP_AT + 8 * i) as u64
            })),
            timeline: u32_at(bytes, TIMELINE_AT),
        };
        if header.end_ms_under(header.epoch_unix_ms).is_none() {
            return Err(Damage::Field("lease_end"));
        }
        Ok(header)
    }
}

/// A last-ID block's contents: the IDs of its shards, little-endian, zero-padded.
pub fn last_ids_to_bytes(ids: &[i64]) -> [u8; LAST_IDS_LEN] {
    let mut out = [0u8; LAST_IDS_LEN];
    for (i, id) in ids.iter().enumerate() {
        out[8 * i..8 * i + 8].copy_from_slice(&id.to_le_bytes());
    }
    out
}

/// Reads a last-ID block's contents into `ids` (as many as it holds).
pub fn last_ids_from_bytes(bytes: &[u8], ids: &mut [i64]) -> Result<(), Damage> {
    if bytes.len() != LAST_IDS_LEN {
        return Err(Damage::Size {
            expected: LAST_IDS_LEN,
            found: bytes.len(),
        });
    }
    for (i, id) in ids.iter_mut().enumerate() {
        *id = i64_at(bytes, 8 * i);
    }
    Ok(())
}

/// What the cluster's witness page (`global/9129`) holds: its text, which alone proves that the
/// cluster had the state, and, once written with them, the shards the cluster released (a mark,
/// the released shards as a bitmap, and a checksum of all of it). The witness outlives every
/// database and a lost `global/9128`, so a fence lifts with the releases it lists.
pub const WITNESS_TEXT: &[u8] = b"snowid witness: this cluster has had snowid's state";
const RELEASED_MARK: u32 = u32::from_le_bytes(*b"rlsd");
/// The size of a witness page's contents with the released shards.
pub const WITNESS_LEN: usize = WITNESS_TEXT.len() + 4 + 8 * (SHARD_COUNT / 64) + 8;

/// The witness page's contents: the text, and the released shards where they are known.
pub fn witness_to_bytes(released: Option<&ShardSet>) -> Vec<u8> {
    let mut out = WITNESS_TEXT.to_vec();
    let Some(released) = released else {
        return out;
    };
    out.extend(RELEASED_MARK.to_le_bytes());
    for word in released.words() {
        out.extend(word.to_le_bytes());
    }
    let sum = fnv1a(&out);
    out.extend(sum.to_le_bytes());
    out
}

/// The released shards a witness page's contents list, if it lists them whole: `None` for a
/// witness written before 0.6.0, or while the state was fenced, or damaged.
pub fn witness_released(bytes: &[u8]) -> Option<ShardSet> {
    let bytes = bytes.get(..WITNESS_LEN)?;
    let at = WITNESS_TEXT.len();
    if &bytes[..at] != WITNESS_TEXT || u32_at(bytes, at) != RELEASED_MARK {
        return None;
    }
    if i64_at(bytes, WITNESS_LEN - 8) as u64 != fnv1a(&bytes[..WITNESS_LEN - 8]) {
        return None;
    }
    Some(ShardSet::from_words(std::array::from_fn(|i| {
        i64_at(bytes, at + 4 + 8 * i) as u64
    })))
}

/// 64-bit FNV-1a: enough to tell damaged bytes from good ones.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const EPOCH: i64 = 1_767_225_600_000;

    fn shard(n: i32) -> Shard {
        Shard::new(n).unwrap()
    }

    fn lease(epoch: i64, base: i64, end: i64) -> Change {
        Change::Lease {
            epoch_unix_ms: epoch,
            base_unix_ms: base,
            lease_end_unix_ms: end,
        }
    }

    #[test]
    fn the_earliest_epoch_constrains_and_the_rest_only_grows() {
        // Guards against the merge that kept the later epoch: a standby configured with the
        // old, later epoch replays a lease taken under an earlier one. The state must then say
        // "earliest epoch: the earlier one", so that the standby refuses once promoted.
        let mut h = Header::fresh(EPOCH);
        lease(EPOCH - 86_400_000, EPOCH + 10, EPOCH + 5_000).apply_to_header(&mut h);
        lease(EPOCH, EPOCH + 5, EPOCH + 1_000).apply_to_header(&mut h);
        assert_eq!(h.epoch_unix_ms, EPOCH - 86_400_000);
        assert_eq!(h.base_unix_ms, EPOCH + 10);
        assert_eq!(h.lease_end_unix_ms, EPOCH + 5_000);
        assert!(!h.allows_epoch(EPOCH), "the later epoch is refused");
        assert!(h.allows_epoch(EPOCH - 86_400_000));
        assert!(h.allows_epoch(EPOCH - 86_400_001));
    }

    fn resume(above_id: i64, base: i64, end: i64) -> Change {
        Change::Resume {
            above_id,
            epoch_unix_ms: EPOCH,
            base_unix_ms: base,
            lease_end_unix_ms: end,
        }
    }

    #[test]
    fn a_release_stays_through_a_resume_until_a_take_back() {
        // Guards against a resume undoing a hand-off: 0.4.0's resume took back the shard of the
        // ID it was given, so a promoted server resumed above "now" on shard 8191 generated for
        // a shard its old primary had handed to another server.
        let mut state = DurableState::new(Header::fresh(EPOCH));
        let release = Change::Release {
            shard: shard(4000),
            last_id: 777,
        };
        assert_eq!(release.blocks(), vec![0, 4]);
        release.apply(&mut state);
        assert_eq!(
            state.released().collect::<Vec<_>>(),
            vec![(shard(4000), 777)]
        );

        let above = crate::layout::compose(5, 4000, 0).unwrap();
        resume(above, EPOCH + 6, EPOCH + 1_507).apply(&mut state);
        assert_eq!(
            state.released().collect::<Vec<_>>(),
            vec![(shard(4000), 777)],
            "a resume keeps the release"
        );
        assert_eq!(state.header.lease_end_unix_ms, EPOCH + 1_507);
        assert_eq!(state.header.base_unix_ms, EPOCH + 6);

        Change::TakeBack {
            above_id: above,
            epoch_unix_ms: EPOCH,
            base_unix_ms: EPOCH + 7,
            lease_end_unix_ms: EPOCH + 1_508,
        }
        .apply(&mut state);
        assert_eq!(state.released().count(), 0, "the take-back ends it");
        assert_eq!(state.header.lease_end_unix_ms, EPOCH + 1_508);
    }

    #[test]
    fn a_promotion_records_its_timeline_and_only_raises_the_floor() {
        let mut h = Header {
            base_unix_ms: EPOCH + 50,
            timeline: 1,
            ..Header::fenced(Fence::Lost, EPOCH)
        };
        h.released.insert(9);
        Change::Promotion {
            timeline: 2,
            base_unix_ms: EPOCH + 10,
        }
        .apply_to_header(&mut h);
        assert_eq!(
            (h.timeline, h.base_unix_ms),
            (2, EPOCH + 50),
            "never lowered"
        );
        Change::Promotion {
            timeline: 3,
            base_unix_ms: EPOCH + 90,
        }
        .apply_to_header(&mut h);
        assert_eq!((h.timeline, h.base_unix_ms), (3, EPOCH + 90));
        assert_eq!(h.fence, Some(Fence::Lost), "a promotion lifts no fence");
        assert!(h.released.contains(9), "and takes no shard back");
        assert_eq!(Header::from_bytes(&h.to_bytes()), Ok(h));
    }

    #[test]
    fn a_state_written_before_timelines_reads_as_none_recorded() {
        // 0.4.0 wrote zeros where the timeline now sits, under the same checksum.
        let bytes = Header::fresh(EPOCH).to_bytes();
        assert_eq!(bytes[TIMELINE_AT..TIMELINE_AT + 4], [0; 4]);
        assert_eq!(Header::from_bytes(&bytes).unwrap().timeline, 0);
    }

    #[test]
    fn a_resume_lifts_the_fence_and_nothing_else_does() {
        let mut h = Header {
            fence: Some(Fence::Upgraded),
            ..Header::fresh(EPOCH)
        };
        lease(EPOCH, EPOCH, EPOCH + 10).apply_to_header(&mut h);
        Change::Release {
            shard: shard(1),
            last_id: 1,
        }
        .apply_to_header(&mut h);
        assert_eq!(h.fence, Some(Fence::Upgraded));
        Change::Promotion {
            timeline: 2,
            base_unix_ms: EPOCH,
        }
        .apply_to_header(&mut h);
        assert_eq!(h.fence, Some(Fence::Upgraded));
        resume(0, EPOCH, EPOCH).apply_to_header(&mut h);
        assert_eq!(h.fence, None);
    }

    #[test]
    fn the_last_ids_of_every_shard_have_a_place() {
        assert_eq!(BLOCKS, 10);
        assert_eq!(last_id_block(shard(0)), 1);
        assert_eq!(last_id_block(shard(1015)), 1);
        assert_eq!(last_id_block(shard(1016)), 2);
        assert_eq!(last_id_block(shard(8191)), 9);
        assert_eq!(shards_of_block(9), 8128..8192);
    }

    #[test]
    fn damage_is_detected_not_read_as_numbers() {
        let h = Header::fresh(EPOCH);
        let good = h.to_bytes();
        assert_eq!(Header::from_bytes(&good), Ok(h));
        let mut flipped = good;
        flipped[20] ^= 1;
        assert_eq!(Header::from_bytes(&flipped), Err(Damage::ChecksumMismatch));
        assert_eq!(Header::from_bytes(&[0; HEADER_LEN]), Err(Damage::NotAState));
        let mut later = good;
        later[4] = 9;
        assert_eq!(Header::from_bytes(&later), Err(Damage::UnknownLayout(9)));
        assert!(matches!(
            Header::from_bytes(&good[1..]),
            Err(Damage::Size { .. })
        ));
        assert!(matches!(
            Change::from_bytes(Kind::Lease, &[0; 23]),
            Err(Damage::Size { .. })
        ));
        assert_eq!(
            Change::from_bytes(Kind::Release, &[[9u8; 8], [0; 8]].concat()),
            Err(Damage::Field("shard"))
        );
    }

    #[test]
    fn a_fence_written_by_a_later_version_is_damage() {
        let mut bytes = Header::fresh(EPOCH).to_bytes();
        bytes[32] = 7;
        let sum = fnv1a(&bytes[..HEADER_LEN - 8]);
        bytes[HEADER_LEN - 8..].copy_from_slice(&sum.to_le_bytes());
        assert_eq!(Header::from_bytes(&bytes), Err(Damage::Field("fence")));
    }

    #[test]
    fn records_describe_themselves() {
        assert_eq!(
            Change::Release {
                shard: shard(7),
                last_id: 42
            }
            .describe(),
            "shard 7 released, last ID 42"
        );
        assert!(lease(EPOCH, EPOCH, EPOCH + 1500)
            .describe()
            .starts_with("lease until 2026-01-01 00:00:01.5"));
        let init = Change::Init(Box::new(Header {
            fence: Some(Fence::Upgraded),
            ..Header::fresh(EPOCH)
        }));
        assert!(init
            .describe()
            .contains("fenced: databases came into this cluster by pg_upgrade"));
        let taken = Change::TakeBack {
            above_id: crate::layout::compose(5, 7, 0).unwrap(),
            epoch_unix_ms: EPOCH,
            base_unix_ms: EPOCH,
            lease_end_unix_ms: EPOCH,
        };
        assert!(taken.describe().starts_with("shard 7 taken back above ID "));
        for kind in [
            Kind::Lease020,
            Kind::Init,
            Kind::Lease,
            Kind::Release,
            Kind::TakeBack,
            Kind::Resume,
            Kind::Promotion,
        ] {
            assert_eq!(Kind::from_info(kind as u8), Some(kind));
        }
        assert_eq!(Kind::from_info(0x70), None);
    }

    #[test]
    fn a_lease_of_0_2_0_is_read_and_changes_nothing() {
        // Guards against a crash recovery, a restore or a standby that stops at a record of
        // snowid 0.2.0 (0.5.0 raised an error for its unknown kind, which ends the startup
        // process): it is read, named, and applies to no page.
        let bytes = [
            &1u32.to_le_bytes()[..],
            &[0; 4],
            &EPOCH.to_le_bytes(),
            &(EPOCH + 5).to_le_bytes(),
            &(EPOCH + 1_506).to_le_bytes(),
        ]
        .concat();
        let change = Change::from_bytes(Kind::Lease020, &bytes).unwrap();
        assert_eq!(
            change,
            Change::Lease020 {
                epoch_unix_ms: EPOCH,
                base_unix_ms: EPOCH + 5,
                lease_end_unix_ms: EPOCH + 1_506
            }
        );
        assert_eq!(change.to_bytes(), bytes);
        assert!(change.blocks().is_empty());
        let mut state = DurableState::new(Header::fenced(Fence::Lost, EPOCH));
        let before = state.clone();
        change.apply(&mut state);
        assert_eq!(state, before);
        assert!(change
            .describe()
            .starts_with("lease of snowid 0.2.0 until "));
        let mut other_version = bytes.clone();
        other_version[0] = 2;
        assert_eq!(
            Change::from_bytes(Kind::Lease020, &other_version),
            Err(Damage::Field("version"))
        );
        assert!(matches!(
            Change::from_bytes(Kind::Lease020, &bytes[..31]),
            Err(Damage::Size { .. })
        ));
    }

    #[test]
    fn a_witness_lists_the_released_shards_or_nothing() {
        let mut released = ShardSet::empty();
        released.insert(7);
        released.insert(8191);
        let bytes = witness_to_bytes(Some(&released));
        assert_eq!(bytes.len(), WITNESS_LEN);
        assert_eq!(witness_released(&bytes), Some(released));
        // The witness of 0.5.0, and one written while fenced, list nothing.
        assert_eq!(witness_released(&witness_to_bytes(None)), None);
        // Padding after the contents, as a page has, changes nothing.
        let mut page = bytes.clone();
        page.resize(8168, 0);
        assert!(witness_released(&page).is_some());
        // Damage lists nothing rather than too little.
        let mut flipped = bytes;
        flipped[WITNESS_TEXT.len() + 4] ^= 0x80;
        assert_eq!(witness_released(&flipped), None);
    }

    fn changes() -> impl Strategy<Value = Change> {
        let instant = EPOCH - 1_000_000..EPOCH + 1_000_000_000i64;
        prop_oneof![
            (instant.clone(), instant.clone(), instant.clone())
                .prop_map(|(e, b, l)| lease(e, b, l)),
            (0..8192i32, 0..i64::MAX).prop_map(|(s, id)| Change::Release {
                shard: shard(s),
                last_id: id
            }),
            (
                0..i64::MAX,
                instant.clone(),
                instant.clone(),
                instant.clone()
            )
                .prop_map(|(id, e, b, l)| Change::Resume {
                    above_id: id,
                    epoch_unix_ms: e,
                    base_unix_ms: b,
                    lease_end_unix_ms: l,
                }),
            (
                0..i64::MAX,
                instant.clone(),
                instant.clone(),
                instant.clone()
            )
                .prop_map(|(id, e, b, l)| Change::TakeBack {
                    above_id: id,
                    epoch_unix_ms: e,
                    base_unix_ms: b,
                    lease_end_unix_ms: l,
                }),
            (1..u32::MAX, instant.clone()).prop_map(|(timeline, b)| Change::Promotion {
                timeline,
                base_unix_ms: b,
            }),
            (instant.clone(), instant.clone(), instant).prop_map(|(e, b, l)| Change::Lease020 {
                epoch_unix_ms: e,
                base_unix_ms: b,
                lease_end_unix_ms: l,
            }),
        ]
    }

    proptest! {
        /// Every change survives its trip through the WAL, and replaying a change page by page,
        /// from the pages' bytes, gives what applying it to the whole state gives: what redo
        /// does equals what the primary did.
        #[test]
        fn records_round_trip_and_pagewise_replay_equals_the_whole(
            history in prop::collection::vec(changes(), 1..30)
        ) {
            let mut whole = DurableState::new(Header::fresh(EPOCH));
            let mut block0 = whole.header.to_bytes();
            let mut pages: Vec<[u8; LAST_IDS_LEN]> =
                (1..BLOCKS).map(|_| [0u8; LAST_IDS_LEN]).collect();
            for change in history {
                let read = Change::from_bytes(change.kind(), &change.to_bytes()).unwrap();
                prop_assert_eq!(&read, &change);
                change.apply(&mut whole);

                let mut header = Header::from_bytes(&block0).unwrap();
                read.apply_to_header(&mut header);
                block0 = header.to_bytes();
                for block in read.blocks().into_iter().filter(|&b| b > 0) {
                    let page = &mut pages[block as usize - 1];
                    let mut ids = vec![0i64; shards_of_block(block).len()];
                    last_ids_from_bytes(&page[..], &mut ids).unwrap();
                    read.apply_to_last_ids(block, &mut ids);
                    *page = last_ids_to_bytes(&ids);
                }
            }
            prop_assert_eq!(&Header::from_bytes(&block0).unwrap(), &whole.header);
            for block in 1..BLOCKS {
                let shards = shards_of_block(block);
                let mut ids = vec![0i64; shards.len()];
                last_ids_from_bytes(&pages[block as usize - 1], &mut ids).unwrap();
                prop_assert_eq!(&ids[..], &whole.last_ids[shards]);
            }
        }
    }
}
