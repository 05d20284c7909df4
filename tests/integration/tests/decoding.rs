//! Decoding hand-built IDs on real servers, under the default epoch and under Instagram's.

use snowid_integration::Cluster;

/// (1000 ms << 23) | (1341 << 10) | 905: one second after the epoch, shard 1341, sequence 905.
const HAND_BUILT: i64 = (1000 << 23) | (1341 << 10) | 905;

fn decode(cluster: &Cluster, id: i64) -> (String, i32, i32) {
    let row = cluster
        .client()
        .query_one(
            "SELECT to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS'), shard, seq
             FROM snowid_parse($1)",
            &[&id],
        )
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

/// Guards against an epoch or shift error in decoding under the documented default epoch
/// (2026-01-01 00:00:00+00).
#[test]
fn hand_built_ids_decode_exactly_under_the_default_epoch() {
    let cluster = Cluster::preloaded(&[]);
    assert_eq!(
        decode(&cluster, HAND_BUILT),
        ("2026-01-01 00:00:01.000".into(), 1341, 905)
    );
    assert_eq!(
        decode(&cluster, 0),
        ("2026-01-01 00:00:00.000".into(), 0, 0)
    );
    let last = decode(&cluster, i64::MAX);
    assert_eq!(
        last,
        ("2060-11-03 19:53:47.775".into(), 8191, 1023),
        "the last encodable ID"
    );
}

/// Guards against ignoring `snowid.epoch`: with Instagram's epoch configured, the same bits
/// decode relative to 2011-08-24 21:07:01.721 UTC, and generated IDs still decode to now.
#[test]
fn hand_built_ids_decode_exactly_under_instagrams_epoch() {
    let cluster = Cluster::preloaded(&[("snowid.epoch", "'2011-08-24 21:07:01.721+00'")]);
    assert_eq!(
        decode(&cluster, HAND_BUILT),
        ("2011-08-24 21:07:02.721".into(), 1341, 905)
    );
    // Instagram's own published example: 1387263000 ms, shard 1341, sequence 5001 % 1024.
    let published = (1_387_263_000_i64 << 23) | (1341 << 10) | (5001 % 1024);
    assert_eq!(decode(&cluster, published).1, 1341);
    assert_eq!(decode(&cluster, published).2, 905);

    let row = cluster
        .client()
        .query_one(
            "SELECT abs(extract(epoch FROM snowid_timestamp(snowid_next(3)) - now()))::float8,
                    current_setting('snowid.epoch')",
            &[],
        )
        .unwrap();
    assert!(
        row.get::<_, f64>(0) < 5.0,
        "new IDs decode to now under the configured epoch"
    );
    assert_eq!(row.get::<_, String>(1), "2011-08-24 21:07:01.721+00");
}

/// Guards against decoding garbage: a negative ID (which snowid never issues) is an error in
/// class 22, not a nonsense timestamp.
#[test]
fn negative_ids_are_refused_in_class_22() {
    let cluster = Cluster::preloaded(&[]);
    let err = cluster
        .client()
        .query_one("SELECT * FROM snowid_parse(-5)", &[])
        .unwrap_err();
    let db_err = err.as_db_error().expect("a server error");
    assert_eq!(db_err.code().code(), "22003");
    assert_eq!(db_err.message(), "snowid -5 is negative");
}
