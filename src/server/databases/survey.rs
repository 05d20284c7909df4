//! What one database holds, for a resume: a fence lifts only above what every database holds,
//! and only with every release the databases recorded.
//!
//! The keys are the values of every column of an ordinary or partitioned table whose default
//! calls `snowid_next` anywhere in its expression (`snowid_text(snowid_next(5))` on a `text`
//! column included), whose type is a domain whose default calls it (or a domain over such a
//! domain), or that a `snowid_fill_id` trigger fills. The table and every table below it
//! (partitions, inheritance children) are read, each as its owner, through its access method
//! (see [`super::key_reads`]), so that rows that came in through a parent count and no one's code
//! runs. Not read, and named in the report:
//! - a column of a type snowid does not read (only `bigint`, `integer`, `smallint`, `numeric`,
//!   `text`, `varchar` and domains over them are), so that a resume refuses rather than lifts a
//!   fence below keys it could not read;
//! - a foreign table below a key table, whose rows live on another server;
//! - a table another transaction keeps locked against reading, past a bound.
//!
//! Temporary tables are not read: they belong to one session, vanish with it (or with the next
//! start after a crash), and no other session can read them; a key copied from one into a
//! permanent table is read there. Views and other relations are not read either: their rows are
//! other tables' rows. Rows of transactions not yet committed are not seen (see
//! [`super::survey_every_database`] for prepared ones), nor deleted rows, nor keys copied
//! elsewhere.

use super::failure::Failure;
use super::key_reads::{key_index_join, Found, KeyType, Member};
use super::record_table::{self, Contents};
use super::safe_search_path::SafeSearchPath;
use crate::server::waits;
use pgrx::pg_sys;
use pgrx::prelude::*;
use serde::{Deserialize, Serialize};

/// A column holding snowid keys.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyColumn {
    /// The table, qualified and quoted.
    pub table: String,
    pub column: String,
    /// Its highest value that is an ID (`None` for an empty table).
    pub max_id: Option<i64>,
    /// How many of its values are not IDs, and the first of them.
    pub not_ids: i64,
    pub first_not_id: Option<String>,
    /// Why it, or a table below it, could not be read.
    pub unread: Option<String>,
}

impl KeyColumn {
    /// Whether a resume can rise above it: every value read, and every value an ID.
    pub fn readable(&self) -> bool {
        self.unread.is_none() && self.not_ids == 0
    }
}

/// What one database holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatabaseReport {
    pub database: String,
    /// snowid's version there, if it is installed.
    pub snowid: Option<String>,
    /// Its key columns.
    pub columns: Vec<KeyColumn>,
    /// What the database records of the shards the cluster released.
    pub releases: Contents,
}

impl DatabaseReport {
    /// The columns a resume cannot rise above.
    pub fn unreadable(&self) -> impl Iterator<Item = &KeyColumn> {
        self.columns.iter().filter(|c| !c.readable())
    }

    /// The column with the highest key.
    pub fn highest(&self) -> Option<&KeyColumn> {
        self.columns
            .iter()
            .filter(|c| c.max_id.is_some())
            .max_by_key(|c| c.max_id)
    }
}

/// Reads the current database, in the current transaction (a worker's own), waiting for a table
/// another transaction holds locked only while `wait` (then at most `waits::LOCK_WAIT`, and for
/// one table at most: a table that could not be locked decides a refusal, and no later table
/// is waited for).
///
/// Every table is read in one snapshot taken after every table was locked, so that none is read
/// as it was before a change that waited for the lock (a rewrite by `ALTER TABLE ... TYPE`,
/// `TRUNCATE`, `CLUSTER` or `VACUUM FULL`, a table dropped and its rows moved to a new one, a
/// partition attached): the tables are listed in a snapshot, the new ones locked, and listed
/// again in a snapshot taken after that, until a listing finds no table it has not locked.
pub fn this_database(wait: bool) -> Result<DatabaseReport, Failure> {
    let _path = SafeSearchPath::set();
    let spi = |e: pgrx::spi::Error| Failure::internal(e.to_string());
    let (database, snowid) = Spi::connect(|client| {
        let database = client
            .select(
                "SELECT pg_catalog.current_database()::pg_catalog.text",
                None,
                &[],
            )?
            .first()
            .get::<String>(1)?
            .unwrap_or_default();
        let snowid = client
            .select(
                "SELECT extversion::pg_catalog.text FROM pg_catalog.pg_extension \
                 WHERE extname OPERATOR(pg_catalog.=) 'snowid'",
                None,
                &[],
            )?
            .first()
            .get::<String>(1)
            .unwrap_or(None);
        Ok::<_, pgrx::spi::Error>((database, snowid))
    })
    .map_err(spi)?;
    let mut report = DatabaseReport {
        database,
        snowid,
        columns: Vec::new(),
        releases: Contents::Unknown("snowid is not installed there".into()),
    };
    if report.snowid.is_none() {
        return Ok(report);
    }
    let mut locks = Locks {
        wait,
        ..Locks::default()
    };
    for _ in 0..MAX_LISTINGS {
        let snapshot = Snapshot::take();
        let listed = Spi::connect(list_key_columns).map_err(spi)?;
        if listed.iter().any(|c| c.decided_unreadable()) {
            locks.wait = false;
        }
        if locks.lock_new(&listed) {
            report.columns = listed.iter().map(|c| read_key_column(c, &locks)).collect();
            report.releases = Spi::connect(record_table::read).map_err(spi)?;
            drop(snapshot);
            return Ok(report);
        }
    }
    Err(Failure::new(
        "55000",
        format!(
            "its tables with snowid keys kept changing while they were locked to be read ({MAX_LISTINGS} listings)"
        ),
    ))
}

/// How many times a survey lists a database's key tables before it gives up: each listing after
/// the first finds only tables created, or attached, while the ones before were locked.
const MAX_LISTINGS: usize = 100;

/// A snapshot taken now, active until dropped.
struct Snapshot;

impl Snapshot {
    fn take() -> Snapshot {
        // SAFETY: in a read-committed transaction each call takes a new snapshot, which the
        // push copies; the worker's transaction has one active already, which this one hides.
        unsafe { pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot()) };
        Snapshot
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        // SAFETY: pops the snapshot `take` pushed (an error's abort pops it too).
        unsafe { pg_sys::PopActiveSnapshot() };
    }
}

/// A table others held locked: the processes holding it, and whether it was waited for.
struct Held {
    holders: Vec<i32>,
    waited: bool,
}

/// The tables a survey has locked, and those it could not.
#[derive(Default)]
struct Locks {
    locked: std::collections::HashSet<pg_sys::Oid>,
    held: std::collections::HashMap<pg_sys::Oid, Held>,
    /// Whether a table another transaction holds locked is waited for.
    wait: bool,
}

impl Locks {
    /// Locks every table of `listed` not tried before; whether there was none.
    fn lock_new(&mut self, listed: &[ListedColumn]) -> bool {
        let mut none = true;
        for member in listed.iter().flat_map(|c| &c.members) {
            let relation = member.relation;
            if !member.holds_rows()
                || self.locked.contains(&relation)
                || self.held.contains_key(&relation)
            {
                continue;
            }
            none = false;
            match waits::lock_relation(relation, pg_sys::AccessShareLock, self.wait) {
                Ok(()) => {
                    self.locked.insert(relation);
                }
                Err(holders) => {
                    // This table decides a refusal: no later one is waited for.
                    let waited = std::mem::replace(&mut self.wait, false);
                    self.held.insert(relation, Held { holders, waited });
                }
            }
        }
        none
    }
}

/// A key column as the catalog lists it, with its table and every table below it.
struct ListedColumn {
    table: String,
    column: String,
    type_oid: pg_sys::Oid,
    type_name: String,
    members: Vec<Member>,
}

impl ListedColumn {
    /// Whether the catalog alone says the column cannot be read.
    fn decided_unreadable(&self) -> bool {
        KeyType::of(self.type_oid).is_none() || self.members.iter().any(|m| m.relkind == "f")
    }
}

/// Every key column of the current database, in the active snapshot.
fn list_key_columns(client: &pgrx::spi::SpiClient) -> Result<Vec<ListedColumn>, pgrx::spi::Error> {
    let mut columns: Vec<ListedColumn> = Vec::new();
    for row in client.select(KEY_COLUMNS, None, &[])? {
        let root = row.get::<pg_sys::Oid>(1)?.unwrap_or(pg_sys::InvalidOid);
        let column = row.get::<String>(3)?.unwrap_or_default();
        let member = Member::from_row(&row, 6)?;
        match columns.last_mut() {
            Some(last) if last.members[0].relation == root && last.column == column => {
                last.members.push(member)
            }
            _ => columns.push(ListedColumn {
                table: row.get::<String>(2)?.unwrap_or_default(),
                column,
                type_oid: row.get::<pg_sys::Oid>(4)?.unwrap_or(pg_sys::InvalidOid),
                type_name: row.get::<String>(5)?.unwrap_or_default(),
                members: vec![member],
            }),
        }
    }
    Ok(columns)
}

/// Reads a key column from its table and every table below it, each locked already (or named as
/// locked by others).
fn read_key_column(listed: &ListedColumn, locks: &Locks) -> KeyColumn {
    let mut column = KeyColumn {
        table: listed.table.clone(),
        column: listed.column.clone(),
        max_id: None,
        not_ids: 0,
        first_not_id: None,
        unread: None,
    };
    let Some(key_type) = KeyType::of(listed.type_oid) else {
        column.unread = Some(format!(
            "its type {} is not one snowid reads (bigint, integer, smallint, numeric, text, \
             varchar, or a domain over one of them)",
            listed.type_name
        ));
        return column;
    };
    for member in &listed.members {
        if let Some(held) = locks.held.get(&member.relation) {
            column.unread = Some(locked(&member.table, held));
            continue;
        }
        match member.read(key_type) {
            Ok(Some(found)) => merge(&mut column, found),
            Ok(None) => {}
            Err(unread) => column.unread = Some(unread),
        }
    }
    column
}

fn merge(column: &mut KeyColumn, found: Found) {
    let mut all = Found {
        max_id: column.max_id,
        not_ids: column.not_ids,
        first_not_id: column.first_not_id.take(),
    };
    all.merge(found);
    column.max_id = all.max_id;
    column.not_ids = all.not_ids;
    column.first_not_id = all.first_not_id;
}

fn locked(table: &str, held: &Held) -> String {
    match held.waited {
        true => format!(
            "{table} stayed locked against reading for {} by {}",
            waits::lock_wait_words(),
            waits::processes(&held.holders)
        ),
        false => format!(
            "{table} was locked against reading by {} (not waited for: the survey had found a \
             column it cannot read already)",
            waits::processes(&held.holders)
        ),
    }
}

/// Every key column of the current database's permanent tables, each with its table and every
/// table below it (partitions, inheritance children) but temporary ones, one row each: the key
/// table's OID, its name (qualified and quoted), the column's name, its type and the type's
/// name; then the member's OID, name, kind, owner, the number of the column in it, and the
/// B-tree index a read can take the highest key from (its first column the key column, no
/// expression, no predicate, valid, and the type's default operator class of PostgreSQL's own),
/// with whether it is descending. Ordered by key table and column, the key table first.
const KEY_COLUMNS: &str = concat!(
    r#"
WITH RECURSIVE snowid_functions AS (
    SELECT p.oid, p.proname
    FROM pg_catalog.pg_depend d
    JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid
    JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) d.objid
    WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
      AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
      AND d.deptype OPERATOR(pg_catalog.=) 'e'
      AND e.extname OPERATOR(pg_catalog.=) 'snowid'
), snowid_domains AS (
    SELECT dep.objid AS oid
    FROM pg_catalog.pg_depend dep
    JOIN snowid_functions f
      ON f.oid OPERATOR(pg_catalog.=) dep.refobjid AND f.proname OPERATOR(pg_catalog.=) 'snowid_next'
    WHERE dep.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_type'::pg_catalog.regclass
      AND dep.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
    UNION
    SELECT t.oid
    FROM pg_catalog.pg_type t
    JOIN snowid_domains s ON t.typbasetype OPERATOR(pg_catalog.=) s.oid
    WHERE t.typtype OPERATOR(pg_catalog.=) 'd'
), key_columns AS (
    SELECT ad.adrelid AS rel, ad.adnum AS num
    FROM pg_catalog.pg_attrdef ad
    JOIN pg_catalog.pg_depend dep
      ON dep.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_attrdef'::pg_catalog.regclass
     AND dep.objid OPERATOR(pg_catalog.=) ad.oid
     AND dep.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
    JOIN snowid_functions f
      ON f.oid OPERATOR(pg_catalog.=) dep.refobjid AND f.proname OPERATOR(pg_catalog.=) 'snowid_next'
    UNION
    SELECT a.attrelid, a.attnum
    FROM pg_catalog.pg_attribute a
    JOIN snowid_domains s ON s.oid OPERATOR(pg_catalog.=) a.atttypid
    WHERE a.attnum OPERATOR(pg_catalog.>) 0
    UNION
    SELECT t.tgrelid, a.attnum
    FROM pg_catalog.pg_trigger t
    JOIN snowid_functions f
      ON f.oid OPERATOR(pg_catalog.=) t.tgfoid AND f.proname OPERATOR(pg_catalog.=) 'snowid_fill_id'
    JOIN pg_catalog.pg_attribute a
      ON a.attrelid OPERATOR(pg_catalog.=) t.tgrelid
     AND a.attname OPERATOR(pg_catalog.=) pg_catalog.convert_from(
            pg_catalog.substr(t.tgargs, 1, GREATEST(
                pg_catalog.position(t.tgargs, '\x00'::pg_catalog.bytea) OPERATOR(pg_catalog.-) 1, 0)),
            pg_catalog.getdatabaseencoding())::pg_catalog.name
), roots AS (
    SELECT c.oid AS relid,
           pg_catalog.format('%I.%I', n.nspname, c.relname) AS tbl,
           a.attname,
           a.atttypid
    FROM key_columns k
    JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) k.rel
    JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
    JOIN pg_catalog.pg_attribute a
      ON a.attrelid OPERATOR(pg_catalog.=) k.rel AND a.attnum OPERATOR(pg_catalog.=) k.num
    WHERE c.relkind IN ('r', 'p')
      AND c.relpersistence OPERATOR(pg_catalog.<>) 't'
      AND NOT a.attisdropped
), tree(root, attname, relid) AS (
    SELECT relid, attname, relid FROM roots
    UNION
    SELECT tree.root, tree.attname, i.inhrelid
    FROM pg_catalog.pg_inherits i
    JOIN tree ON i.inhparent OPERATOR(pg_catalog.=) tree.relid
)
SELECT r.relid,
       r.tbl,
       r.attname::pg_catalog.text,
       r.atttypid,
       pg_catalog.format_type(r.atttypid, NULL),
       c.oid,
       pg_catalog.format('%I.%I', n.nspname, c.relname),
       c.relkind::pg_catalog.text,
       c.relowner,
       a.attnum,
       ix.indexrelid,
       ix.descending
FROM roots r
JOIN tree
  ON tree.root OPERATOR(pg_catalog.=) r.relid AND tree.attname OPERATOR(pg_catalog.=) r.attname
JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) tree.relid
JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
LEFT JOIN pg_catalog.pg_attribute a
  ON a.attrelid OPERATOR(pg_catalog.=) c.oid
 AND a.attname OPERATOR(pg_catalog.=) r.attname
 AND NOT a.attisdropped
"#,
    key_index_join!(),
    r#"
WHERE c.relpersistence OPERATOR(pg_catalog.<>) 't'
ORDER BY 2, 3, c.oid OPERATOR(pg_catalog.<>) r.relid, 7
"#
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_comes_back_as_it_was_written() {
        let column = KeyColumn {
            table: "public.\"odd\ttable\"".into(),
            column: "id".into(),
            max_id: Some(99_000),
            not_ids: 1,
            first_not_id: Some("x".into()),
            unread: None,
        };
        let written = DatabaseReport {
            database: "shop".into(),
            snowid: Some("0.7.0".into()),
            columns: vec![column],
            releases: Contents::Listed(vec![(7, 1234)]),
        };
        let bytes = serde_json::to_vec(&written).unwrap();
        assert_eq!(
            serde_json::from_slice::<DatabaseReport>(&bytes).unwrap(),
            written
        );
    }
}
