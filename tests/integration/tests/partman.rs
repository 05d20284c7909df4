//! snowid keys under pg_partman, in both of its APIs: 4.x (Debian 12's 4.7.2, on PostgreSQL 15)
//! and 5.x (5.2.4 on 17 and 5.5.0 on 18, from Debian 13's and Debian unstable's packages). A table
//! `PARTITION BY RANGE (id)` keyed by `DEFAULT snowid_next(5)`, managed by `partman.create_parent`
//! with an integer interval of one day of IDs (`86400000::bigint << 23`), started at
//! `snowid_from_timestamp(<a UTC midnight>)`. pg_partman is not part of snowid; `scripts/setup`
//! installs Debian's packages of it. Debian has none for PostgreSQL 16: there each test says that
//! it did not run, and why, and passes.
//!
//! What these tests establish about pg_partman 4.x and 5.x alike on integer (ID) partition sets:
//! - Its partitions start at `p_start_partition` truncated to a multiple of the interval. The
//!   default epoch is a UTC midnight, so a multiple of a day of IDs is the first ID of a UTC
//!   midnight: every partition is one UTC day.
//! - `run_maintenance` keeps `premake` partitions ahead of the partition holding the *newest ID*
//!   (it reads the highest ID in the partitions, not the clock): as the clock moves on and new IDs
//!   land in later days, it adds the days after them. An empty set gets nothing.
//! - Retention by an integer `part_config.retention` of N days of IDs drops every partition whose
//!   upper bound is at least N days of IDs below the newest ID, again measured from the data.
//! - After a gap in inserts longer than `premake` days, new rows land in the default partition.
//!   5.x's maintenance ignores them (its default `ignore_default_data`) and makes nothing; 4.x's
//!   reads them and tries to make their day's partition, which fails, because the default holds
//!   rows of that day: the whole maintenance call fails until they are moved. In both,
//!   `partition_data_proc` moves them into partitions of their days, and maintenance carries on.
//!
//! Every server here runs under libfaketime with its wall clock set to about noon UTC (of today
//! or tomorrow), so that no test meets a UTC midnight while it runs, whenever it is run.

use snowid_integration::postgres::Client;
use snowid_integration::{not_run, ran, say, Cluster, Watchdog};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// One day of IDs: 86,400,000 ms shifted past the shard and sequence bits.
const DAY_OF_IDS: i64 = 86_400_000 << 23;
const SECONDS_PER_DAY: u64 = 86_400;

/// The pg_partman API of the installed release: `create_parent`'s partition type and how
/// maintenance treats rows in the default partition differ between 4.x and 5.x.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Api {
    /// 4.x (4.7.2 in Debian 12): `p_type := 'native'`; maintenance reads the default partition.
    V4,
    /// 5.x (5.2.4 in Debian 13, 5.5.0 in Debian unstable): `p_type := 'range'`; maintenance
    /// ignores the default partition's rows.
    V5,
}

/// A server with snowid and pg_partman, and which pg_partman it has.
struct Partman {
    cluster: Cluster,
    api: Api,
    version: String,
}

/// Debian's pg_partman package for a PostgreSQL major, which `scripts/setup` installs (see
/// `partman_package_of` in scripts/lib.sh); `None` for 16, which Debian does not package.
fn debian_package(major: &str) -> Option<&'static str> {
    match major {
        "15" => Some("postgresql-15-partman 4.7.2 (Debian 12, installed with apt)"),
        "17" => Some("postgresql-17-partman 5.2.4 (Debian 13)"),
        "18" => Some("postgresql-18-partman 5.5.0 (Debian unstable)"),
        _ => None,
    }
}

/// The reported name of the running test.
fn test_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("partman")
        .to_string()
}

/// The wall-clock offset, in seconds, that puts a server at 12:00 UTC of today or tomorrow.
fn offset_to_noon() -> u64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let time_of_day = now.as_secs() % SECONDS_PER_DAY;
    (SECONDS_PER_DAY / 2 + SECONDS_PER_DAY - time_of_day) % SECONDS_PER_DAY
}

/// A preloaded server whose wall clock is `offset` seconds ahead of real time, with pg_partman
/// (4.x or 5.x) created in the schema `partman`; `None` (after reporting why) when pg_partman is
/// not installed into this major.
fn partman_server(offset: u64) -> Option<Partman> {
    let mut cluster = Cluster::init_preloaded_with_fake_clock();
    cluster.set_wall_clock_offset(&format!("+{offset}"));
    cluster
        .start()
        .unwrap_or_else(|log| panic!("the server did not start:\n{log}"));
    let mut db = cluster.client();
    let available: Option<String> = db
        .query_opt(
            "SELECT default_version FROM pg_available_extensions WHERE name = 'pg_partman'",
            &[],
        )
        .unwrap()
        .map(|row| row.get(0));
    let version = snowid_integration::major();
    // `15.20`, or `19rc1 (Debian 19~rc1-1)` for a release candidate.
    let major: String = version.chars().take_while(char::is_ascii_digit).collect();
    let api = match available.as_deref().and_then(|v| v.split('.').next()) {
        Some("4") => Api::V4,
        Some("5") => Api::V5,
        Some(_) => {
            not_run(
                &test_name(),
                &format!(
                    "pg_partman {} is installed into PostgreSQL {version}, and these tests know \
                     the 4.x and 5.x APIs only",
                    available.unwrap_or_default()
                ),
            );
            return None;
        }
        None => {
            let why = match debian_package(&major) {
                Some(package) => format!(
                    "pg_partman is not installed into PostgreSQL {version}; scripts/setup installs \
                     {package}"
                ),
                None => format!(
                    "Debian has no pg_partman for PostgreSQL {major} (it packages it for 15, 17 \
                     and 18), and none is installed into this {version}"
                ),
            };
            not_run(&test_name(), &why);
            return None;
        }
    };
    db.batch_execute(
        "CREATE EXTENSION snowid;
         CREATE SCHEMA partman;
         CREATE EXTENSION pg_partman SCHEMA partman;
         CREATE TABLE public.events (
             id   bigint PRIMARY KEY DEFAULT snowid_next(5),
             body text
         ) PARTITION BY RANGE (id);",
    )
    .expect("create snowid, pg_partman and the table");
    let version: String = db
        .query_one(
            "SELECT extversion FROM pg_extension WHERE extname = 'pg_partman'",
            &[],
        )
        .unwrap()
        .get(0);
    ran(&test_name());
    Some(Partman {
        cluster,
        api,
        version,
    })
}

/// The first ID of the server's current UTC day, and that day's date.
fn today(db: &mut Client) -> (i64, String) {
    let row = db
        .query_one(
            "SELECT snowid_from_timestamp(date_trunc('day', now(), 'UTC')),
                    to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI')",
            &[],
        )
        .unwrap();
    (row.get(0), row.get(1))
}

/// `partman.create_parent` for `public.events`: day partitions from `start` (an ID), `premake`
/// ahead, with the default partition; the same named arguments in 4.x and 5.x but the type,
/// `'native'` (4.x's declarative partitioning) or `'range'`.
fn create_parent(db: &mut Client, api: Api, start: i64, premake: i32) {
    let p_type = match api {
        Api::V4 => "native",
        Api::V5 => "range",
    };
    let created: bool = db
        .query_one(
            "SELECT partman.create_parent(
                 p_parent_table    := 'public.events',
                 p_control         := 'id',
                 p_interval        := (86400000::bigint << 23)::text,
                 p_type            := $3,
                 p_premake         := $1,
                 p_start_partition := $2::bigint::text)",
            &[&premake, &start, &p_type],
        )
        .expect("create_parent")
        .get(0);
    assert!(created, "create_parent returned false");
}

/// Moves the server's wall clock `days` days past its first offset (`offset` seconds from real
/// time) while it runs, waits until `snowid_next` follows it, and returns the first ID of that
/// day (`today_id` being the first ID of the server's first day).
fn clock_days_on(cluster: &Cluster, db: &mut Client, offset: u64, days: i64, today_id: i64) -> i64 {
    cluster.set_wall_clock_offset(&format!("+{}", offset + days as u64 * SECONDS_PER_DAY));
    let day = today_id + days * DAY_OF_IDS;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let at: i64 = db.query_one("SELECT snowid_next(5)", &[]).unwrap().get(0);
        if at >= day {
            return day;
        }
        assert!(
            Instant::now() < deadline,
            "snowid did not follow the clock {days} days on: {at} < {day}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One range partition of `public.events`, from the catalog (not from pg_partman), with its
/// bounds decoded by `snowid_timestamp` in UTC.
#[derive(Debug, Clone, PartialEq)]
struct Partition {
    name: String,
    lower: i64,
    upper: i64,
    lower_utc: String,
    upper_utc: String,
    /// Whether `lower` is exactly `snowid_from_timestamp(snowid_timestamp(lower))`: the first
    /// ID (shard 0, sequence 0) of its millisecond.
    lower_is_first_id_of_its_ms: bool,
}

/// The range partitions of `public.events` in bound order, and whether it has a default one.
fn partitions(db: &mut Client) -> (Vec<Partition>, bool) {
    let rows = db
        .query(
            r"SELECT c.relname::text, b[1]::bigint, b[2]::bigint,
                     to_char(snowid_timestamp(b[1]::bigint) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS'),
                     to_char(snowid_timestamp(b[2]::bigint) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS'),
                     snowid_from_timestamp(snowid_timestamp(b[1]::bigint)) = b[1]::bigint
              FROM pg_inherits i
              JOIN pg_class c ON c.oid = i.inhrelid,
              LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid),
                                   'FROM \(''?(\d+)''?\) TO \(''?(\d+)''?\)') AS b
              WHERE i.inhparent = 'public.events'::regclass AND b IS NOT NULL
              ORDER BY 2",
            &[],
        )
        .unwrap();
    let ranges = rows
        .iter()
        .map(|row| Partition {
            name: row.get(0),
            lower: row.get(1),
            upper: row.get(2),
            lower_utc: row.get(3),
            upper_utc: row.get(4),
            lower_is_first_id_of_its_ms: row.get(5),
        })
        .collect();
    let defaults: i64 = db
        .query_one(
            "SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = 'public.events'::regclass
               AND pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT'",
            &[],
        )
        .unwrap()
        .get(0);
    (ranges, defaults == 1)
}

/// Checks that the partitions are whole UTC days, one after another with no gap, the first one
/// starting at `first`.
fn assert_consecutive_utc_days(parts: &[Partition], first: i64) {
    assert!(!parts.is_empty(), "no partitions");
    assert_eq!(parts[0].lower, first, "the first partition: {:?}", parts[0]);
    for (k, part) in parts.iter().enumerate() {
        assert_eq!(
            part.upper - part.lower,
            DAY_OF_IDS,
            "not one day of IDs: {part:?}"
        );
        assert!(
            part.lower_utc.ends_with(" 00:00:00.000") && part.upper_utc.ends_with(" 00:00:00.000"),
            "bounds that are not UTC midnights: {part:?}"
        );
        assert!(
            part.lower_is_first_id_of_its_ms,
            "a lower bound that is not the first ID of its midnight: {part:?}"
        );
        if k > 0 {
            assert_eq!(
                parts[k - 1].upper,
                part.lower,
                "a gap or an overlap before {part:?}"
            );
        }
    }
}

/// Inserts `n` rows through the column default, their `body` starting with `tag`, and returns
/// where they are (see [`landed`]).
fn insert_by_default(db: &mut Client, n: i32, tag: &str) -> Vec<(String, i64, i64)> {
    let _watchdog = Watchdog::new(db, Duration::from_secs(60));
    db.execute(
        "INSERT INTO public.events (body) SELECT $2 || g FROM generate_series(1, $1) g",
        &[&n, &tag],
    )
    .unwrap();
    landed(db, tag)
}

/// Per partition holding rows whose `body` starts with `tag` (by `tableoid`): (partition, rows,
/// rows whose ID is on shard 5 and dated within the UTC day that the partition's bounds cover).
fn landed(db: &mut Client, tag: &str) -> Vec<(String, i64, i64)> {
    db.query(
        r"SELECT e.tableoid::regclass::text, count(*),
                 count(*) FILTER (WHERE snowid_shard(e.id) = 5
                                    AND e.id >= b[1]::bigint AND e.id < b[2]::bigint
                                    AND date_trunc('day', snowid_timestamp(e.id), 'UTC')
                                        = snowid_timestamp(b[1]::bigint))
          FROM public.events e
          JOIN pg_class c ON c.oid = e.tableoid
          LEFT JOIN LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid),
                                         'FROM \(''?(\d+)''?\) TO \(''?(\d+)''?\)') AS b ON true
          WHERE e.body LIKE $1 || '%'
          GROUP BY 1 ORDER BY 1",
        &[&tag],
    )
    .unwrap()
    .iter()
    .map(|row| (row.get(0), row.get(1), row.get(2)))
    .collect()
}

/// Rows of `public.events` per partition (the default one included), by `tableoid`.
fn rows_by_partition(db: &mut Client) -> Vec<(String, i64)> {
    db.query(
        "SELECT tableoid::regclass::text, count(*) FROM public.events GROUP BY 1 ORDER BY 1",
        &[],
    )
    .unwrap()
    .iter()
    .map(|row| (row.get(0), row.get(1)))
    .collect()
}

/// Guards against day partitions that are not UTC days, or rows that miss them: a layout or
/// epoch mismatch between `snowid_from_timestamp`, the IDs `snowid_next` issues and
/// pg_partman's integer arithmetic would show as bounds that decode to another time than a UTC
/// midnight, as rows in the default partition or in another day's, or as a failed insert.
///
/// `create_parent` from today's UTC midnight with `premake` 3 makes today and the next three days
/// plus a default partition; the catalog's bounds of each decode with `snowid_timestamp` to
/// consecutive UTC midnights, and each lower bound is the first ID of its midnight. 1,000 rows
/// inserted by `DEFAULT snowid_next(5)` all land (by `tableoid`) in today's partition, none in the
/// default.
#[test]
fn create_parent_makes_utc_day_partitions_and_todays_rows_land_in_todays() {
    let Some(server) = partman_server(offset_to_noon()) else {
        return;
    };
    let mut db = server.cluster.client();
    let (today_id, now) = today(&mut db);
    create_parent(&mut db, server.api, today_id, 3);

    let (parts, has_default) = partitions(&mut db);
    assert!(has_default, "create_parent made no default partition");
    assert_eq!(parts.len(), 4, "today and premake 3: {parts:#?}");
    assert_consecutive_utc_days(&parts, today_id);
    assert_eq!(
        &parts[0].lower_utc[..10],
        &now[..10],
        "today's partition is today's date"
    );
    // pg_partman names ID partitions by their lower bound.
    assert_eq!(parts[0].name, format!("events_p{today_id}"));

    let rows_at = insert_by_default(&mut db, 1000, "today ");
    assert_eq!(
        rows_at,
        vec![(parts[0].name.clone(), 1000, 1000)],
        "every row in today's partition, on shard 5 and dated within its bounds' day"
    );
    assert_eq!(
        rows_by_partition(&mut db),
        vec![(parts[0].name.clone(), 1000)],
        "nothing outside today's partition"
    );
    say(&format!(
        "pg_partman {} (PostgreSQL {}): create_parent made {} day partitions from {} UTC (and a default); \
         1000 rows by DEFAULT snowid_next(5) all landed in {}",
        server.version,
        snowid_integration::major(),
        parts.len(),
        parts[0].lower_utc,
        parts[0].name
    ));
}

/// Guards against maintenance that stops keeping days ahead of the IDs being issued: if
/// `run_maintenance` did not see new IDs as a later day's (a wrong interval, bounds out of step
/// with the IDs), inserts would fall into the default partition once the premade days ran out,
/// and the default partition would then block creating those days at all.
///
/// With `premake` 3, created from today: maintenance with today's rows in place adds nothing
/// (three days are already ahead). Then the server's wall clock moves 48 hours on while it runs;
/// once snowid follows the step, rows inserted by the default land in the partition of that day,
/// and `CALL partman.run_maintenance_proc()` adds exactly the two days needed to have three
/// after it again.
#[test]
fn run_maintenance_keeps_premake_days_ahead_of_the_newest_id() {
    let offset = offset_to_noon();
    let Some(server) = partman_server(offset) else {
        return;
    };
    let mut db = server.cluster.client();
    let (today_id, _) = today(&mut db);
    create_parent(&mut db, server.api, today_id, 3);
    let (initial, _) = partitions(&mut db);
    assert_eq!(initial.len(), 4);

    // An empty set first: maintenance has no newest ID to keep ahead of, and adds nothing.
    db.batch_execute("CALL partman.run_maintenance_proc()")
        .unwrap();
    assert_eq!(
        partitions(&mut db).0,
        initial,
        "maintenance of an empty set changed it"
    );

    let rows_at = insert_by_default(&mut db, 100, "today ");
    assert_eq!(rows_at, vec![(initial[0].name.clone(), 100, 100)]);
    db.batch_execute("CALL partman.run_maintenance_proc()")
        .unwrap();
    let (after_today, _) = partitions(&mut db);
    assert_eq!(
        after_today, initial,
        "three days were already ahead of today's rows"
    );

    // Two days later.
    server
        .cluster
        .set_wall_clock_offset(&format!("+{}", offset + 2 * SECONDS_PER_DAY));
    let day_2 = today_id + 2 * DAY_OF_IDS;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let at: i64 = db.query_one("SELECT snowid_next(5)", &[]).unwrap().get(0);
        if at >= day_2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "snowid did not follow the clock 48 hours on: {at} < {day_2}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let rows_at = insert_by_default(&mut db, 100, "two days on ");
    assert_eq!(
        rows_at,
        vec![(initial[2].name.clone(), 100, 100)],
        "rows two days on land in the partition of that day"
    );
    assert_eq!(initial[2].lower, day_2);

    db.batch_execute("CALL partman.run_maintenance_proc()")
        .unwrap();
    let (after, has_default) = partitions(&mut db);
    assert!(has_default);
    assert_consecutive_utc_days(&after, today_id);
    assert_eq!(
        after.len(),
        initial.len() + 2,
        "maintenance should add two days: {after:#?}"
    );
    assert_eq!(
        after.last().unwrap().lower,
        day_2 + 3 * DAY_OF_IDS,
        "three days after the newest ID's"
    );
    say(&format!(
        "pg_partman {} (PostgreSQL {}): create_parent made {} partitions; run_maintenance made 0 with \
         today's rows, then {} with rows two days on (now {} partitions, the last from {} UTC)",
        server.version,
        snowid_integration::major(),
        initial.len(),
        after.len() - initial.len(),
        after.len(),
        after.last().unwrap().lower_utc
    ));
}

/// Guards against retention that drops too much or too little: an integer retention of two days
/// of IDs in `part_config.retention` must drop exactly the day partitions that end at least two
/// days of IDs below the newest ID, with their rows, and keep every later one, its rows intact.
///
/// `create_parent` starts five days in the past (`premake` 5, so up to today). Each past day gets
/// 10 rows with IDs made by `snowid_from_timestamp` for noon of that day on shard 5 (history, as
/// an import would bring it), and today 100 rows by the default. With `retention` two days of IDs
/// and `retention_keep_table` false, `partman.run_maintenance()` drops the three oldest days
/// (their tables are gone) and makes the five days after today.
#[test]
fn retention_drops_day_partitions_older_than_n_days_of_ids() {
    let Some(server) = partman_server(offset_to_noon()) else {
        return;
    };
    let mut db = server.cluster.client();
    let (today_id, _) = today(&mut db);
    let start = today_id - 5 * DAY_OF_IDS;
    create_parent(&mut db, server.api, start, 5);
    let (initial, _) = partitions(&mut db);
    assert_eq!(initial.len(), 6, "five past days and today: {initial:#?}");
    assert_consecutive_utc_days(&initial, start);

    db.execute(
        "INSERT INTO public.events (id, body)
         SELECT snowid_from_timestamp(snowid_timestamp($1::bigint) + d * interval '1 day' + interval '12 hours', 5, s),
                'history ' || d
         FROM generate_series(0, 4) d, generate_series(0, 9) s",
        &[&start],
    )
    .unwrap();
    insert_by_default(&mut db, 100, "today ");
    let before = rows_by_partition(&mut db);
    let expected_before: Vec<(String, i64)> = initial
        .iter()
        .enumerate()
        .map(|(k, p)| (p.name.clone(), if k < 5 { 10 } else { 100 }))
        .collect();
    assert_eq!(before, expected_before, "rows per day before retention");

    db.batch_execute(
        "UPDATE partman.part_config
         SET retention = ((2 * 86400000::bigint) << 23)::text, retention_keep_table = false
         WHERE parent_table = 'public.events';
         SELECT partman.run_maintenance('public.events');",
    )
    .unwrap();

    let (after, has_default) = partitions(&mut db);
    assert!(has_default, "retention dropped the default partition");
    let newest: i64 = db
        .query_one("SELECT max(id) FROM public.events", &[])
        .unwrap()
        .get(0);
    let dropped: Vec<&Partition> = initial.iter().filter(|p| !after.contains(p)).collect();
    let created: Vec<&Partition> = after.iter().filter(|p| !initial.contains(p)).collect();
    for part in &dropped {
        assert!(
            part.upper <= newest - 2 * DAY_OF_IDS,
            "dropped a partition within the retention: {part:?}"
        );
    }
    for part in &after {
        assert!(
            part.upper > newest - 2 * DAY_OF_IDS,
            "kept a partition past the retention: {part:?}"
        );
    }
    assert_eq!(
        dropped,
        initial[..3].iter().collect::<Vec<_>>(),
        "the three oldest days"
    );
    assert_eq!(created.len(), 5, "premake 5 after today: {after:#?}");
    assert_consecutive_utc_days(&after, today_id - 2 * DAY_OF_IDS);
    let gone: i64 = db
        .query_one(
            "SELECT count(*) FROM pg_class WHERE relname = ANY($1)",
            &[&dropped.iter().map(|p| p.name.clone()).collect::<Vec<_>>()],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        gone, 0,
        "retention_keep_table false: the tables are dropped"
    );
    let rows_dropped: i64 = before.iter().map(|(_, n)| n).sum::<i64>()
        - rows_by_partition(&mut db)
            .iter()
            .map(|(_, n)| n)
            .sum::<i64>();
    assert_eq!(
        rows_dropped, 30,
        "the three oldest days' rows went with them"
    );
    let expected_after: Vec<(String, i64)> = initial[3..]
        .iter()
        .enumerate()
        .map(|(k, p)| (p.name.clone(), if k < 2 { 10 } else { 100 }))
        .collect();
    assert_eq!(
        rows_by_partition(&mut db),
        expected_after,
        "the rows of the days kept stay where they were"
    );
    say(&format!(
        "pg_partman {} (PostgreSQL {}): create_parent made {} partitions from 5 days back; with a \
         retention of 2 days of IDs, run_maintenance dropped {} ({} rows) and created {}; \
         {} partitions remain, from {} UTC",
        server.version,
        snowid_integration::major(),
        initial.len(),
        dropped.len(),
        rows_dropped,
        created.len(),
        after.len(),
        after[0].lower_utc
    ));
}

/// Guards against the recovery docs/guide.md gives for a quiet spell longer than `premake` days
/// failing, or the spell itself losing rows: with `premake` 2, the server's clock moves five
/// days on, past the last premade day. Rows inserted then by the default must not be lost:
/// they land in the default partition. `run_maintenance` makes no partition for their day: 5.x
/// ignores the default partition's rows and succeeds without a change; 4.x reads them, tries to
/// attach their day's partition, and fails ("updated partition constraint for default partition
/// ... would be violated"), changing nothing. `CALL partman.partition_data_proc()` must then move
/// every one of them into a new partition of their UTC day, leaving the default empty, after which
/// `run_maintenance` succeeds and keeps `premake` days ahead of them again.
#[test]
fn a_quiet_spell_longer_than_premake_is_recovered_by_partition_data_proc() {
    let offset = offset_to_noon();
    let Some(server) = partman_server(offset) else {
        return;
    };
    let mut db = server.cluster.client();
    let (today_id, _) = today(&mut db);
    create_parent(&mut db, server.api, today_id, 2);
    insert_by_default(&mut db, 10, "today ");
    let (initial, _) = partitions(&mut db);
    assert_eq!(initial.len(), 3, "today and premake 2");

    let day_5 = clock_days_on(&server.cluster, &mut db, offset, 5, today_id);
    let rows_at = insert_by_default(&mut db, 100, "five days on ");
    assert_eq!(
        rows_at
            .iter()
            .map(|(p, n, _)| (p.clone(), *n))
            .collect::<Vec<_>>(),
        vec![("events_default".to_string(), 100)],
        "rows past the premade days go to the default partition"
    );
    let maintenance = db.batch_execute("CALL partman.run_maintenance_proc()");
    let stuck = match (server.api, maintenance) {
        (Api::V5, Ok(())) => "run_maintenance made 0".to_string(),
        (Api::V5, Err(e)) => panic!("5.x maintenance failed with rows in the default: {e:?}"),
        (Api::V4, Ok(())) => {
            panic!("4.x maintenance succeeded with rows of a day it must make in the default")
        }
        (Api::V4, Err(e)) => {
            let message = e
                .as_db_error()
                .map(|d| d.message().to_string())
                .unwrap_or_else(|| e.to_string());
            assert!(
                message.contains("updated partition constraint for default partition")
                    && message.contains("would be violated"),
                "4.x maintenance failed otherwise: {message}"
            );
            "run_maintenance failed (the default holds rows of the day it would attach)".to_string()
        }
    };
    assert_eq!(
        partitions(&mut db).0,
        initial,
        "maintenance made no partition with rows of their day in the default"
    );

    db.batch_execute("CALL partman.partition_data_proc('public.events')")
        .unwrap();
    let (moved, _) = partitions(&mut db);
    let day_5_partition = moved
        .iter()
        .find(|p| p.lower == day_5)
        .unwrap_or_else(|| panic!("no partition for the fifth day: {moved:#?}"))
        .name
        .clone();
    let moved_rows = landed(&mut db, "five days on ");
    assert_eq!(
        moved_rows,
        vec![(day_5_partition.clone(), 100, 100)],
        "every row moved into its own day's partition"
    );
    let in_default: i64 = db
        .query_one("SELECT count(*) FROM ONLY public.events_default", &[])
        .unwrap()
        .get(0);
    assert_eq!(in_default, 0);

    db.batch_execute("CALL partman.run_maintenance_proc()")
        .unwrap();
    let (after, _) = partitions(&mut db);
    assert_eq!(
        after.last().unwrap().lower,
        day_5 + 2 * DAY_OF_IDS,
        "premake 2 after the fifth day: {after:#?}"
    );
    for part in &after {
        assert!(part.lower_utc.ends_with(" 00:00:00.000"), "{part:?}");
        assert_eq!(part.upper - part.lower, DAY_OF_IDS, "{part:?}");
    }
    say(&format!(
        "pg_partman {} (PostgreSQL {}): a 5-day quiet spell with premake 2: 100 rows in the default \
         partition, {stuck}; partition_data_proc moved them into {} and made {} \
         partition(s); run_maintenance then made {} (now {} partitions, the days between left out)",
        server.version,
        snowid_integration::major(),
        day_5_partition,
        moved.len() - initial.len(),
        after.len() - moved.len(),
        after.len()
    ));
}
