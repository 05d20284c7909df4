// snowid through node-postgres (pg). Run by tests/clients/run, which sets PGHOST, PGPORT,
// PGUSER and PGDATABASE (pg reads them) for a database that has the extension.
//
// snowid IDs are 64-bit and today far above 2^53 (Number.MAX_SAFE_INTEGER): a JavaScript
// Number cannot hold them. node-postgres returns int8 as a string by default, which is exact.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import pg from 'pg';

const clients = [];
async function connect(setup = () => {}) {
  const client = new pg.Client();
  setup(client);
  await client.connect();
  clients.push(client);
  return client;
}

let db; // default type parsing: int8 as string
before(async () => {
  db = await connect();
  await db.query('DROP TABLE IF EXISTS orders');
  await db.query(`CREATE TABLE orders (
                    id bigint PRIMARY KEY DEFAULT snowid_next(5),
                    note text NOT NULL)`);
});
after(async () => {
  await Promise.all(clients.map((c) => c.end()));
});

test('IDs come back as exact strings by default and find their row again', async () => {
  const { rows } = await db.query(
    'INSERT INTO orders (note) VALUES ($1) RETURNING id, id::text AS exact', ['string']);
  const { id, exact } = rows[0];
  assert.equal(typeof id, 'string');
  assert.equal(id, exact);
  assert.ok(BigInt(id) > BigInt(Number.MAX_SAFE_INTEGER));
  const found = await db.query('SELECT note FROM orders WHERE id = $1', [id]);
  assert.deepEqual(found.rows, [{ note: 'string' }]);
});

test('IDs as BigInt with a type parser for OID 20 (int8)', async () => {
  // snippet: node-bigint-parser
  const client = new pg.Client();
  client.setTypeParser(20, BigInt); // int8 -> BigInt, for this client only
  // (or for every client in the process: pg.types.setTypeParser(20, BigInt))
  // end snippet
  await client.connect();
  clients.push(client);

  const { rows } = await client.query(
    'INSERT INTO orders (note) VALUES ($1) RETURNING id, id::text AS exact', ['bigint']);
  const { id, exact } = rows[0];
  assert.equal(typeof id, 'bigint');
  assert.equal(id, BigInt(exact));
  // A BigInt parameter is sent as its decimal text: exact.
  const found = await client.query('SELECT id, note FROM orders WHERE id = $1', [id]);
  assert.deepEqual(found.rows, [{ id, note: 'bigint' }]);

  // JSON.stringify refuses BigInt ...
  assert.throws(() => JSON.stringify(rows[0]), TypeError);
  // snippet: node-json
  // ... so send IDs through JSON as strings: exact both ways.
  const json = JSON.stringify(rows[0], (key, value) =>
    typeof value === 'bigint' ? value.toString() : value);
  const back = JSON.parse(json);
  const again = await client.query('SELECT note FROM orders WHERE id = $1', [back.id]);
  // end snippet
  assert.equal(back.id, exact);
  assert.deepEqual(again.rows, [{ note: 'bigint' }]);
});

test('the default string form survives JSON exactly', async () => {
  const { rows } = await db.query(
    'INSERT INTO orders (note) VALUES ($1) RETURNING id, id::text AS exact', ['json']);
  const back = JSON.parse(JSON.stringify(rows[0]));
  assert.equal(back.id, rows[0].exact);
  const again = await db.query('SELECT note FROM orders WHERE id = $1', [back.id]);
  assert.deepEqual(again.rows, [{ note: 'json' }]);
});

test('pitfall: setTypeParser(20, parseInt) corrupts IDs', async () => {
  const lossy = await connect((c) => c.setTypeParser(20, parseInt));
  // 100 IDs in one statement: mostly one millisecond, consecutive sequence numbers.
  const { rows } = await lossy.query(`INSERT INTO orders (note)
      SELECT 'lossy ' || i FROM generate_series(1, 100) i RETURNING id, id::text AS exact`);
  const numbers = rows.map((r) => r.id);
  assert.ok(numbers.every((n) => typeof n === 'number' && !Number.isSafeInteger(n)));
  // Doubles near 2^57 are 32 apart: most IDs round to another value, and distinct IDs collide.
  assert.ok(rows.some((r) => BigInt(r.id) !== BigInt(r.exact)), 'expected a corrupted ID');
  assert.ok(new Set(numbers).size < rows.length, 'expected distinct IDs to collide');
  // Sent back, such a number finds no row, or another order's row.
  const wrong = rows.find((r) => String(r.id) !== r.exact);
  assert.ok(wrong, 'expected an ID whose Number prints differently');
  const found = await lossy.query('SELECT id::text AS exact FROM orders WHERE id = $1', [wrong.id]);
  assert.ok(found.rows.every((r) => r.exact !== wrong.exact));
});

test('pitfall: an ID as a JSON number is corrupted by JSON.parse (pg parses json that way)', async () => {
  const { rows } = await db.query(`WITH o AS (
        INSERT INTO orders (note) SELECT 'in json ' || i FROM generate_series(1, 100) i
        RETURNING id)
      SELECT json_build_object('id', id) AS as_number,
             json_build_object('id', id::text) AS as_text, id FROM o`);
  assert.ok(rows.some((r) => BigInt(r.as_number.id) !== BigInt(r.id)), 'expected a corrupted ID');
  assert.ok(rows.every((r) => r.as_text.id === r.id)); // cast to text in SQL: exact
});

test('decode an ID in JavaScript, as snowid_parse does on the server', async () => {
  const { rows } = await db.query(`INSERT INTO orders (note) VALUES ('decode')
      RETURNING id, (snowid_parse(id)).*, (SELECT epoch FROM snowid_info()) AS epoch`);
  const { id: text, ts, shard, seq, epoch } = rows[0];
  // snippet: node-decode
  const id = BigInt(text);
  const ms = id >> 23n; // milliseconds since snowid.epoch
  const idShard = (id >> 10n) & 8191n;
  const idSeq = id & 1023n;
  // end snippet
  assert.equal(idShard, BigInt(shard));
  assert.equal(idShard, 5n);
  assert.equal(idSeq, BigInt(seq));
  assert.equal(epoch.getTime() + Number(ms), ts.getTime());
});

test('the shard as a query parameter: a JS number works', async () => {
  // node-postgres sends untyped text parameters, so the server resolves snowid_next(int).
  const { rows } = await db.query('SELECT snowid_next($1) AS id, snowid_shard(snowid_next($1)) AS shard', [5]);
  assert.equal(typeof rows[0].id, 'string');
  assert.equal(rows[0].shard, 5);
  const big = await db.query('SELECT snowid_shard(snowid_next($1)) AS shard', [5n]);
  assert.equal(big.rows[0].shard, 5);
  // Out of range for the function's int: the server's error, not a silent wrap.
  await assert.rejects(db.query('SELECT snowid_next($1)', [2 ** 40]), { code: '22003' });
});

// snippet: node-shard-for
// snowid_shard_for(key): FNV-1a 64 of the key's canonical text as UTF-8, modulo 8192. The
// canonical text of a number is its decimal digits, of a UUID its lowercase hyphenated form.
function shardFor(key) {
  let h = 0xcbf29ce484222325n;
  for (const byte of new TextEncoder().encode(String(key))) {
    h = BigInt.asUintN(64, (h ^ BigInt(byte)) * 0x100000001b3n);
  }
  return Number(h % 8192n);
}
// end snippet

test('JavaScript computes the server\'s shard for 1,000 keys, non-ASCII ones among them', async () => {
  // A small deterministic generator, so that a failure can be replayed.
  let state = 8192n;
  const next = () => {
    state = BigInt.asUintN(64, state * 6364136223846793005n + 1442695040888963407n);
    return state >> 33n;
  };
  const pick = (s) => [...s][Number(next() % BigInt([...s].length))];
  const alphabet = 'abcxyzàéîõüßÆØÅ東京都大阪市😀🙂ДЖЯ';
  const texts = ['', 'alice@example.com', 'é', 'Zürich', '東京', '🙂'];
  while (texts.length < 600) {
    const length = 1 + Number(next() % 12n);
    texts.push(Array.from({ length }, () => pick(alphabet)).join(''));
  }
  const numbers = ['0', '-1', '1341', '9223372036854775807', '-9223372036854775808'];
  while (numbers.length < 200) numbers.push(BigInt.asIntN(64, next() << 31n ^ next()).toString());
  const uuids = [];
  while (uuids.length < 200) {
    const hex = Array.from({ length: 4 }, () => next().toString(16).padStart(8, '0').slice(-8)).join('');
    uuids.push(`${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`);
  }
  assert.equal(texts.length + numbers.length + uuids.length, 1000);
  assert.ok(texts.filter((t) => /[^\x00-\x7f]/.test(t)).length > 500);
  const server = async (type, keys) => (await db.query(
    `SELECT array_agg(snowid_shard_for(k) ORDER BY i) AS shards
       FROM unnest($1::${type}[]) WITH ORDINALITY u(k, i)`, [keys])).rows[0].shards;
  assert.deepEqual(await server('text', texts), texts.map(shardFor));
  assert.deepEqual(await server('bigint', numbers), numbers.map(shardFor));
  // UUIDs in upper case too: the server hashes its canonical lowercase form.
  const upper = uuids.map((u) => u.toUpperCase());
  assert.deepEqual(await server('uuid', upper), uuids.map(shardFor));
});
