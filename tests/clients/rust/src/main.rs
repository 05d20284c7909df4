//! snowid through tokio-postgres. Run by tests/clients/run, which starts a server and sets
//! SNOWID_CLIENTS_URL to a database that has the extension. Exits non-zero if a check fails.

use std::collections::HashSet;
use std::error::Error;
use std::time::{Duration, SystemTime};
use tokio_postgres::{Client, NoTls};

type Result<T = ()> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+).into());
        }
    };
}

const TASKS: usize = 4;
const PER_TASK: usize = 250;

async fn connect() -> Result<Client> {
    let url = std::env::var("SNOWID_CLIENTS_URL").map_err(|_| "SNOWID_CLIENTS_URL is not set")?;
    let (client, connection) = tokio_postgres::connect(&url, NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("connection error: {e}");
        }
    });
    Ok(client)
}

/// The fields of an ID, decoded in Rust: (milliseconds since the epoch, shard, sequence).
fn decode(id: i64) -> (i64, i32, i32) {
    (id >> 23, ((id >> 10) & 8191) as i32, (id & 1023) as i32)
}

async fn insert_returning(db: &Client) -> Result {
    // snippet: rust-insert-returning
    let row = db
        .query_one(
            "INSERT INTO orders (note) VALUES ($1) RETURNING id",
            &[&"rust"],
        )
        .await?;
    let id: i64 = row.get("id"); // bigint is i64: exact
    let parsed = db
        .query_one("SELECT ts, shard, seq FROM snowid_parse($1)", &[&id])
        .await?;
    let (ts, shard, seq): (SystemTime, i32, i32) = (parsed.get(0), parsed.get(1), parsed.get(2));
    // end snippet
    ensure!(id > (1 << 53), "id {id} should be above 2^53");
    ensure!(shard == 5, "shard {shard}");

    let epoch: SystemTime = db
        .query_one("SELECT epoch FROM snowid_info()", &[])
        .await?
        .get(0);
    let (ms, dshard, dseq) = decode(id);
    ensure!(
        (dshard, dseq) == (shard, seq),
        "decoded ({dshard}, {dseq}) vs snowid_parse ({shard}, {seq})"
    );
    ensure!(
        epoch + Duration::from_millis(ms as u64) == ts,
        "decoded time {ms} ms after the epoch disagrees with snowid_parse's {ts:?}"
    );

    let found: String = db
        .query_one("SELECT note FROM orders WHERE id = $1", &[&id])
        .await?
        .get(0);
    ensure!(found == "rust", "the row by its ID: {found}");
    Ok(())
}

async fn shard_parameter(db: &Client) -> Result {
    // snowid_next has int, bigint and double precision forms, so tokio-postgres, which lets the
    // server infer a parameter's type, must say which one it means: cast the parameter.
    // snippet: rust-shard-parameter
    let id: i64 = db
        .query_one("SELECT snowid_next($1::int)", &[&5i32])
        .await?
        .get(0);
    let id_from_i64: i64 = db
        .query_one("SELECT snowid_next($1::bigint)", &[&(8197i64 % 8192)])
        .await?
        .get(0);
    // end snippet
    ensure!(decode(id).1 == 5, "shard of {id}");
    ensure!(decode(id_from_i64).1 == 5, "shard of {id_from_i64}");
    // Uncast, the server infers double precision (the form untyped parameters resolve to), and
    // the client refuses to send an integer for it: a clear error, never a wrong shard.
    let err = db
        .query_one("SELECT snowid_next($1)", &[&5i32])
        .await
        .err()
        .ok_or("an uncast i32 shard parameter should be refused by the client")?;
    ensure!(
        err.to_string().contains("error serializing parameter 0"),
        "unexpected error: {err}"
    );
    Ok(())
}

async fn many_in_one_statement(db: &Client) -> Result {
    let rows = db
        .query(
            "INSERT INTO orders (note) SELECT 'many ' || i FROM generate_series(1, 1000) i RETURNING id",
            &[],
        )
        .await?;
    let ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
    ensure!(ids.len() == 1000, "{} ids", ids.len());
    ensure!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "ids do not increase in row order"
    );
    Ok(())
}

async fn concurrent_tasks(db: &Client) -> Result {
    let mut handles = Vec::new();
    for task in 0..TASKS {
        handles.push(tokio::spawn(async move {
            let db = connect().await?;
            let insert = db
                .prepare("INSERT INTO orders (note) VALUES ($1) RETURNING id")
                .await?;
            let mut ids = Vec::with_capacity(PER_TASK);
            for i in 0..PER_TASK {
                let note = format!("task {task} {i}");
                ids.push(db.query_one(&insert, &[&note]).await?.get::<_, i64>(0));
            }
            Result::Ok(ids)
        }));
    }
    let mut all = HashSet::new();
    for handle in handles {
        let ids = handle.await??;
        ensure!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "a task's ids do not increase"
        );
        all.extend(ids);
    }
    ensure!(
        all.len() == TASKS * PER_TASK,
        "{} distinct ids of {}",
        all.len(),
        TASKS * PER_TASK
    );

    let in_table: Vec<i64> = db
        .query("SELECT id FROM orders WHERE note LIKE 'task %'", &[])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    ensure!(
        in_table.len() == all.len() && in_table.iter().all(|id| all.contains(id)),
        "the table's ids differ from the returned ones"
    );
    Ok(())
}

#[tokio::main]
async fn main() {
    let db = match connect().await {
        Ok(db) => db,
        Err(e) => {
            eprintln!("cannot connect: {e}");
            std::process::exit(1);
        }
    };
    db.batch_execute(
        "DROP TABLE IF EXISTS orders;
         CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowid_next(5), note text NOT NULL);",
    )
    .await
    .expect("create the table");

    let (mut passed, mut failed) = (0, 0);
    macro_rules! check {
        ($name:literal, $call:expr) => {
            match $call.await {
                Ok(()) => {
                    passed += 1;
                    println!("ok - {}", $name);
                }
                Err(e) => {
                    failed += 1;
                    println!("FAILED - {}: {e}", $name);
                }
            }
        };
    }
    check!(
        "insert with DEFAULT, RETURNING i64, decode",
        insert_returning(&db)
    );
    check!("shard as a parameter", shard_parameter(&db));
    check!("1000 rows in one statement", many_in_one_statement(&db));
    check!(
        "concurrent inserts from several tasks",
        concurrent_tasks(&db)
    );

    println!("rust: {passed} passed, {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
}
