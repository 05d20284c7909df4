//! What one database holds, for a resume: a fence lifts only above what every database holds,
//! and only with every release the databases recorded.
//!
//! The keys are the values of every column of an ordinary or partitioned table whose default
//! calls `snowid_next` anywhere in its expression (`snowid_text(snowid_next(5))` on a `text`
//! column included), whose type is a domain whose default calls it (or a domain over such a
//! domain), or that a `snowid_fill_id` trigger fills. The highest is read from the table and
//! everything below it (partitions, inheritance children), so that rows that came in through a
//! parent count. A `bigint` column (or a domain over `bigint`) is read as it is; any other is
//! read through its text, whose values must be IDs written in decimal digits (as
//! `snowid_text` writes them): a column with other values is reported as unreadable, with how
//! many, so that a resume refuses rather than lifts a fence below keys it could not read.
//! Views and other relations are not read: reading them would run code their owners wrote, as
//! the superuser. Rows of transactions not yet committed are not seen (see
//! [`super::survey_every_database`] for prepared ones), nor deleted rows, nor keys copied
//! elsewhere.

use super::release_records::{self, Records};
use super::{Failure, SafeSearchPath};
use pgrx::prelude::*;
use serde::{Deserialize, Serialize};

/// The most columns a report lists (the highest key and the count of unreadable values cover
/// the rest).
pub const LISTED_COLUMNS: usize = 1000;

/// A column holding snowid keys.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyColumn {
    /// The table, qualified and quoted.
    pub table: String,
    pub column: String,
    /// Its highest value that is an ID (`None` for an empty table).
    pub max_id: Option<i64>,
    /// How many of its values are not IDs.
    pub unreadable: i64,
}

/// What one database holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatabaseReport {
    pub database: String,
    /// snowid's version there, if it is installed.
    pub snowid: Option<String>,
    /// Its key columns, those with unreadable values first, at most [`LISTED_COLUMNS`].
    pub columns: Vec<KeyColumn>,
    /// How many more key columns there are than `columns` lists.
    pub unlisted: u64,
    /// The column with the highest key, whether listed or not.
    pub highest: Option<KeyColumn>,
    /// What the database records of the shards the cluster released.
    pub releases: Records,
}

impl DatabaseReport {
    /// The columns with values that are not IDs.
    pub fn unreadable(&self) -> impl Iterator<Item = &KeyColumn> {
        self.columns.iter().filter(|c| c.unreadable > 0)
    }
}

/// Reads the current database, in the current transaction.
pub fn this_database() -> Result<DatabaseReport, Failure> {
    let _path = SafeSearchPath::set();
    Spi::connect(|client| {
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
        let mut report = DatabaseReport {
            database,
            snowid,
            columns: Vec::new(),
            unlisted: 0,
            highest: None,
            releases: Records::Unknown("snowid is not installed there".into()),
        };
        if report.snowid.is_none() {
            return Ok(report);
        }
        let columns = client
            .select(KEY_COLUMNS, None, &[])?
            .map(|row| {
                Ok((
                    row.get::<String>(1)?.unwrap_or_default(),
                    row.get::<String>(2)?.unwrap_or_default(),
                    row.get::<String>(3)?.unwrap_or_default(),
                ))
            })
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()?;
        for (table, column, query) in columns {
            let read = client.select(&query, None, &[])?.first();
            let column = KeyColumn {
                table,
                column,
                max_id: read.get::<i64>(1)?,
                unreadable: read.get::<i64>(2)?.unwrap_or(0),
            };
            if column.max_id > report.highest.as_ref().and_then(|h| h.max_id) {
                report.highest = Some(column.clone());
            }
            report.columns.push(column);
        }
        report.releases = release_records::read(client)?;
        // Those with values that are not IDs first, so that they are listed whatever the rest.
        report.columns.sort_by_key(|c| c.unreadable == 0);
        if report.columns.len() > LISTED_COLUMNS {
            report.unlisted = (report.columns.len() - LISTED_COLUMNS) as u64;
            report.columns.truncate(LISTED_COLUMNS);
        }
        Ok(report)
    })
    .map_err(|e: pgrx::spi::Error| Failure::new("XX000", e.to_string()))
}

/// Every key column of the current database: its table (qualified and quoted), its name, and
/// the query that reads its highest ID and how many of its values are not IDs, from the table
/// and everything below it.
const KEY_COLUMNS: &str = r#"
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
)
SELECT pg_catalog.format('%I.%I', n.nspname, c.relname),
       a.attname::pg_catalog.text,
       CASE WHEN ty.oid OPERATOR(pg_catalog.=) 'pg_catalog.int8'::pg_catalog.regtype
              OR ty.typbasetype OPERATOR(pg_catalog.=) 'pg_catalog.int8'::pg_catalog.regtype
       THEN pg_catalog.format(
           'SELECT pg_catalog.max(%I::pg_catalog.int8), 0::pg_catalog.int8 FROM %I.%I',
           a.attname, n.nspname, c.relname)
       ELSE pg_catalog.format(
           $q$SELECT pg_catalog.max(k), pg_catalog.count(*) FILTER (WHERE k IS NULL)
              FROM (SELECT CASE WHEN v OPERATOR(pg_catalog.~) '^[0-9]{1,19}$'
                           THEN CASE WHEN v::pg_catalog.numeric
                                          OPERATOR(pg_catalog.<=) 9223372036854775807
                                     THEN v::pg_catalog.int8 END END AS k
                    FROM (SELECT %I::pg_catalog.text AS v FROM %I.%I) AS r
                    WHERE v IS NOT NULL) AS s$q$,
           a.attname, n.nspname, c.relname)
       END
FROM key_columns k
JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) k.rel
JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
JOIN pg_catalog.pg_attribute a
  ON a.attrelid OPERATOR(pg_catalog.=) k.rel AND a.attnum OPERATOR(pg_catalog.=) k.num
JOIN pg_catalog.pg_type ty ON ty.oid OPERATOR(pg_catalog.=) a.atttypid
WHERE c.relkind IN ('r', 'p')
  AND NOT a.attisdropped
ORDER BY 1, 2
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::databases::release_records::ReleaseRecord;

    #[test]
    fn a_report_comes_back_as_it_was_written() {
        let column = KeyColumn {
            table: "public.\"odd\ttable\"".into(),
            column: "id".into(),
            max_id: Some(99_000),
            unreadable: 0,
        };
        let written = DatabaseReport {
            database: "shop".into(),
            snowid: Some("0.6.0".into()),
            columns: vec![column.clone()],
            unlisted: 3,
            highest: Some(column),
            releases: Records::Listed(ReleaseRecord {
                released: vec![(7, 1234)],
            }),
        };
        let bytes = serde_json::to_vec(&written).unwrap();
        assert_eq!(
            serde_json::from_slice::<DatabaseReport>(&bytes).unwrap(),
            written
        );
    }
}
