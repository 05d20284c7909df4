//! How snowid behaves when it is set up wrongly: not preloaded, or with a bad epoch.

use snowid_integration::Cluster;

/// Guards against a panic (XX000) or a crash when snowid is installed without preloading:
/// CREATE EXTENSION and decoding work, and snowid_next refuses with 55000 and a hint that
/// names the setting.
#[test]
fn without_preloading_decoding_works_and_generation_explains_itself() {
    let mut cluster = Cluster::init();
    cluster.start().unwrap();
    let mut db = cluster.client();
    db.batch_execute("CREATE EXTENSION snowid").unwrap();

    let shard: i32 = db
        .query_one("SELECT (snowid_parse($1)).shard", &[&(77_i64 << 10)])
        .unwrap()
        .get(0);
    assert_eq!(shard, 77);

    let err = db.query_one("SELECT snowid_next(5)", &[]).unwrap_err();
    let db_err = err.as_db_error().expect("a server error");
    assert_eq!(db_err.code().code(), "55000");
    assert_eq!(
        db_err.message(),
        "snowid must be loaded via shared_preload_libraries"
    );
    assert!(db_err
        .hint()
        .unwrap()
        .contains("shared_preload_libraries = 'snowid'"));

    let row = db
        .query_one(
            "SELECT time_base IS NULL, generating, high_water_mark IS NULL FROM snowid_info()",
            &[],
        )
        .unwrap();
    assert!(row.get::<_, bool>(0));
    assert_eq!(
        row.get::<_, String>(1),
        "no: not loaded via shared_preload_libraries"
    );
    assert!(row.get::<_, bool>(2));
    let err = db.query("SELECT * FROM snowid_stats()", &[]).unwrap_err();
    assert_eq!(err.as_db_error().unwrap().code().code(), "55000");

    // The backend survived: the same session still answers.
    let one: i32 = db.query_one("SELECT 1", &[]).unwrap().get(0);
    assert_eq!(one, 1);
}

/// Guards against a server silently running with the wrong epoch: a malformed value, or one
/// without a UTC offset, stops the server from starting, and the log says why.
#[test]
fn a_malformed_epoch_stops_the_server() {
    for (value, reason) in [
        ("'next tuesday'", "four-digit year"),
        ("'2011-08-24 21:07:01'", "UTC offset is required"),
    ] {
        let mut cluster = Cluster::init();
        cluster.set("shared_preload_libraries", "'snowid'");
        cluster.set("snowid.epoch", value);
        let log = cluster.start().expect_err("the server must not start");
        assert!(
            log.contains("invalid value for parameter \"snowid.epoch\""),
            "{log}"
        );
        assert!(log.contains(reason), "{log}");
    }
}

/// Guards against an epoch later than the clock, which would make every ID's time field
/// negative, and against a server that does not start at all because its clock is behind at
/// boot: the server starts and says why in its log, generation refuses with 55000 (and
/// `snowid_info()` says no) while the clock is before the epoch, and IDs flow once it has passed
/// it, dated after the epoch, also after a restart. An epoch years ahead (a typo) is refused the
/// same way, and decoding works meanwhile.
#[test]
fn an_epoch_later_than_the_clock_refuses_generation_until_the_clock_passes_it() {
    for (ahead_ms, passes) in [(8_000, true), (10 * 365 * 86_400_000, false)] {
        // The epoch is taken once initdb is done, which takes seconds on a loaded machine, so
        // that the server starts while it is still ahead.
        let mut cluster = Cluster::init();
        let epoch_ms = snowid_integration::now_unix_ms() + ahead_ms;
        cluster.set("shared_preload_libraries", "'snowid'");
        let epoch = snowid_core::epoch::format(epoch_ms);
        cluster.set("snowid.epoch", &format!("'{epoch}'"));
        cluster.start().expect("the server starts");
        assert!(cluster.log().contains("is later than the system clock"));
        let mut db = cluster.client();
        db.batch_execute("CREATE EXTENSION snowid").unwrap();
        let err = db.query_one("SELECT snowid_next(1)", &[]).unwrap_err();
        let e = err.as_db_error().expect("a server error");
        assert_eq!(e.code().code(), "55000", "{e:?}");
        assert_eq!(e.message(), "the system clock is before snowid.epoch");
        let generating: String = db
            .query_one("SELECT generating FROM snowid_info()", &[])
            .unwrap()
            .get(0);
        assert!(generating.starts_with("no: "), "{generating}");
        let shard: i32 = db
            .query_one(
                "SELECT snowid_shard(8388608::bigint * 1000 + 5 * 1024)",
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(shard, 5, "decoding works meanwhile");
        if !passes {
            continue;
        }
        let wait = epoch_ms + 1500 - snowid_integration::now_unix_ms();
        std::thread::sleep(std::time::Duration::from_millis(wait.max(0) as u64 + 500));
        for _ in 0..2 {
            let mut db = cluster.client();
            let after: bool = db
                .query_one(
                    "SELECT snowid_timestamp(snowid_next(1)) >= $1::text::timestamptz",
                    &[&epoch],
                )
                .unwrap()
                .get(0);
            assert!(after, "IDs once the clock has passed the epoch");
            drop(db);
            cluster.stop("fast");
            cluster.start().unwrap();
        }
    }
}

/// Guards against ALTER SYSTEM writing an epoch that would stop the next start.
#[test]
fn alter_system_refuses_a_bad_epoch() {
    let cluster = Cluster::preloaded(&[]);
    let err = cluster
        .client()
        .batch_execute("ALTER SYSTEM SET snowid.epoch = '2011-08-24'")
        .unwrap_err();
    let db_err = err.as_db_error().expect("a server error");
    assert_eq!(db_err.code().code(), "22023");
    assert!(db_err.message().contains("snowid.epoch"), "{db_err:?}");
}
