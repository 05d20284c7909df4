//! The resumes that lift a fence, where they cannot read everything or are given too little: a
//! resume by number on a fenced server still reads every database; the cluster-wide resume
//! changes nothing where a database cannot be read, where no background worker is free, or in
//! single-user mode; it reads inheritance children through their parent, and never reads a
//! view.
//!
//! Every server's wall clock runs 10 minutes behind the IDs already issued when it starts again,
//! so that a server that generates from its clock issues IDs below the old ones.

use snowid_integration::fences::*;
use snowid_integration::{code, one, Cluster};

/// A second database, `other`, with snowid and a table `u` keyed by `snowid_next(6)` holding
/// 1,000 rows issued after `t`'s; returns their highest ID.
fn other_database_with_rows(cluster: &Cluster) -> i64 {
    let mut other = new_database_with_snowid(
        cluster,
        "other",
        "CREATE TABLE u (id bigint PRIMARY KEY DEFAULT snowid_next(6));
         INSERT INTO u SELECT FROM generate_series(1, 1000);",
    );
    max_of(&mut other, "u")
}

/// The resume failed with `sqlstate` and a message containing `says`, and changed nothing: the
/// server still refuses to generate, as fenced.
fn refused_and_changed_nothing(
    cluster: &Cluster,
    result: Result<Vec<snowid_integration::postgres::Row>, snowid_integration::postgres::Error>,
    sqlstate: &str,
    says: &str,
    old_max: i64,
) {
    let err = match result {
        Ok(rows) => panic!(
            "the resume succeeded ({} rows) where it must refuse",
            rows.len()
        ),
        Err(err) => err,
    };
    assert_eq!(code(&err), sqlstate, "{}", describe(&err));
    assert!(
        describe(&err).contains(says),
        "the error says {says:?}: {}",
        describe(&err)
    );
    assert_refuses(cluster, 5, old_max, "after the refused resume");
}

/// Guards against a resume by number on a fenced server that trusts the number it is given
/// (every other test gives one already above the rows, so a build that skipped reading the
/// databases there would pass them): `t` (shard 5) in `postgres` and `u` (shard 6) in a second
/// database hold 1,000 keys each; the state is lost and the clock set 10 minutes behind them; a
/// superuser resumes above a stale number, an ID of an hour before the rows. Every shard's new
/// IDs are above every key of both databases.
#[test]
fn a_resume_by_number_on_a_fenced_server_reads_every_database() {
    let mut cluster = cluster_with_rows(5, 1000);
    let t_max = max_id(&mut cluster.client());
    let u_max = other_database_with_rows(&cluster);
    let highest = t_max.max(u_max);
    lose_the_state(&mut cluster, 5, t_max);
    let mut db = cluster.client();
    assert_clock_behind(&mut db, highest);
    let stale: i64 = db
        .query_one(
            "SELECT snowid_from_timestamp(snowid_timestamp($1::bigint) - interval '1 hour', 5)",
            &[&t_max],
        )
        .unwrap()
        .get(0);
    // The survey finds u's keys, dated further ahead of the set-back clock than snowid issues:
    // refused, naming them; the hint's next step gives the highest key by number.
    let err = db
        .query_one("SELECT snowid_resume_above($1::bigint)", &[&stale])
        .expect_err("a key dated 10 minutes ahead of the clock needs the superuser's word");
    assert_eq!(code(&err), "55000", "{}", describe(&err));
    assert!(
        describe(&err).contains(&format!(
            "Key {u_max}, in public.u.id of database \"other\""
        )),
        "names the highest key: {}",
        describe(&err)
    );
    assert_refuses(&cluster, 5, t_max, "after the refused resume");
    db.query_one(
        "SELECT snowid_resume_above($1::bigint)",
        &[&stale.max(t_max)],
    )
    .expect_err("still below u's key");
    db.query_one("SELECT snowid_resume_above($1::bigint)", &[&u_max])
        .unwrap_or_else(|e| panic!("resume above the key named: {}", describe(&e)));
    for shard in [5, 6, 7] {
        assert_generates_above(
            &mut db,
            shard,
            highest,
            "after a resume above a stale number",
        );
    }
}

/// Guards against a resume that lifts a fence while it could not read a database, above less
/// than that database holds: a table of database `broken` has lost its file, so its survey
/// fails; the cluster-wide resume, and a resume by number, refuse (with the error reading met,
/// naming the database) and change nothing: the server still refuses. A superuser who knows the
/// highest key there lifts the fence above it without reading that database.
#[test]
fn a_database_that_cannot_be_read_leaves_the_fence_in_place() {
    let mut cluster = cluster_with_rows(5, 1000);
    let old_max = max_id(&mut cluster.client());
    let mut broken = new_database_with_snowid(
        &cluster,
        "broken",
        "CREATE TABLE b (id bigint PRIMARY KEY DEFAULT snowid_next(8));
         INSERT INTO b SELECT FROM generate_series(1, 10);",
    );
    let file: String = one(&mut broken, "SELECT pg_relation_filepath('b')", &[]);
    let b_max = max_of(&mut broken, "b");
    drop(broken);
    cluster.stop("fast");
    cluster.remove_file(&file);
    damage(&cluster, Damage::Deleted);
    cluster.set_wall_clock_offset(BEHIND);
    start(&mut cluster);
    assert_refuses(&cluster, 5, old_max, "the state lost");
    let mut db = cluster.client();
    // The error is the one reading the table met (58P01, undefined_file), and says so.
    let says = "could not read the snowid keys of database \"broken\"";
    refused_and_changed_nothing(
        &cluster,
        db.query(
            &format!(
                "SELECT * FROM snowid_resume_above_columns(accept_ahead => '{ACCEPTED_AHEAD}')"
            ),
            &[],
        ),
        "58P01",
        says,
        old_max,
    );
    refused_and_changed_nothing(
        &cluster,
        db.query("SELECT snowid_resume_above($1::bigint)", &[&old_max]),
        "58P01",
        says,
        old_max,
    );
    // The hint's next step: a superuser who knows the highest key there lifts the fence above
    // it without reading that database, knowingly; the other databases are still read.
    let hint = db
        .query("SELECT snowid_resume_above($1::bigint)", &[&old_max])
        .expect_err("still refused");
    assert!(
        describe(&hint).contains("skip_databases => '{broken}'"),
        "{}",
        describe(&hint)
    );
    db.query(
        "SELECT snowid_resume_above($1::bigint, skip_databases => '{broken}')",
        &[&b_max],
    )
    .unwrap_or_else(|e| panic!("knowingly: {}", describe(&e)));
    assert_generates_above(
        &mut db,
        5,
        b_max,
        "after the resume without database broken",
    );
    assert_generates_above(
        &mut db,
        8,
        b_max,
        "after the resume without database broken",
    );
}

/// Guards against a resume that lifts a fence without reading the other databases when no
/// background worker can be started for them: with `max_worker_processes = 1`, held by the
/// logical replication launcher, the cluster-wide resume refuses with 53400 and changes nothing;
/// with workers to spare after a restart, it resumes.
#[test]
fn no_free_background_worker_refuses_with_53400_and_changes_nothing() {
    let mut cluster = cluster_with_rows(5, 1000);
    let old_max = max_id(&mut cluster.client());
    cluster.set("max_worker_processes", "1");
    lose_the_state(&mut cluster, 5, old_max);
    let mut db = cluster.client();
    let launchers: i64 = db
        .query_one(
            "SELECT count(*) FROM pg_stat_activity
             WHERE backend_type = 'logical replication launcher'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        launchers, 1,
        "the one worker slot is taken (the test is sharp)"
    );
    refused_and_changed_nothing(
        &cluster,
        db.query("SELECT * FROM snowid_resume_above_columns()", &[]),
        "53400",
        "could not start a background worker",
        old_max,
    );
    drop(db);
    cluster.set("max_worker_processes", "8");
    restart(&mut cluster, "fast");
    assert_refuses(&cluster, 5, old_max, "after the restart");
    let mut db = cluster.client();
    resume(&mut db, old_max);
    assert_generates_above(&mut db, 5, old_max, "after the resume");
}

/// Guards against a resume in single-user mode, where no background worker can read the other
/// databases, lifting the fence above this database alone: there the cluster-wide resume and a
/// resume by number refuse, and the next normal start is still fenced.
#[test]
fn single_user_mode_resumes_nothing() {
    let mut cluster = cluster_with_rows(5, 1000);
    let old_max = max_id(&mut cluster.client());
    lose_the_state(&mut cluster, 5, old_max);
    cluster.stop("fast");
    let out = cluster.single_user(&format!(
        "SELECT * FROM snowid_resume_above_columns();\nSELECT snowid_resume_above({old_max});\n"
    ));
    assert_eq!(
        out.matches("could not start a background worker").count(),
        2,
        "both resumes refuse in single-user mode:\n{out}"
    );
    start(&mut cluster);
    assert_refuses(
        &cluster,
        5,
        old_max,
        "the normal start after single-user mode",
    );
    let mut db = cluster.client();
    resume(&mut db, old_max);
    assert_generates_above(&mut db, 5, old_max, "after the resume");
}

/// Guards against a resume that reads only the parent of an inheritance tree (`FROM ONLY`):
/// rows inserted through a parent keyed by `snowid_next(5)` are moved by a trigger into a child
/// whose own column has no default, the old way of partitioning, so the parent itself is empty.
/// The resume lists the parent with the children's highest key and resumes above it.
#[test]
fn a_resume_reads_inheritance_children_through_their_parent() {
    let mut cluster = cluster_with_rows(5, 10);
    let mut db = cluster.client();
    db.batch_execute(
        "CREATE TABLE p (id bigint PRIMARY KEY DEFAULT snowid_next(5));
         CREATE TABLE c () INHERITS (p);
         ALTER TABLE c ALTER id DROP DEFAULT;
         CREATE FUNCTION to_child() RETURNS trigger LANGUAGE plpgsql AS
             $$ BEGIN INSERT INTO c VALUES (NEW.*); RETURN NULL; END $$;
         CREATE TRIGGER to_child BEFORE INSERT ON p FOR EACH ROW EXECUTE FUNCTION to_child();
         INSERT INTO p SELECT FROM generate_series(1, 1000);",
    )
    .unwrap();
    let in_parent: i64 = one(&mut db, "SELECT count(*) FROM ONLY p", &[]);
    assert_eq!(
        in_parent, 0,
        "every row is in the child (the test is sharp)"
    );
    let child_max = max_of(&mut db, "c");
    assert!(child_max > max_id(&mut db));
    drop(db);
    lose_the_state(&mut cluster, 5, child_max);
    let mut db = cluster.client();
    let rows = resume_rows(&mut db);
    assert!(
        rows.contains(&key_column("postgres", "public.p", child_max)),
        "the parent is read with its children: {rows:?}"
    );
    assert_generates_above(&mut db, 5, child_max, "after the resume");
}

/// Guards against a resume that reads a view, which would run code the view's owner wrote as
/// the superuser: a view whose column has a `snowid_next` default selects a function that fails
/// when it runs. The resume succeeds, lists the table and not the view, and the function never
/// ran.
#[test]
fn a_resume_does_not_read_views() {
    let mut cluster = cluster_with_rows(5, 1000);
    let old_max = max_id(&mut cluster.client());
    cluster
        .client()
        .batch_execute(
            "CREATE FUNCTION trap() RETURNS bigint LANGUAGE plpgsql AS
                 $$ BEGIN RAISE EXCEPTION 'the view was read'; END $$;
             CREATE VIEW v AS SELECT trap() AS id;
             ALTER VIEW v ALTER COLUMN id SET DEFAULT snowid_next(5);",
        )
        .unwrap();
    lose_the_state(&mut cluster, 5, old_max);
    let mut db = cluster.client();
    resume(&mut db, old_max);
    assert_generates_above(&mut db, 5, old_max, "after the resume");
}

/// The statement a refusal's hint gives (its last `SELECT ...;` that resumes), with `<that ID>`
/// replaced by `that_id`: what a superuser who follows the hint word for word runs.
fn hint_statement(err: &snowid_integration::postgres::Error, that_id: i64) -> String {
    let hint = err
        .as_db_error()
        .and_then(|e| e.hint())
        .unwrap_or_else(|| panic!("a hint: {}", describe(err)));
    let start = hint
        .rfind("SELECT snowid_resume_above(")
        .or_else(|| hint.rfind("SELECT * FROM snowid_resume_above_columns("))
        .unwrap_or_else(|| panic!("the hint names a resume: {hint}"));
    let end = start + hint[start..].find(");").expect("the statement ends") + 2;
    hint[start..end].replace("<that ID>", &that_id.to_string())
}

/// Issue 51, item 2. Guards against a hint that leads below (0.7.0: with a text key holding one
/// value that is not an ID (`'n/a'`) and a readable bigint key holding the newest keys in
/// database `app`, the refusal named only the text key, and its hint ("find the highest snowid
/// ID among them yourself ... skip_databases => '{app}'") left out every column of `app`:
/// followed word for word, 1,000 of 1,000 new IDs were at or below the bigint key's highest).
/// The bigint key's highest is minutes past the text key's, so that no ID issued after a resume
/// above the text key's highest can pass it by the time it is checked.
/// Every hint of every refusal, followed word for word (`<that ID>` the highest ID among the
/// values of the column it could not read, which a superuser finds by hand), lifts the fence
/// above every key: here after the unreadable key's hint, and again after a second lost state
/// where the hint leads to a key dated ahead of the clock, whose own hint keeps the first one's
/// databases and number.
#[test]
fn every_hint_followed_word_for_word_lifts_the_fence_above_every_key() {
    let mut cluster = cluster_with_rows(5, 100);
    let mut app = new_database_with_snowid(
        &cluster,
        "app",
        "CREATE TABLE tt (id text DEFAULT snowid_text(snowid_next(6)));
         INSERT INTO tt SELECT FROM generate_series(1, 100);
         INSERT INTO tt VALUES ('n/a');
         CREATE TABLE tb (id bigint PRIMARY KEY DEFAULT snowid_next(7));
         INSERT INTO tb SELECT FROM generate_series(1, 100);
         INSERT INTO tb VALUES
             (snowid_from_timestamp(clock_timestamp() + interval '5 minutes', 7));",
    );
    let tt_max: i64 = one(
        &mut app,
        "SELECT max(id::bigint) FROM tt WHERE id ~ '^[0-9]+$'",
        &[],
    );
    let tb_max = max_of(&mut app, "tb");
    assert!(
        tb_max > tt_max,
        "the readable key is the newest (the test is sharp)"
    );
    drop(app);
    lose_the_state(&mut cluster, 5, tb_max);
    let mut db = cluster.client();
    let err = db
        .query("SELECT * FROM snowid_resume_above_columns()", &[])
        .expect_err("tt holds a value that is not an ID");
    assert_eq!(code(&err), "55000", "{}", describe(&err));
    let follow = hint_statement(&err, tt_max);
    db.query(&follow, &[])
        .unwrap_or_else(|e| panic!("{follow}: {}", describe(&e)));
    for shard in [5, 6, 7] {
        assert_generates_above(&mut db, shard, tb_max, &format!("after {follow}"));
    }
    // New keys in postgres, newer than app's; the state lost again, the clock behind them.
    db.batch_execute("INSERT INTO t SELECT FROM generate_series(1, 100)")
        .unwrap();
    let t_max = max_id(&mut db);
    drop(db);
    lose_the_state(&mut cluster, 5, t_max);
    let mut db = cluster.client();
    let err = db
        .query("SELECT * FROM snowid_resume_above_columns()", &[])
        .expect_err("tt still holds a value that is not an ID");
    let follow = hint_statement(&err, tt_max);
    let err = db
        .query(&follow, &[])
        .expect_err("t's highest key is dated ahead of the clock");
    assert!(
        describe(&err).contains(&format!("Key {t_max}")),
        "{}",
        describe(&err)
    );
    let follow = hint_statement(&err, tt_max);
    db.query(&follow, &[])
        .unwrap_or_else(|e| panic!("{follow}: {}", describe(&e)));
    for shard in [5, 6, 7] {
        assert_generates_above(
            &mut db,
            shard,
            t_max.max(tb_max),
            &format!("after {follow}"),
        );
    }
}
