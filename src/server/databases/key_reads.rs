//! Reading one key column of one table for a resume, as PostgreSQL's maintenance commands read
//! a table (`ANALYZE`, `VACUUM`): as the table's owner, in a security-restricted operation, with
//! a safe `search_path`, and through the table's access method itself, not a query. No planner
//! runs, so no function of anyone's in an index expression, a partial index's predicate, a
//! partition key, a statistics object or a CHECK constraint is evaluated; no row-level security
//! policy filters a row; no cast, operator or output function anyone can define reads a value.
//! A value is read through PostgreSQL's built-in representation of a built-in type:
//!
//! - `bigint`, `integer` and `smallint` as the integer they hold, from the last entry of a plain
//!   B-tree index on the column with the type's built-in operator class where there is one, and
//!   otherwise from every row;
//! - `numeric` through its built-in output, `text` and `varchar` as their characters, from every
//!   row, each of which must be an ID in decimal digits (as `snowid_text` writes it);
//! - a domain over any of these as its base type.
//!
//! A column of any other type is not read, and said so by name. The caller locks the relation
//! first, and reads it in a snapshot taken after its lock was granted (see [`super::survey`]).

use super::safe_search_path::SafeSearchPath;
use pgrx::pg_sys;
use snowid_core::layout;
use std::ffi::CStr;

/// What reading a column found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Found {
    /// The highest value that is an ID.
    pub max_id: Option<i64>,
    /// How many values are not IDs, and the first of them (shortened).
    pub not_ids: i64,
    pub first_not_id: Option<String>,
}

impl Found {
    fn add_id(&mut self, id: i64) {
        self.max_id = self.max_id.max(Some(id));
    }

    fn add_not_id(&mut self, text: &str) {
        self.not_ids += 1;
        self.first_not_id
            .get_or_insert_with(|| text.chars().take(40).collect());
    }

    /// Both findings together.
    pub fn merge(&mut self, other: Found) {
        self.max_id = self.max_id.max(other.max_id);
        self.not_ids += other.not_ids;
        if self.first_not_id.is_none() {
            self.first_not_id = other.first_not_id;
        }
    }
}

/// How a key column's values are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyType {
    Int8,
    Int4,
    Int2,
    Numeric,
    /// `text` or `varchar`.
    Text,
}

impl KeyType {
    /// The key type of a column's type (a domain read as its base type), or `None` for a type
    /// snowid does not read.
    pub fn of(type_oid: pg_sys::Oid) -> Option<KeyType> {
        // SAFETY: a syscache lookup of a type that exists (the column's own).
        let base = unsafe { pg_sys::getBaseType(type_oid) };
        Some(match base {
            pg_sys::INT8OID => KeyType::Int8,
            pg_sys::INT4OID => KeyType::Int4,
            pg_sys::INT2OID => KeyType::Int2,
            pg_sys::NUMERICOID => KeyType::Numeric,
            pg_sys::TEXTOID | pg_sys::VARCHAROID => KeyType::Text,
            _ => return None,
        })
    }

    fn is_integer(self) -> bool {
        matches!(self, KeyType::Int8 | KeyType::Int4 | KeyType::Int2)
    }
}

/// The SQL of a key column's index, joined to a query that names the table `c` and the column's
/// `pg_attribute` row `a`, as `ix`: the first valid plain B-tree index (no expression, no
/// predicate) whose first column is that column, with the type's default built-in operator class
/// (its `indexrelid`, and whether it is `descending`), or nulls where there is none. What
/// [`Column::index`] holds, for [`read`].
macro_rules! key_index_join {
    () => {
        r#"LEFT JOIN LATERAL (
    SELECT i.indexrelid,
           (i.indoption[0] OPERATOR(pg_catalog.&) 1) OPERATOR(pg_catalog.<>) 0 AS descending
    FROM pg_catalog.pg_index i
    JOIN pg_catalog.pg_class ic ON ic.oid OPERATOR(pg_catalog.=) i.indexrelid
    JOIN pg_catalog.pg_opclass oc ON oc.oid OPERATOR(pg_catalog.=) i.indclass[0]
    WHERE i.indrelid OPERATOR(pg_catalog.=) c.oid
      AND i.indkey[0] OPERATOR(pg_catalog.=) a.attnum
      AND i.indexprs IS NULL AND i.indpred IS NULL
      AND i.indisvalid AND i.indisready AND i.indislive AND NOT i.indcheckxmin
      AND ic.relam OPERATOR(pg_catalog.=) 403
      AND oc.opcdefault
      AND oc.oid OPERATOR(pg_catalog.<) 16384
    ORDER BY i.indexrelid
    LIMIT 1
) ix ON true"#
    };
}
pub(crate) use key_index_join;

/// One relation's column to read.
#[derive(Clone, Copy, Debug)]
struct Column {
    pub relation: pg_sys::Oid,
    pub owner: pg_sys::Oid,
    pub attnum: i16,
    pub key_type: KeyType,
    /// A plain B-tree index whose first column is this one, with the type's built-in operator
    /// class, and whether it is in descending order.
    pub index: Option<(pg_sys::Oid, bool)>,
}

/// A table at or below a key column's table, as the catalog describes it.
#[derive(Clone, Debug)]
pub struct Member {
    pub relation: pg_sys::Oid,
    /// Its name, qualified and quoted.
    pub table: String,
    pub relkind: String,
    pub owner: pg_sys::Oid,
    /// The key column's number in it (`None` where it lost the column).
    pub attnum: Option<i16>,
    /// As [`Column::index`].
    pub index: Option<(pg_sys::Oid, bool)>,
}

impl Member {
    /// An ordinary or partitioned table (locked, so that nothing below it changes either).
    pub fn holds_rows(&self) -> bool {
        matches!(self.relkind.as_str(), "r" | "p")
    }

    /// The member in a row's seven columns from `first`: the relation's OID, its qualified name,
    /// its `relkind` as text, its owner, the key column's `attnum`, and [`key_index_join`]'s
    /// `ix.indexrelid` and `ix.descending`.
    pub fn from_row(
        row: &pgrx::spi::SpiHeapTupleData,
        first: usize,
    ) -> Result<Member, pgrx::spi::Error> {
        let index = row.get::<pg_sys::Oid>(first + 5)?;
        Ok(Member {
            relation: row.get::<pg_sys::Oid>(first)?.unwrap_or(pg_sys::InvalidOid),
            table: row.get::<String>(first + 1)?.unwrap_or_default(),
            relkind: row.get::<String>(first + 2)?.unwrap_or_default(),
            owner: row
                .get::<pg_sys::Oid>(first + 3)?
                .unwrap_or(pg_sys::InvalidOid),
            attnum: row.get::<i16>(first + 4)?,
            index: index.map(|i| {
                (
                    i,
                    row.get::<bool>(first + 6).ok().flatten().unwrap_or(false),
                )
            }),
        })
    }

    /// Reads its key column as [`read`] does: `Ok(None)` for a table that holds none of its
    /// keys (a partitioned table holds no rows of its own; a table that lost the column, which
    /// inheritance forbids, none of its keys), and why it cannot be read for a foreign table or
    /// one gone although it was locked, which the caller must not take for empty.
    pub fn read(&self, key_type: KeyType) -> Result<Option<Found>, String> {
        match (self.relkind.as_str(), self.attnum) {
            ("f", _) => Err(format!(
                "{} below it is a foreign table, whose rows live on another server",
                self.table
            )),
            ("r", Some(attnum)) => read(&Column {
                relation: self.relation,
                owner: self.owner,
                attnum,
                key_type,
                index: self.index,
            })
            .map(Some)
            .ok_or_else(|| format!("{} could not be opened although it was locked", self.table)),
            _ => Ok(None),
        }
    }
}

/// Reads a relation's key column, in the current transaction and the active snapshot. The
/// relation must be locked already; `None` if it is gone all the same, which the caller must not
/// take for empty.
fn read(column: &Column) -> Option<Found> {
    let _owner = AsOwner::enter(column.owner);
    // SAFETY: the relation is locked; try_relation_open returns null if it does not exist.
    let relation = unsafe { pg_sys::try_relation_open(column.relation, pg_sys::NoLock as i32) };
    if relation.is_null() {
        return None;
    }
    // An index another transaction holds locked (a REINDEX, say) is not waited for: every row
    // is read instead.
    // SAFETY: a conditional lock, which never waits.
    let usable = |index: pg_sys::Oid| unsafe {
        pg_sys::ConditionalLockRelationOid(index, pg_sys::AccessShareLock as i32)
    };
    let found = match column.index {
        Some((index, descending)) if column.key_type.is_integer() && usable(index) => {
            highest_in_index(relation, index, descending, column)
                .unwrap_or_else(|| every_row(relation, column))
        }
        _ => every_row(relation, column),
    };
    // SAFETY: closes what was opened above; the lock stays until the transaction ends.
    unsafe { pg_sys::relation_close(relation, pg_sys::NoLock as i32) };
    Some(found)
}

/// The highest non-null value in a B-tree index's first column: the first visible entry from its
/// high end; `None` where the index (locked already) is no longer valid.
fn highest_in_index(
    relation: pg_sys::Relation,
    index_oid: pg_sys::Oid,
    descending: bool,
    column: &Column,
) -> Option<Found> {
    let mut found = Found::default();
    // SAFETY: the index is opened and scanned with the active snapshot through PostgreSQL's
    // index access functions, and closed before returning; the scan key asks for non-null
    // entries only, as the planner's IS NOT NULL does.
    unsafe {
        let index = pg_sys::index_open(index_oid, pg_sys::NoLock as i32);
        if !(*(*index).rd_index).indisvalid {
            pg_sys::index_close(index, pg_sys::NoLock as i32);
            return None;
        }
        let slot = pg_sys::table_slot_create(relation, std::ptr::null_mut());
        let mut key = pg_sys::ScanKeyData::default();
        pg_sys::ScanKeyEntryInitialize(
            &mut key,
            (pg_sys::SK_ISNULL | pg_sys::SK_SEARCHNOTNULL) as i32,
            1,
            0,
            pg_sys::InvalidOid,
            pg_sys::InvalidOid,
            pg_sys::InvalidOid,
            pg_sys::Datum::from(0),
        );
        let scan = begin_index_scan(relation, index);
        pg_sys::index_rescan(scan, &mut key, 1, std::ptr::null_mut(), 0);
        let direction = match descending {
            false => pg_sys::ScanDirection::BackwardScanDirection,
            true => pg_sys::ScanDirection::ForwardScanDirection,
        };
        if pg_sys::index_getnext_slot(scan, direction, slot) {
            if let Some(value) = integer_at(slot, column) {
                if value >= 0 {
                    found.add_id(value);
                }
            }
        }
        pg_sys::index_endscan(scan);
        pg_sys::ExecDropSingleTupleTableSlot(slot);
        pg_sys::index_close(index, pg_sys::NoLock as i32);
    };
    Some(found)
}

/// Begins a scan of an index with one key and the active snapshot.
///
/// # Safety
///
/// Both relations are open and locked, in a transaction with an active snapshot.
unsafe fn begin_index_scan(
    relation: pg_sys::Relation,
    index: pg_sys::Relation,
) -> pg_sys::IndexScanDesc {
    // SAFETY: guaranteed by the caller.
    unsafe {
        let snapshot = pg_sys::GetActiveSnapshot();
        #[cfg(any(feature = "pg15", feature = "pg16", feature = "pg17"))]
        let scan = pg_sys::index_beginscan(relation, index, snapshot, 1, 0);
        #[cfg(feature = "pg18")]
        let scan = pg_sys::index_beginscan(relation, index, snapshot, std::ptr::null_mut(), 1, 0);
        #[cfg(feature = "pg19")]
        let scan =
            pg_sys::index_beginscan(relation, index, snapshot, std::ptr::null_mut(), 1, 0, 0);
        scan
    }
}

/// Every row's value, through the table's access method.
fn every_row(relation: pg_sys::Relation, column: &Column) -> Found {
    let mut found = Found::default();
    // SAFETY: a sequential scan with the active snapshot through the relation's own table
    // access method; its callbacks, which pgrx does not bind, are each called through pgrx's
    // guard, so that an error raised inside unwinds as from pgrx's own calls. Values are read
    // from the slot after deforming up to the column, and the scan and slot are released before
    // returning.
    unsafe {
        let am = (*relation).rd_tableam;
        let (Some(begin), Some(next), Some(end)) =
            ((*am).scan_begin, (*am).scan_getnextslot, (*am).scan_end)
        else {
            return found;
        };
        let slot = pg_sys::table_slot_create(relation, std::ptr::null_mut());
        let flags = pg_sys::ScanOptions::SO_TYPE_SEQSCAN
            | pg_sys::ScanOptions::SO_ALLOW_STRAT
            | pg_sys::ScanOptions::SO_ALLOW_SYNC
            | pg_sys::ScanOptions::SO_ALLOW_PAGEMODE;
        let snapshot = pg_sys::GetActiveSnapshot();
        let scan = guarded(|| {
            begin(
                relation,
                snapshot,
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                flags,
            )
        });
        while guarded(|| next(scan, pg_sys::ScanDirection::ForwardScanDirection, slot)) {
            pg_sys::check_for_interrupts!();
            if column.key_type.is_integer() {
                if let Some(value) = integer_at(slot, column) {
                    match value >= 0 {
                        true => found.add_id(value),
                        false => found.add_not_id(&value.to_string()),
                    }
                }
            } else if let Some(text) = text_at(slot, column) {
                match layout::id_from_digits(&text, column.key_type == KeyType::Numeric) {
                    Some(id) => found.add_id(id),
                    None => found.add_not_id(&text),
                }
            }
        }
        guarded(|| end(scan));
        pg_sys::ExecDropSingleTupleTableSlot(slot);
    };
    found
}

/// Calls a function of PostgreSQL's that pgrx does not bind (a table access method's callback)
/// through pgrx's guard.
///
/// # Safety
///
/// As the function called; `call` makes that one call and nothing else.
unsafe fn guarded<T>(call: impl FnOnce() -> T) -> T {
    // SAFETY: guaranteed by the caller.
    unsafe { pg_sys::ffi::pg_guard_ffi_boundary(call) }
}

/// The column's datum in a slot, if it is not null.
///
/// # Safety
///
/// `slot` holds a tuple of the column's relation.
unsafe fn datum_at(slot: *mut pg_sys::TupleTableSlot, attnum: i16) -> Option<pg_sys::Datum> {
    // SAFETY: guaranteed by the caller; deforming up to the column, as slot_getattr does.
    unsafe {
        if ((*slot).tts_nvalid as i32) < attnum as i32 {
            pg_sys::slot_getsomeattrs_int(slot, attnum as i32);
        }
        let at = attnum as usize - 1;
        match *(*slot).tts_isnull.add(at) {
            true => None,
            false => Some(*(*slot).tts_values.add(at)),
        }
    }
}

/// An integer column's value.
///
/// # Safety
///
/// As [`datum_at`]; the column is an integer one.
unsafe fn integer_at(slot: *mut pg_sys::TupleTableSlot, column: &Column) -> Option<i64> {
    // SAFETY: guaranteed by the caller; the datum is of the column's integer type.
    let datum = unsafe { datum_at(slot, column.attnum)? };
    Some(match column.key_type {
        KeyType::Int8 => datum.value() as i64,
        KeyType::Int4 => datum.value() as i32 as i64,
        _ => datum.value() as i16 as i64,
    })
}

/// A `numeric`, `text` or `varchar` column's value as text, through PostgreSQL's own code.
///
/// # Safety
///
/// As [`datum_at`]; the column is one of those types.
unsafe fn text_at(slot: *mut pg_sys::TupleTableSlot, column: &Column) -> Option<String> {
    // SAFETY: guaranteed by the caller: numeric_out is the built-in output function of numeric,
    // text_to_cstring detoasts a text or varchar value; both return palloc'd strings.
    unsafe {
        let datum = datum_at(slot, column.attnum)?;
        let cstring = match column.key_type {
            KeyType::Numeric => pg_sys::OidOutputFunctionCall(NUMERIC_OUT, datum),
            _ => pg_sys::text_to_cstring(datum.cast_mut_ptr()),
        };
        let text = CStr::from_ptr(cstring).to_string_lossy().into_owned();
        pg_sys::pfree(cstring.cast());
        Some(text)
    }
}

/// The OID of `numeric_out`, the built-in output function of `numeric` (pg_proc.dat).
const NUMERIC_OUT: pg_sys::Oid = pg_sys::Oid::from_u32(1702);

/// The table's owner, in a security-restricted operation, with a safe `search_path`, until
/// dropped: what PostgreSQL's maintenance commands switch to before they read a table
/// (`SetUserIdAndSecContext`, then a GUC nest level whose `search_path` is `pg_catalog,
/// pg_temp`). An error's abort undoes both too.
pub struct AsOwner {
    user: pg_sys::Oid,
    context: i32,
    path: Option<SafeSearchPath>,
}

impl AsOwner {
    pub fn enter(owner: pg_sys::Oid) -> AsOwner {
        let (mut user, mut context) = (pg_sys::InvalidOid, 0);
        // SAFETY: the sequence of PostgreSQL's own maintenance commands (vacuum.c, analyze.c).
        unsafe {
            pg_sys::GetUserIdAndSecContext(&mut user, &mut context);
            pg_sys::SetUserIdAndSecContext(
                owner,
                context
                    | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32
                    | pg_sys::SECURITY_RESTRICTED_OPERATION as i32,
            );
        }
        AsOwner {
            user,
            context,
            path: Some(SafeSearchPath::set()),
        }
    }
}

impl Drop for AsOwner {
    fn drop(&mut self) {
        drop(self.path.take());
        // SAFETY: back to the identity `enter` found.
        unsafe { pg_sys::SetUserIdAndSecContext(self.user, self.context) };
    }
}
