//! Settings fail closed, and one session cannot stall the others.

use snowid_integration::Cluster;
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

/// Guards against a reload taking a bad value: `ALTER SYSTEM` refuses a bad `snowid.max_lead`,
/// and a reload with a good one takes effect in running sessions.
#[test]
fn max_lead_is_changed_by_reload() {
    let cluster = Cluster::preloaded(&[]);
    let mut db = cluster.client();
    let err = db
        .batch_execute("ALTER SYSTEM SET snowid.max_lead = '5min'")
        .unwrap_err();
    assert_eq!(err.as_db_error().unwrap().code().code(), "22023");
    db.batch_execute("ALTER SYSTEM SET snowid.max_lead = '250ms'")
        .unwrap();
    db.batch_execute("SELECT pg_reload_conf()").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let lead: String = db
        .query_one("SELECT max_lead::text FROM snowid_info()", &[])
        .unwrap()
        .get(0);
    assert_eq!(lead, "00:00:00.25");
}
