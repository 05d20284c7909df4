//! Settings fail closed, and one session cannot stall the others.

use snowid_integration::{burst, not_run, say, set_and_reload, Cluster};
use std::time::{Duration, Instant};

/// Guards against a misspelt setting being ignored: `snowid.shard = '0-99'` (for
/// `snowid.shards`) used to start the server with only a warning, owning every shard. It must
/// stop the server, name the setting, and suggest the real one.
#[test]
fn a_misspelt_setting_stops_the_server() {
    let mut cluster = Cluster::init();
    cluster.set("shared_preload_libraries", "'snowid'");
    cluster.set("snowid.shard", "'0-99'");
    let log = cluster
        .start()
        .expect_err("a misspelt setting must not start");
    assert!(
        log.contains("unrecognized configuration parameter \"snowid.shard\""),
        "{log}"
    );
    assert!(log.contains("Perhaps you meant \"snowid.shards\""), "{log}");
}

/// Guards against a bad `snowid.max_lead` silently becoming the default (1 s): a value that is
/// not a duration, or is out of range, stops the server at start-up.
#[test]
fn a_bad_max_lead_stops_the_server() {
    for (value, reason) in [
        ("'abc'", "is not a duration"),
        ("'5min'", "outside the valid range"),
        ("'-1'", "outside the valid range"),
    ] {
        let mut cluster = Cluster::init();
        cluster.set("shared_preload_libraries", "'snowid'");
        cluster.set("snowid.max_lead", value);
        let log = cluster.start().expect_err("a bad max_lead must not start");
        assert!(
            log.contains("invalid value for parameter \"snowid.max_lead\""),
            "{value}: {log}"
        );
        assert!(log.contains(reason), "{value}: {log}");
    }
}

/// Guards against one session stalling everyone on a shard: a superuser that could raise
/// `snowid.max_lead` to 30 s for its own session ran shard 9 seconds ahead, and the next ordinary
/// `snowid_next(9)` waited 6 s. The setting is server-wide now, so a session cannot raise it;
/// after a burst at the server's lead (1 s), another session's first ID on the same shard waits
/// about that second at most.
#[test]
fn one_session_cannot_stall_the_others() {
    let cluster = Cluster::preloaded(&[]);
    let mut superuser = cluster.client();
    let err = superuser
        .batch_execute("SET snowid.max_lead = '30s'")
        .unwrap_err();
    assert_eq!(
        err.as_db_error().unwrap().code().code(),
        "55P02",
        "not settable per session: {err}"
    );
    superuser
        .query_one(
            "SELECT count(snowid_next(9)) FROM generate_series(1, 4000000)",
            &[],
        )
        .unwrap();
    let started = Instant::now();
    cluster
        .client()
        .query_one("SELECT snowid_next(9)", &[])
        .unwrap();
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_millis(2500),
        "an ordinary session waited {waited:?} behind another's burst"
    );
}

/// Guards against a reload of `snowid.max_lead` that is reported but not obeyed, and against a
/// reload taking a bad value: `ALTER SYSTEM` refuses a bad value. At lead 0 (the server's
/// setting) a burst that outruns 1,024 IDs a millisecond waits for the clock and runs no
/// millisecond ahead of it; after `ALTER SYSTEM SET snowid.max_lead = '250ms'` and a reload, a
/// burst in the same session (once it sees the setting) runs ahead of the clock, and no further
/// than 250 ms. Where this build cannot outrun the ceiling at all (a slow debug build), no lead
/// can show, and the test says that it did not run.
#[test]
fn max_lead_is_changed_by_reload() {
    let cluster = Cluster::preloaded(&[("snowid.max_lead", "0")]);
    let mut db = cluster.client();
    let err = db
        .batch_execute("ALTER SYSTEM SET snowid.max_lead = '5min'")
        .unwrap_err();
    assert_eq!(err.as_db_error().unwrap().code().code(), "22023");

    let at_zero = burst(&mut db, 21, 1_000_000);
    if at_zero.full_ms == 0 {
        not_run(
            "max_lead_is_changed_by_reload",
            "this build issues fewer than 1,024 IDs a millisecond on one shard here, so no burst \
             can run ahead of the clock whatever snowid.max_lead says",
        );
        return;
    }
    assert!(
        at_zero.waits > 0 && at_zero.lead_s <= at_zero.clock_behind_s + 0.002,
        "at lead 0 a burst waits for the clock and runs no millisecond ahead: {at_zero:?}"
    );

    set_and_reload(&mut db, "snowid.max_lead", "250ms", "250ms");
    let mut ahead = burst(&mut db, 22, 1_000_000);
    for _ in 0..10 {
        if ahead.lead_s > ahead.clock_behind_s + 0.002 {
            break;
        }
        ahead = burst(&mut db, 22, 1_000_000);
    }
    assert!(
        ahead.lead_s > ahead.clock_behind_s + 0.002,
        "after the reload a burst runs ahead of the clock, as lead 0 forbids: {ahead:?}"
    );
    assert!(
        ahead.lead_s <= 0.25 + ahead.clock_behind_s + 0.002,
        "and no further than the new lead: {ahead:?}"
    );
    let lead: String = db
        .query_one("SELECT max_lead::text FROM snowid_info()", &[])
        .unwrap()
        .get(0);
    assert_eq!(lead, "00:00:00.25");
    say(&format!(
        "max_lead_is_changed_by_reload: at lead 0 {} waits; after the reload to 250 ms, a lead of {:.3} s",
        at_zero.waits, ahead.lead_s
    ));
}

/// Guards against a misspelt setting being set for the next start: `ALTER SYSTEM` refuses an
/// unknown `snowid.*` setting and leaves `postgresql.auto.conf` without it, so the server still
/// starts. PostgreSQL 15 and 16 refuse any name they do not know (42704); from 17, which takes
/// unknown custom names, only snowid's reserved prefix refuses it (42602, naming the prefix).
#[test]
fn alter_system_refuses_an_unknown_snowid_setting() {
    let mut cluster = Cluster::preloaded(&[]);
    let mut db = cluster.client();
    let err = db
        .batch_execute("ALTER SYSTEM SET snowid.shard = '0-99'")
        .expect_err("an unknown snowid.* setting must be refused");
    let e = err.as_db_error().expect("a server error");
    match e.code().code() {
        "42704" => {}
        "42602" => assert!(
            e.detail()
                .unwrap_or("")
                .contains("\"snowid\" is a reserved prefix"),
            "{e:?}"
        ),
        other => panic!("{other}: {e:?}"),
    }
    drop(db);
    cluster.stop("fast");
    cluster
        .start()
        .unwrap_or_else(|log| panic!("the server starts again: {log}"));
    let auto: String = cluster
        .client()
        .query_one("SELECT pg_read_file('postgresql.auto.conf')", &[])
        .unwrap()
        .get(0);
    assert!(!auto.contains("snowid.shard"), "{auto}");
}
