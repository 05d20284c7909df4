//! The steps an operator takes after a fence, a release, an upgrade or a promotion, and the steps
//! after those: a release after a resume, a resume in one database of several, a trial of the new
//! cluster before `pg_upgrade`, an upgrade of a cluster that never installed snowid, the
//! statement a promoted server runs, the promotion margin, a database dropped before the state
//! was lost, and uninstalling. Each must refuse (55000, with the hint) or stay above every
//! earlier ID, also after the step that follows it; a released shard stays released whatever
//! is resumed.
//!
//! Every server's wall clock runs 10 minutes behind the IDs already issued when it starts again,
//! so that a server that generates from its clock issues IDs below the old ones.

use snowid_integration::fences::*;
use snowid_integration::postgres::Client;
use snowid_integration::{code, one, Cluster, OldInstallScripts};

/// A preloaded primary (with `settings`) with a table `t` keyed by `snowid_next(key_shard)` and
/// shard `released` released, and its streaming standby, started.
fn primary_and_standby(
    settings: &[(&str, &str)],
    key_shard: i32,
    released: i32,
) -> (Cluster, Cluster) {
    let primary = Cluster::preloaded(settings);
    primary
        .client()
        .batch_execute(&format!(
            "CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowid_next({key_shard}));
             INSERT INTO t SELECT FROM generate_series(1, 100);
             SELECT snowid_release({released});"
        ))
        .unwrap();
    let mut standby = Cluster::base_backup_of(&primary, true);
    start(&mut standby);
    (primary, standby)
}

/// How far an ID's timestamp is ahead of the server's clock, in seconds.
fn seconds_ahead(db: &mut Client, id: i64) -> f64 {
    db.query_one(
        "SELECT extract(epoch FROM snowid_timestamp($1::bigint) - clock_timestamp())::float8",
        &[&id],
    )
    .unwrap()
    .get(0)
}

/// Row 1 of the fence's next steps. Guards against a release after the hint's resume returning
/// an ID below the shard's own (0.4.0 returned 7168, shard 7 at the epoch, because the resume
/// moved only the counter of the shard its ID named, and B, resuming above it, issued 1,000 of
/// 1,000 IDs below A's): A issues for shards 7 and then 8; its state is lost; it refuses; the
/// hint's statement resumes it; `snowid_release(7)` returns an ID at or above every shard-7 ID A
/// issued, and B, its clock behind, issues above them. Then A is restarted twice: shard 7 stays
/// released, shard 8 generates above its old IDs.
#[test]
fn a_release_after_the_hints_resume_returns_an_id_above_the_shards_own() {
    let mut a = cluster_with_rows(8, 10);
    a.client()
        .batch_execute(
            "CREATE TABLE t7 (id bigint PRIMARY KEY DEFAULT snowid_next(7));
             INSERT INTO t7 SELECT FROM generate_series(1, 1000);
             INSERT INTO t SELECT FROM generate_series(1, 1000);",
        )
        .unwrap();
    let (a7_max, a8_max) = {
        let mut db = a.client();
        (max_of(&mut db, "t7"), max_id(&mut db))
    };
    assert!(a8_max > a7_max, "shard 8 was issued last");
    a.stop("fast");
    damage(&a, Damage::Deleted);
    a.set_wall_clock_offset(BEHIND);
    start(&mut a);
    assert_refuses(&a, 8, a8_max, "the state lost");
    let rows = resume_rows(&mut a.client());
    assert_eq!(
        rows,
        [
            key_column("postgres", "public.t", a8_max),
            key_column("postgres", "public.t7", a7_max)
        ]
    );
    hand_off(&a, 7, a7_max);
    for round in 1..=2 {
        restart(&mut a, "fast");
        let mut db = a.client();
        assert_released(&mut db, 7, &format!("A after restart {round}"));
        assert_generates_above(&mut db, 8, a8_max, &format!("A after restart {round}"));
    }
}

/// Row 2. Guards against the same after `pg_upgrade` resumed by the operations docs' other route, a
/// number read on the old cluster (`snowid_from_timestamp(high_water_mark, 8191, 1023)`) passed
/// to `snowid_resume_above` (0.4.0: `snowid_release(7)` then returned 7168): the release returns
/// an ID at or above the old cluster's shard-7 IDs, and B issues above them.
#[test]
fn a_release_after_a_resume_by_hand_on_an_upgraded_cluster_is_above_the_old_ids() {
    if !has_pg_upgrade(
        "a_release_after_a_resume_by_hand_on_an_upgraded_cluster_is_above_the_old_ids",
    ) {
        return;
    }
    let (mut old, mut new, old_max) = clusters_to_upgrade(Cluster::init(), 7);
    start(&mut old);
    let mark: i64 = old
        .client()
        .query_one(
            "SELECT snowid_from_timestamp(high_water_mark, 8191, 1023) FROM snowid_info()",
            &[],
        )
        .unwrap()
        .get(0);
    old.stop("fast");
    new.pg_upgrade_from(&old, false);
    start(&mut new);
    assert_refuses(&new, 7, old_max, "the upgraded cluster");
    new.client()
        .query_one("SELECT snowid_resume_above($1)", &[&mark])
        .unwrap_or_else(|e| panic!("resume by hand: {}", describe(&e)));
    hand_off(&new, 7, old_max);
    restart(&mut new, "fast");
    assert_released(&mut new.client(), 7, "after a restart");
}

/// Row 3. Guards against a creation cut short after `pg_upgrade` starting fresh (0.4.0: the
/// databases on 0.3.0's SQL left only a mark, which a zeroed `global/9128`, as a crash while the
/// state was first created leaves it, made it ignore and remove, and 1,000 of 1,000 new IDs were
/// below the old cluster's). The old cluster's database is on 0.3.0's SQL; after the upgrade the
/// new cluster's state file is zeroed. The new cluster refuses, `CREATE EXTENSION` in a new
/// database refuses too, across two restarts; the update to this version's SQL works while
/// fenced; the hint's statement, which asks for the released shards (nothing before 0.6.0 records
/// them), resumes above the old IDs once told that none were released.
#[test]
fn a_zeroed_state_after_pg_upgrade_from_0_3_0_sql_stays_fenced() {
    if !has_pg_upgrade("a_zeroed_state_after_pg_upgrade_from_0_3_0_sql_stays_fenced") {
        return;
    }
    let scripts = OldInstallScripts::place();
    let (old, mut new, old_max) = clusters_to_upgrade_from(
        Cluster::init(),
        "CREATE EXTENSION snowid VERSION '0.3.0'",
        1,
    );
    drop(scripts);
    new.pg_upgrade_from(&old, false);
    let bytes = std::fs::read(new.pgdata().join(STATE)).expect("pg_upgrade left a state");
    new.put_file(STATE, &vec![0; bytes.len()]);
    start(&mut new);
    assert_refuses(&new, 1, old_max, "zeroed after pg_upgrade");
    new.client().batch_execute("CREATE DATABASE other").unwrap();
    let mut other = new.client_of("other");
    other.batch_execute("CREATE EXTENSION snowid").unwrap();
    let err = other
        .query_one("SELECT snowid_next(1)", &[])
        .expect_err("a new database's first generation is fenced too");
    assert_fence_error(&err, "CREATE EXTENSION in a new database");
    drop(other);
    for round in 1..=2 {
        restart(&mut new, "fast");
        assert_refuses(&new, 1, old_max, &format!("after restart {round}"));
    }
    let mut db = new.client();
    db.batch_execute("ALTER EXTENSION snowid UPDATE").unwrap();
    let err = db
        .query(RESUME, &[])
        .expect_err("the released shards of a 0.3.0 cluster are unknown");
    assert_eq!(
        err.as_db_error().map(|e| e.message()),
        Some("snowid cannot tell which shards this cluster released"),
        "{}",
        describe(&err)
    );
    let rows: Vec<KeyColumn> = db
        .query(
            &format!(
                "SELECT * FROM snowid_resume_above_columns(released => '{{}}', \
                 accept_ahead => '{ACCEPTED_AHEAD}')"
            ),
            &[],
        )
        .unwrap_or_else(|e| panic!("resuming: {}", describe(&e)))
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    assert!(
        rows.contains(&key_column("postgres", "public.t", old_max)),
        "{rows:?}"
    );
    assert_generates_above(&mut db, 1, old_max, "once resumed");
    assert_generates_above(&mut new.client_of("other"), 1, old_max, "the new database");
}

/// Row 4. Guards against a trial of the new cluster taken for its state (0.4.0: `CREATE
/// EXTENSION`, one ID and `DROP EXTENSION` in the new cluster before `pg_upgrade` left a state
/// that the upgraded cluster loaded unfenced, and 1,000 of 1,000 IDs were below the old
/// cluster's). Both ways `pg_upgrade` meets snowid are run: with snowid preloaded in the new
/// cluster during the upgrade, and without (added after it). The upgraded cluster refuses
/// across two restarts until the hint's statement resumes it; then a release returns an ID above
/// the old ones.
#[test]
fn a_trial_of_the_new_cluster_before_pg_upgrade_does_not_lift_the_fence() {
    if !has_pg_upgrade("a_trial_of_the_new_cluster_before_pg_upgrade_does_not_lift_the_fence") {
        return;
    }
    for preloaded_during_upgrade in [true, false] {
        let when = |what: &str| {
            format!("{what} (preloaded during the upgrade: {preloaded_during_upgrade})")
        };
        let (old, mut new, old_max) = clusters_to_upgrade(Cluster::init(), 1);
        start(&mut new);
        new.client()
            .batch_execute(
                "CREATE EXTENSION snowid;
                 SELECT snowid_next(1);
                 DROP EXTENSION snowid;",
            )
            .unwrap();
        new.stop("fast");
        if !preloaded_during_upgrade {
            new.set("shared_preload_libraries", "''");
        }
        new.pg_upgrade_from(&old, false);
        new.set("shared_preload_libraries", "'snowid'");
        start(&mut new);
        assert_refuses(&new, 1, old_max, &when("after the upgrade"));
        for round in 1..=2 {
            restart(&mut new, "fast");
            assert_refuses(&new, 1, old_max, &when(&format!("after restart {round}")));
        }
        let mut db = new.client();
        resume(&mut db, old_max);
        assert_generates_above(&mut db, 1, old_max, &when("once resumed"));
        drop(db);
        hand_off(&new, 1, old_max);
    }
}

/// Row 5, and rows that come in through a parent. Guards against a resume that sees one
/// database (0.4.0 lifted the fence for the whole cluster with what the database it ran in held,
/// and the other database then issued 1,000 of 1,000 IDs below its own). Database `postgres`
/// holds `t` (shard 1); database `other`, which refuses connections, holds the highest IDs, in a
/// partition with no default of its own, reached through a partitioned parent keyed by
/// `snowid_next(2)`, and in a table a `snowid_fill_id` trigger fills. The state is lost; the
/// hint's statement, run in `postgres`, lists and resumes above both databases; both generate
/// above their own IDs, also after two restarts.
#[test]
fn a_resume_in_one_database_lifts_the_fence_above_every_database() {
    let mut cluster = cluster_with_rows(1, 1000);
    let t_max = max_id(&mut cluster.client());
    let mut other = new_database_with_snowid(
        &cluster,
        "other",
        "CREATE TABLE p (id bigint NOT NULL DEFAULT snowid_next(2), at int NOT NULL)
                 PARTITION BY RANGE (at);
             CREATE TABLE p1 (id bigint NOT NULL, at int NOT NULL);
             ALTER TABLE p ATTACH PARTITION p1 FOR VALUES FROM (0) TO (100);
             INSERT INTO p (at) SELECT 1 FROM generate_series(1, 1000);
             CREATE TABLE filled (id bigint PRIMARY KEY, user_id bigint NOT NULL);
             CREATE TRIGGER filled_id BEFORE INSERT ON filled
                 FOR EACH ROW EXECUTE FUNCTION snowid_fill_id('id', 'user_id');
             INSERT INTO filled (user_id) SELECT 42 FROM generate_series(1, 1000);",
    );
    let p_max = max_of(&mut other, "p");
    let filled_max = max_of(&mut other, "filled");
    let fill_shard: i32 = one(&mut other, "SELECT snowid_shard_for(42)", &[]);
    drop(other);
    assert!(
        p_max > t_max && filled_max > p_max,
        "the other database issued last"
    );
    cluster
        .client()
        .batch_execute("ALTER DATABASE other ALLOW_CONNECTIONS false")
        .unwrap();
    cluster.stop("fast");
    damage(&cluster, Damage::Deleted);
    cluster.set_wall_clock_offset(BEHIND);
    start(&mut cluster);
    assert_refuses(&cluster, 1, t_max, "the state lost");
    let rows = resume_rows(&mut cluster.client());
    for expected in [
        key_column("postgres", "public.t", t_max),
        key_column("other", "public.p", p_max),
        key_column("other", "public.filled", filled_max),
    ] {
        assert!(rows.contains(&expected), "{expected:?} not in {rows:?}");
    }
    cluster
        .client()
        .batch_execute("ALTER DATABASE other ALLOW_CONNECTIONS true")
        .unwrap();
    for round in 0..=2 {
        if round > 0 {
            restart(&mut cluster, "fast");
        }
        let when = format!("once resumed, restart {round}");
        let mut other = cluster.client_of("other");
        assert_generates_above(&mut other, 2, p_max, &when);
        assert_generates_above(&mut other, fill_shard, filled_max, &when);
        other
            .batch_execute(
                "INSERT INTO p (at) VALUES (2); INSERT INTO filled (user_id) VALUES (42)",
            )
            .unwrap();
        assert_generates_above(&mut cluster.client(), 1, t_max, &when);
    }
}

/// Row 6. Guards against the operations docs' statement for a promoted server taking back a shard
/// that was handed off (0.4.0: `snowid_resume_above(snowid_from_timestamp(now() + interval '3
/// seconds', 8191, 1023))` took shard 8191 back, and the server generated for it while its new
/// owner did too). Shard 8191 is released on the primary, whose `snowid.shards` still lists it;
/// the statement is run there, and on its standby once promoted: 8191 stays released through
/// both, and through two restarts.
#[test]
fn the_statement_for_a_promoted_server_leaves_a_released_shard_released() {
    const STATEMENT: &str = "SELECT snowid_resume_above(snowid_from_timestamp(now() + interval '3 seconds', 8191, 1023))";
    let (mut primary, mut standby) = primary_and_standby(&[], 8191, 8191);
    let (mut db, notices) = primary.client_recording_notices();
    db.batch_execute(STATEMENT).unwrap();
    assert!(
        notices
            .lock()
            .unwrap()
            .iter()
            .any(|n| n.contains("snowid shard 8191 stays released")),
        "the resume says the shard stays released: {:?}",
        notices.lock().unwrap()
    );
    assert_released(&mut db, 8191, "the primary after the statement");
    drop(db);
    for round in 1..=2 {
        restart(&mut primary, "fast");
        assert_released(&mut primary.client(), 8191, &format!("restart {round}"));
    }
    standby.wait_for_replay_of(&primary);
    primary.stop("immediate");
    standby.promote();
    let mut db = standby.client();
    db.batch_execute(STATEMENT).unwrap();
    assert_released(&mut db, 8191, "the promoted standby after the statement");
    assert!(db.query_one("SELECT snowid_next(8190)", &[]).is_ok());
    drop(db);
    restart(&mut standby, "fast");
    assert_released(
        &mut standby.client(),
        8191,
        "the promoted standby, restarted",
    );
}

/// Row 7. Guards against fencing a cluster where nothing was ever issued (0.4.0: snowid
/// preloaded, `CREATE EXTENSION` never run, then `pg_upgrade --check` or `pg_upgrade`: the
/// first `CREATE EXTENSION` afterwards was fenced as made by pg_upgrade, and the resume refused
/// for want of a column). After a check, the old cluster and the new one each create the
/// extension and generate; after a real upgrade, the new one does; each also after a restart.
#[test]
fn an_upgrade_of_a_cluster_that_never_installed_snowid_fences_nothing() {
    if !has_pg_upgrade("an_upgrade_of_a_cluster_that_never_installed_snowid_fences_nothing") {
        return;
    }
    for check in [true, false] {
        let mut old = Cluster::init();
        old.set("shared_preload_libraries", "'snowid'");
        start(&mut old);
        old.client()
            .batch_execute("CREATE TABLE plain (n int); INSERT INTO plain VALUES (1);")
            .unwrap();
        old.stop("fast");
        let new = Cluster::init();
        new.set("shared_preload_libraries", "'snowid'");
        new.pg_upgrade_from(&old, check);
        let mut clusters = vec![new];
        if check {
            clusters.push(old);
        }
        for mut cluster in clusters {
            start(&mut cluster);
            let when = format!("after pg_upgrade (check: {check})");
            let mut db = cluster.client();
            db.batch_execute("CREATE EXTENSION snowid")
                .unwrap_or_else(|e| panic!("{when}: {}", describe(&e)));
            let first = next_ids(&mut db, 1, 10);
            assert_eq!(generating(&mut db), "yes", "{when}");
            drop(db);
            restart(&mut cluster, "fast");
            assert_generates_above(&mut cluster.client(), 1, first[9], &when);
        }
    }
}

/// Item 2 of the guarantees' next steps: a release after a resume above an ID of another shard
/// returns an ID at or above every ID the server issued for the released shard, on a server that
/// is not fenced too (the resume raises every shard, not just the one its ID names).
#[test]
fn after_any_resume_a_release_is_at_or_above_the_shards_ids() {
    let cluster = cluster_with_rows(3, 1000);
    let mut db = cluster.client();
    let three_max = max_id(&mut db);
    let above: i64 = db
        .query_one(
            "SELECT snowid_from_timestamp(now() + interval '1 minute', 8191, 1023)",
            &[],
        )
        .unwrap()
        .get(0);
    db.query_one("SELECT snowid_resume_above($1)", &[&above])
        .unwrap();
    let last: i64 = one(&mut db, "SELECT snowid_release(3)", &[]);
    let above_ms = above >> 23;
    assert!(last > three_max, "{last} not above {three_max}");
    assert!(
        last >> 23 >= above_ms,
        "the release's last ID is dated at or after the resume's millisecond"
    );
}

/// Item 3: the promotion floor, with no callback. Guards against a promoted standby dating its
/// first IDs where the old primary's unreceived leases could be, when its clock is right: with
/// `snowid.promotion_margin = '30s'`, the first ID after a promotion is dated at least the margin
/// plus `snowid.max_lead` past the promoted server's clock; a shard released on the old primary
/// stays released; a restart on the same timeline applies no second floor. With the margin turned
/// off (-1) the first ID is dated at the clock.
#[test]
fn a_promoted_standby_starts_past_its_clock_by_the_margin_and_keeps_releases() {
    for margin in ["'30s'", "-1"] {
        let (primary, mut standby) =
            primary_and_standby(&[("snowid.promotion_margin", margin)], 1, 9);
        standby.wait_for_replay_of(&primary);
        drop(primary);
        // The standby's clock before the promotion: the first generation after it, which
        // applies the margin, reads the clock later, so its floor is at least this plus the
        // margin and the lead, however long the steps in between take here.
        let before: f64 = standby
            .client()
            .query_one("SELECT extract(epoch FROM clock_timestamp())::float8", &[])
            .unwrap()
            .get(0);
        standby.promote();
        let mut db = standby.client();
        let first = next_ids(&mut db, 1, 1)[0];
        let past_before: f64 = db
            .query_one(
                "SELECT extract(epoch FROM snowid_timestamp($1::bigint))::float8 - $2",
                &[&first, &before],
            )
            .unwrap()
            .get(0);
        let ahead = seconds_ahead(&mut db, first);
        assert_released(&mut db, 9, "the promoted standby");
        match margin {
            "-1" => assert!(ahead < 5.0, "no margin: dated {ahead:.1} s ahead"),
            _ => assert!(
                past_before >= 31.0 - 0.002,
                "dated {past_before:.3} s past the promoted server's clock before the \
                 promotion, not the margin (30 s) and the lead (1 s)"
            ),
        }
        drop(db);
        restart(&mut standby, "fast");
        let mut db = standby.client();
        assert_generates_above(&mut db, 1, first, "after a restart");
        assert_released(&mut db, 9, "after a restart");
        assert_eq!(
            standby
                .log()
                .matches("snowid recorded its promotion to timeline")
                .count(),
            1,
            "the new timeline is recorded once, not again at the restart"
        );
    }
}

/// Code-read item: a dropped database held the only database witness. Guards against a lost
/// state starting fresh once the database that had the keys is gone (0.4.0 read the databases'
/// witnesses only, and the dropped database took its own with it): the cluster's witness,
/// `global/9129`, still says the cluster had the state, so `CREATE EXTENSION` in `postgres` is
/// fenced; the hint's statement finds no column, and a resume by hand above the known highest ID
/// lifts the fence. Also guards against a release forgotten with the only database that recorded
/// it: shard 7, released there, stays released, as the cluster's witness lists it.
#[test]
fn a_lost_state_is_fenced_after_the_database_with_the_keys_was_dropped() {
    let mut cluster = Cluster::init_preloaded_with_fake_clock();
    start(&mut cluster);
    cluster
        .client()
        .batch_execute("CREATE DATABASE keys")
        .unwrap();
    let mut keys = cluster.client_of("keys");
    keys.batch_execute(
        "CREATE EXTENSION snowid;
         CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowid_next(1));
         INSERT INTO t SELECT FROM generate_series(1, 1000);
         SELECT snowid_release(7);",
    )
    .unwrap();
    let old_max = max_id(&mut keys);
    drop(keys);
    cluster
        .client()
        .batch_execute("DROP DATABASE keys")
        .unwrap();
    cluster.stop("fast");
    damage(&cluster, Damage::Deleted);
    cluster.set_wall_clock_offset(BEHIND);
    start(&mut cluster);
    let mut db = cluster.client();
    db.batch_execute("CREATE EXTENSION snowid").unwrap();
    let err = db
        .query_one("SELECT snowid_next(1)", &[])
        .expect_err("the cluster's witness fences it");
    assert_fence_error(&err, "after the keys' database was dropped");
    let err = db
        .query("SELECT * FROM snowid_resume_above_columns()", &[])
        .expect_err("no column anywhere");
    assert_eq!(code(&err), "55000", "{}", describe(&err));
    db.query_one("SELECT snowid_resume_above($1)", &[&old_max])
        .unwrap_or_else(|e| panic!("resume by hand: {}", describe(&e)));
    assert_generates_above(&mut db, 1, old_max, "resumed by hand");
    assert_released(&mut db, 7, "resumed by hand");
    drop(db);
    restart(&mut cluster, "immediate");
    let mut db = cluster.client();
    assert_generates_above(&mut db, 1, old_max, "after a restart");
    assert_released(&mut db, 7, "after a restart");
}

/// Item 9, uninstalling as docs/operations.md says: `DROP EXTENSION` in every database,
/// `CHECKPOINT`, snowid out of `shared_preload_libraries`, restart. Guards against a server that
/// cannot recover once snowid is gone: after those steps, a backend crash and an immediate stop
/// both recover. Without the `CHECKPOINT`, an immediate stop leaves snowid's records (a release
/// after the last checkpoint) to replay, and the server refuses to start, naming the resource
/// manager (why the step is there).
#[test]
fn uninstalling_as_the_readme_says_survives_a_crash() {
    for with_checkpoint in [true, false] {
        let mut cluster = Cluster::preloaded(&[]);
        cluster
            .client()
            .batch_execute(
                "CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowid_next(1));
                 INSERT INTO t SELECT FROM generate_series(1, 1000);
                 CHECKPOINT;
                 INSERT INTO t SELECT FROM generate_series(1, 1000);
                 SELECT snowid_release(4000);",
            )
            .unwrap();
        let mut db = cluster.client();
        db.batch_execute("DROP EXTENSION snowid CASCADE").unwrap();
        if with_checkpoint {
            db.batch_execute("CHECKPOINT").unwrap();
        }
        drop(db);
        cluster.set("shared_preload_libraries", "''");
        if !with_checkpoint {
            cluster.stop("immediate");
            let log = cluster
                .start()
                .expect_err("crash recovery meets snowid's records");
            assert!(
                log.contains("resource manager with ID 128 not registered"),
                "the refusal names the resource manager:\n{log}"
            );
            continue;
        }
        restart(&mut cluster, "fast");
        cluster.kill_a_backend();
        restart(&mut cluster, "immediate");
        let rows: i64 = cluster
            .client()
            .query_one("SELECT count(*) FROM t", &[])
            .unwrap()
            .get(0);
        assert_eq!(rows, 2000, "the rows survive without snowid");
    }
}
