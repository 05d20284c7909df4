// snowid through JDBC (Debian's PostgreSQL JDBC driver). Run by tests/clients/run, which starts
// a server and sets PGHOST, PGPORT, PGUSER and PGDATABASE for a database that has the extension.
// Exits non-zero if a check fails.

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;

public class SnowidJdbc {
    // EXPECTATION, flip when it changes: snowid has only snowid_next(int), so a shard sent with
    // setLong (a bigint parameter) finds no function: SQLSTATE 42883 (undefined_function).
    // Set to true once a snowid_next(bigint) exists.
    static final boolean SNOWID_NEXT_ACCEPTS_BIGINT = true;

    static final int BATCH = 1000;

    interface Check {
        void run(Connection db) throws Exception;
    }

    static void ensure(boolean condition, String message) {
        if (!condition) {
            throw new AssertionError(message);
        }
    }

    static long[] decode(long id) {
        return new long[] {id >> 23, (id >> 10) & 8191, id & 1023};
    }

    static void generatedKeys(Connection db) throws Exception {
        // snippet: jdbc-generated-keys
        long id;
        try (PreparedStatement insert = db.prepareStatement(
                "INSERT INTO orders (note) VALUES (?)", Statement.RETURN_GENERATED_KEYS)) {
            insert.setString(1, "generated keys");
            insert.executeUpdate();
            try (ResultSet keys = insert.getGeneratedKeys()) {
                keys.next();
                id = keys.getLong("id"); // a Java long holds every snowid exactly
            }
        }
        // end snippet
        ensure(id > (1L << 53), "id above 2^53: " + id);
        try (PreparedStatement find = db.prepareStatement("SELECT note FROM orders WHERE id = ?")) {
            find.setLong(1, id);
            try (ResultSet rs = find.executeQuery()) {
                ensure(rs.next() && rs.getString(1).equals("generated keys"), "the row by its ID");
            }
        }
    }

    static void returningAndParse(Connection db) throws Exception {
        try (PreparedStatement insert = db.prepareStatement(
                "INSERT INTO orders (note) VALUES (?) RETURNING id, (snowid_parse(id)).*")) {
            insert.setString(1, "returning");
            try (ResultSet rs = insert.executeQuery()) {
                ensure(rs.next(), "a row");
                long id = rs.getLong("id");
                long[] parts = decode(id);
                ensure(parts[1] == 5 && parts[1] == rs.getInt("shard"), "shard of " + id);
                ensure(parts[2] == rs.getInt("seq"), "seq of " + id);
            }
        }
    }

    static void shardAsInt(Connection db) throws Exception {
        try (PreparedStatement next = db.prepareStatement("SELECT snowid_next(?)")) {
            next.setInt(1, 5);
            try (ResultSet rs = next.executeQuery()) {
                ensure(rs.next() && decode(rs.getLong(1))[1] == 5, "setInt shard");
            }
        }
    }

    static void shardAsLong(Connection db) throws Exception {
        try (PreparedStatement next = db.prepareStatement("SELECT snowid_next(?)")) {
            next.setLong(1, 5L);
            try (ResultSet rs = next.executeQuery()) {
                ensure(SNOWID_NEXT_ACCEPTS_BIGINT, "EXPECTATION CHANGED: snowid_next(bigint) now works; flip SNOWID_NEXT_ACCEPTS_BIGINT");
                ensure(rs.next() && decode(rs.getLong(1))[1] == 5, "setLong shard");
            }
        } catch (SQLException e) {
            ensure(!SNOWID_NEXT_ACCEPTS_BIGINT, "setLong shard failed: " + e);
            ensure("42883".equals(e.getSQLState()), "expected 42883, got " + e.getSQLState() + ": " + e.getMessage());
            db.rollback();
        }
    }

    static void batch(Connection db) throws Exception {
        List<Long> ids = new ArrayList<>();
        try (PreparedStatement insert = db.prepareStatement(
                "INSERT INTO orders (note) VALUES (?)", new String[] {"id"})) {
            for (int i = 0; i < BATCH; i++) {
                insert.setString(1, "batch " + i);
                insert.addBatch();
            }
            insert.executeBatch();
            try (ResultSet keys = insert.getGeneratedKeys()) {
                while (keys.next()) {
                    ids.add(keys.getLong(1));
                }
            }
        }
        ensure(ids.size() == BATCH, "keys from the batch: " + ids.size());
        ensure(new HashSet<>(ids).size() == BATCH, "distinct keys");
        for (int i = 1; i < ids.size(); i++) {
            ensure(ids.get(i - 1) < ids.get(i), "keys increase in batch order");
        }
        try (PreparedStatement check = db.prepareStatement("SELECT note FROM orders WHERE id = ?")) {
            for (int i = 0; i < BATCH; i += 97) {
                check.setLong(1, ids.get(i));
                try (ResultSet rs = check.executeQuery()) {
                    ensure(rs.next() && rs.getString(1).equals("batch " + i), "batch row " + i);
                }
            }
        }
    }

    public static void main(String[] args) throws Exception {
        String url = "jdbc:postgresql://" + env("PGHOST", "127.0.0.1") + ":" + env("PGPORT", "5432")
                + "/" + env("PGDATABASE", "postgres");
        int passed = 0, failed = 0;
        try (Connection db = DriverManager.getConnection(url, env("PGUSER", "postgres"), "")) {
            try (Statement s = db.createStatement()) {
                s.execute("DROP TABLE IF EXISTS orders");
                s.execute("CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowid_next(5), note text NOT NULL)");
            }
            db.setAutoCommit(false);
            String[] names = {
                "executeUpdate with RETURN_GENERATED_KEYS, getLong",
                "INSERT ... RETURNING id, decoded against snowid_parse",
                "shard with setInt",
                "shard with setLong: " + (SNOWID_NEXT_ACCEPTS_BIGINT ? "works" : "expected error 42883"),
                "batch of " + BATCH + " inserts with generated keys",
            };
            Check[] checks = {
                SnowidJdbc::generatedKeys, SnowidJdbc::returningAndParse, SnowidJdbc::shardAsInt,
                SnowidJdbc::shardAsLong, SnowidJdbc::batch,
            };
            for (int i = 0; i < checks.length; i++) {
                try {
                    checks[i].run(db);
                    db.commit();
                    passed++;
                    System.out.println("ok - " + names[i]);
                } catch (Exception | AssertionError e) {
                    db.rollback();
                    failed++;
                    System.out.println("FAILED - " + names[i] + ": " + e);
                }
            }
        }
        System.out.println("jdbc: " + passed + " passed, " + failed + " failed");
        System.exit(failed == 0 ? 0 : 1);
    }

    static String env(String name, String fallback) {
        String value = System.getenv(name);
        return value == null || value.isEmpty() ? fallback : value;
    }
}
