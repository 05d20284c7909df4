//! What the resume that lifts a fence reads, and where it refuses rather than lift a fence below
//! keys it could not see: every column whose default calls `snowid_next` inside any expression
//! (text keys from `snowid_text(snowid_next(5))` included), every column of a domain whose
//! default calls it, but not rows of prepared transactions (it refuses while there are any),
//! not values that are not IDs (it refuses, naming the column), and not a key dated far ahead
//! of the clock (it refuses, naming it, unless that key is given by number).
//!
//! Every server's wall clock runs 10 minutes behind the IDs already issued when it starts again,
//! so that a server that generates from its clock issues IDs below the old ones.

use snowid_integration::fences::*;
use snowid_integration::postgres::Client;
use snowid_integration::{code, one, Cluster};

/// The highest key of a text column, as an ID.
fn max_text_key(db: &mut Client, table: &str) -> i64 {
    db.query_one(&format!("SELECT max(k)::bigint FROM {table}"), &[])
        .unwrap()
        .get(0)
}

/// Row 4. Guards against keys stored as text going unseen (0.5.0 read `bigint` columns only:
/// after the hint's resume, which found one column, 1,000 of 1,000 new keys were at or below
/// the text keys written a second after the bigint ones). A domain over `bigint` whose default
/// calls `snowid_next`, with no default on the column, is read too.
#[test]
fn the_resume_reads_text_keys_and_domains() {
    let mut cluster = cluster_with_rows(5, 1000);
    let mut db = cluster.client();
    std::thread::sleep(std::time::Duration::from_secs(1));
    db.batch_execute(
        "CREATE TABLE tk (k text PRIMARY KEY DEFAULT snowid_text(snowid_next(5)));
         INSERT INTO tk SELECT FROM generate_series(1, 1000);",
    )
    .unwrap();
    let text_max = max_text_key(&mut db, "tk");
    std::thread::sleep(std::time::Duration::from_millis(50));
    db.batch_execute(
        "CREATE DOMAIN sid AS bigint DEFAULT snowid_next(6);
         CREATE TABLE td (id sid PRIMARY KEY, note text);
         INSERT INTO td (note) SELECT 'x' FROM generate_series(1, 1000);",
    )
    .unwrap();
    let domain_max = max_of(&mut db, "td");
    assert!(domain_max > text_max && text_max > max_id(&mut db));
    drop(db);
    lose_the_state(&mut cluster, 5, text_max);
    let (mut db, notices) = cluster.client_recording_notices();
    assert_clock_behind(&mut db, text_max);
    let rows = resume_rows(&mut db);
    // The key that set the floor is dated 10 minutes ahead of this server's clock, further than
    // snowid issues ahead of it: the resume names it.
    let named = notices.lock().unwrap().iter().any(|n| {
        n.contains(&format!("above {domain_max}, the highest key")) && n.contains("public.td.id")
    });
    assert!(
        named,
        "a NOTICE names the key: {:?}",
        notices.lock().unwrap()
    );
    for expected in [
        (
            "postgres".to_string(),
            Some("public.tk".to_string()),
            Some("k".to_string()),
            Some(text_max),
        ),
        key_column("postgres", "public.td", domain_max),
    ] {
        assert!(rows.contains(&expected), "{expected:?} not in {rows:?}");
    }
    assert_generates_above(&mut db, 5, domain_max, "after the resume");
    db.batch_execute("INSERT INTO tk SELECT FROM generate_series(1, 1000)")
        .unwrap();
    let below: i64 = db
        .query_one(
            "SELECT count(*) FROM tk WHERE k::bigint <= $1 AND k::bigint > $2",
            &[&text_max, &0i64],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        below, 1000,
        "the 1,000 old text keys, and no new one below them"
    );
}

/// Guards against a resume that lifts a fence below keys it cannot read: a text column whose
/// default wraps the ID in more than digits. The resume refuses (55000), naming the column;
/// nothing changes; the ID given by number resumes.
#[test]
fn the_resume_refuses_keys_it_cannot_read() {
    let mut cluster = cluster_with_rows(5, 10);
    let mut db = cluster.client();
    db.batch_execute(
        "CREATE TABLE orders (k text PRIMARY KEY DEFAULT 'order-' || snowid_next(5));
         INSERT INTO orders SELECT FROM generate_series(1, 1000);",
    )
    .unwrap();
    let hidden: i64 = one(&mut db, "SELECT max(substr(k, 7)::bigint) FROM orders", &[]);
    drop(db);
    lose_the_state(&mut cluster, 5, hidden);
    let mut db = cluster.client();
    let err = db
        .query("SELECT * FROM snowid_resume_above_columns()", &[])
        .expect_err("values that are not IDs");
    assert_eq!(code(&err), "55000", "{}", describe(&err));
    let e = err.as_db_error().unwrap();
    assert!(
        e.detail().unwrap_or("").contains("public.orders.k"),
        "the column is named: {}",
        describe(&err)
    );
    assert_refuses(&cluster, 5, hidden, "after the refusal");
    let err = db
        .query_one("SELECT snowid_resume_above($1)", &[&hidden])
        .expect_err("a fenced server's resume reads every database, and refuses too");
    assert_eq!(code(&err), "55000", "{}", describe(&err));
    db.batch_execute("ALTER TABLE orders ALTER k SET DEFAULT 'order-' || snowid_text(1)")
        .unwrap();
    db.query_one("SELECT snowid_resume_above($1)", &[&hidden])
        .unwrap_or_else(|e| panic!("by number, once the column is no key: {}", describe(&e)));
    assert_generates_above(&mut db, 5, hidden, "resumed by number");
}

/// Row 5. Guards against rows of a prepared transaction, invisible to every survey (0.5.0: after
/// the hint's resume and `COMMIT PREPARED`, 1,000 of 1,000 new IDs were at or below the prepared
/// ones). The resume refuses while the transaction is prepared, naming it; once committed, the
/// resume reads its rows and every new ID is above them.
#[test]
fn the_resume_refuses_while_a_transaction_is_prepared() {
    let mut cluster = Cluster::init_preloaded_with_fake_clock();
    cluster.set("max_prepared_transactions", "5");
    start(&mut cluster);
    let mut db = cluster.client();
    db.batch_execute(
        "CREATE EXTENSION snowid;
         CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowid_next(5));
         INSERT INTO t SELECT FROM generate_series(1, 1000);",
    )
    .unwrap();
    db.batch_execute(
        "BEGIN;
         INSERT INTO t SELECT FROM generate_series(1, 1000);
         PREPARE TRANSACTION 'held';",
    )
    .unwrap();
    let visible_max = max_id(&mut db);
    drop(db);
    lose_the_state(&mut cluster, 5, visible_max);
    let mut db = cluster.client();
    let err = db
        .query("SELECT * FROM snowid_resume_above_columns()", &[])
        .expect_err("a prepared transaction");
    assert_eq!(code(&err), "55000", "{}", describe(&err));
    let e = err.as_db_error().unwrap();
    assert_eq!(
        e.message(),
        "snowid cannot resume while transactions are prepared"
    );
    assert!(
        e.detail().unwrap_or("").contains("'held'"),
        "the transaction is named: {}",
        describe(&err)
    );
    assert_refuses(&cluster, 5, visible_max, "after the refusal");
    db.batch_execute("COMMIT PREPARED 'held'").unwrap();
    let prepared_max = max_id(&mut db);
    assert!(prepared_max > visible_max);
    assert_clock_behind(&mut db, prepared_max);
    resume(&mut db, prepared_max);
    assert_generates_above(&mut db, 5, prepared_max, "after the resume");
}

/// Item 7. Guards against a key planted far ahead re-dating the cluster (0.5.0: a database owner,
/// no superuser, installed snowid and stored a key dated 23 hours ahead; after a lost state the
/// hint's resume moved every shard's time base 23 hours ahead, and nothing said why). The
/// resume refuses, naming the database, table, column and key; the superuser who decides the
/// key is genuine resumes above it by number.
#[test]
fn a_key_dated_far_ahead_is_named_and_needs_a_superuser_to_decide() {
    let mut cluster = cluster_with_rows(5, 100);
    let old_max = max_id(&mut cluster.client());
    let mut db = cluster.client();
    db.batch_execute("CREATE ROLE owner LOGIN").unwrap();
    db.batch_execute("CREATE DATABASE owned OWNER owner")
        .unwrap();
    drop(db);
    let mut owned = snowid_integration::postgres::Config::new()
        .host("127.0.0.1")
        .port(cluster.port)
        .user("owner")
        .dbname("owned")
        .connect(snowid_integration::postgres::NoTls)
        .unwrap();
    owned
        .batch_execute(
            "CREATE EXTENSION snowid;
             CREATE TABLE planted (id bigint PRIMARY KEY DEFAULT snowid_next(5));
             INSERT INTO planted VALUES (snowid_from_timestamp(now() + interval '23 hours', 5));",
        )
        .unwrap();
    let planted = max_of(&mut owned, "planted");
    drop(owned);
    lose_the_state(&mut cluster, 5, old_max);
    let mut db = cluster.client();
    let err = db
        .query("SELECT * FROM snowid_resume_above_columns()", &[])
        .expect_err("a key 23 hours ahead");
    assert_eq!(code(&err), "55000", "{}", describe(&err));
    let e = err.as_db_error().unwrap();
    assert!(e.message().contains("hours ahead"), "{}", describe(&err));
    let detail = e.detail().unwrap_or("");
    assert!(
        detail.contains("public.planted.id")
            && detail.contains("\"owned\"")
            && detail.contains(&planted.to_string()),
        "the key and where it is: {}",
        describe(&err)
    );
    assert!(
        e.hint()
            .unwrap_or("")
            .contains(&format!("snowid_resume_above({planted})")),
        "{}",
        describe(&err)
    );
    assert_refuses(&cluster, 5, old_max, "after the refusal");
    db.query_one("SELECT snowid_resume_above($1)", &[&planted])
        .unwrap_or_else(|e| panic!("by number: {}", describe(&e)));
    assert_generates_above(&mut db, 5, planted, "the superuser decided");
}

/// Guards against a cap on what one database can answer (0.6.0: a worker's report was capped at
/// 256 KiB, so a database with many key columns made every resume from another database refuse).
/// A database with 2,000 key tables under long names, more than 300 KiB of answer, is read whole:
/// every table is listed, at its highest key.
#[test]
fn a_database_with_thousands_of_key_columns_is_read_whole() {
    let mut cluster = cluster_with_rows(5, 10);
    let old_max = max_id(&mut cluster.client());
    let mut many = new_database_with_snowid(
        &cluster,
        "many",
        "DO $$
         BEGIN
             FOR i IN 1..2000 LOOP
                 EXECUTE pg_catalog.format(
                     'CREATE TABLE %I (id bigint PRIMARY KEY DEFAULT snowid_next(6));
                      INSERT INTO %I DEFAULT VALUES',
                     'a_table_with_a_name_long_enough_to_fill_the_answer_' || i,
                     'a_table_with_a_name_long_enough_to_fill_the_answer_' || i);
             END LOOP;
         END $$;",
    );
    let highest: i64 = many
        .query_one(
            "SELECT max(id) FROM a_table_with_a_name_long_enough_to_fill_the_answer_2000",
            &[],
        )
        .unwrap()
        .get(0);
    drop(many);
    lose_the_state(&mut cluster, 5, old_max);
    let rows = resume_rows(&mut cluster.client());
    let listed = rows.iter().filter(|r| r.0 == "many").count();
    assert_eq!(listed, 2000, "every key table of database many is listed");
    assert!(
        rows.contains(&(
            "many".into(),
            Some("public.a_table_with_a_name_long_enough_to_fill_the_answer_2000".into()),
            Some("id".into()),
            Some(highest)
        )),
        "at its highest key"
    );
    assert_generates_above(&mut cluster.client(), 6, highest, "after the resume");
}

/// Issue 51, item 1. Guards against a table read as empty because it changed while the resume
/// waited for its lock (0.7.0: a rewrite by `ALTER TABLE ... ALTER COLUMN ... TYPE`, or a
/// `TRUNCATE` and a refill, committed while `snowid_resume_above_columns()` waited; the worker
/// read with the snapshot it took before it waited, saw no row, listed `max_id` NULL, lifted the
/// fence, and 1,000 of 1,000 new IDs were at or below the old highest). Four sessions hold their
/// change open while the resume waits, then commit: a column's type rewritten (`t1`), a table
/// truncated and refilled from a copy (`t2`), a table replaced by a new one with its rows (`t3`
/// by `t4`, created after the resume began), and a partition swapped for a table holding its rows
/// (under `p`). Each is read whole, at its highest key, and every shard's new IDs are above them.
#[test]
fn tables_rewritten_or_refilled_while_the_resume_waits_are_read_whole() {
    let mut cluster = cluster_with_rows(5, 100);
    let mut db = cluster.client();
    db.batch_execute(
        "CREATE TABLE t1 (id bigint PRIMARY KEY DEFAULT snowid_next(6), n int);
         CREATE TABLE t2 (id bigint PRIMARY KEY DEFAULT snowid_next(7));
         CREATE TABLE t3 (id bigint PRIMARY KEY DEFAULT snowid_next(8));
         CREATE TABLE p (id bigint DEFAULT snowid_next(9)) PARTITION BY RANGE (id);
         CREATE TABLE p_all PARTITION OF p FOR VALUES FROM (MINVALUE) TO (MAXVALUE);
         INSERT INTO t1 (n) SELECT i FROM generate_series(1, 1000) i;
         INSERT INTO t2 SELECT FROM generate_series(1, 1000);
         INSERT INTO t3 SELECT FROM generate_series(1, 1000);
         INSERT INTO p SELECT FROM generate_series(1, 1000);
         CREATE TABLE t2_copy AS SELECT * FROM t2;
         CREATE TABLE p_copy AS SELECT * FROM p;",
    )
    .unwrap();
    let highest: Vec<(&str, i64)> = ["t1", "t2", "t3", "p"]
        .into_iter()
        .map(|t| (t, max_of(&mut db, t)))
        .collect();
    let old_max = highest.iter().map(|(_, m)| *m).max().unwrap();
    drop(db);
    lose_the_state(&mut cluster, 6, old_max);
    let changes = [
        "ALTER TABLE t1 ALTER COLUMN n TYPE bigint",
        "TRUNCATE t2; INSERT INTO t2 SELECT * FROM t2_copy",
        "CREATE TABLE t4 (LIKE t3 INCLUDING ALL); INSERT INTO t4 SELECT * FROM t3; DROP TABLE t3",
        "ALTER TABLE p DETACH PARTITION p_all; DROP TABLE p_all;
         ALTER TABLE p ATTACH PARTITION p_copy FOR VALUES FROM (MINVALUE) TO (MAXVALUE)",
    ];
    let mut sessions: Vec<Client> = changes
        .iter()
        .map(|change| {
            let mut session = cluster.client();
            session
                .batch_execute(&format!("BEGIN; {change};"))
                .unwrap_or_else(|e| panic!("{change}: {}", describe(&e)));
            session
        })
        .collect();
    let port = cluster.port;
    let resume =
        std::thread::spawn(move || resume_rows(&mut connect_to(port, "postgres", "postgres")));
    let mut watch = cluster.client();
    snowid_integration::wait_for(
        &mut watch,
        "the resume waits for a table's lock",
        "SELECT count(*) > 0 FROM pg_stat_activity \
                     WHERE backend_type = 'snowid' AND wait_event_type = 'Extension'",
    );
    for session in &mut sessions {
        session.batch_execute("COMMIT").unwrap();
    }
    let rows = resume.join().unwrap();
    for (table, max) in [
        ("public.t1", highest[0].1),
        ("public.t2", highest[1].1),
        ("public.t4", highest[2].1),
        ("public.p", highest[3].1),
    ] {
        assert!(
            rows.contains(&key_column("postgres", table, max)),
            "{table} is read at its highest key {max}: {rows:?}"
        );
    }
    let mut db = cluster.client();
    for shard in 5..=9 {
        assert_generates_above(&mut db, shard, old_max, "after the resume");
    }
}

/// Guards against a read of the highest key that ignores an index's direction, or takes it from
/// a partial index (either would return a key below the highest: the lowest, or the highest of
/// the rows the predicate keeps). `td`'s only index on its key is descending, with nulls in the
/// column; `tp`'s only one is partial, over its older half. Each is listed at its highest key.
#[test]
fn the_highest_key_comes_from_a_descending_index_and_never_from_a_partial_one() {
    let mut cluster = cluster_with_rows(5, 10);
    let mut db = cluster.client();
    db.batch_execute(
        "CREATE TABLE td (id bigint DEFAULT snowid_next(6));
         CREATE INDEX td_desc ON td (id DESC);
         INSERT INTO td SELECT FROM generate_series(1, 1000);
         INSERT INTO td VALUES (NULL), (NULL);
         CREATE TABLE tp (id bigint DEFAULT snowid_next(7));
         INSERT INTO tp SELECT FROM generate_series(1, 1000);",
    )
    .unwrap();
    let middle: i64 = one(
        &mut db,
        "SELECT id FROM tp ORDER BY id OFFSET 500 LIMIT 1",
        &[],
    );
    db.batch_execute(&format!(
        "CREATE INDEX tp_older ON tp (id) WHERE id < {middle}; ANALYZE td, tp;"
    ))
    .unwrap();
    let (td_max, tp_max) = (max_of(&mut db, "td"), max_of(&mut db, "tp"));
    drop(db);
    lose_the_state(&mut cluster, 6, td_max.max(tp_max));
    let rows = resume_rows(&mut cluster.client());
    for (table, max) in [("public.td", td_max), ("public.tp", tp_max)] {
        assert!(
            rows.contains(&key_column("postgres", table, max)),
            "{table} is listed at its highest key {max}: {rows:?}"
        );
    }
}
