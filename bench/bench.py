"""snowid's benchmark, run by bench/run against a private preloaded server.

The machines are shared and noisy (the executor floor alone has moved from 250 to 420 ms between
two identical runs), so every figure comes from interleaved rounds, in a shuffled order each
round, and is reported as a median with its spread (min–max over the rounds). Ratios are taken
per round, against the baseline measured in that same round, and only then summarised: that
cancels the machine's drift between rounds. Results go to results-pgNN.md (a table with PASS or
MISS next to each target) and chart-pgNN.svg; a --quick run writes the same names with -quick.
"""

import argparse
import json
import os
import platform
import random
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import time

INSTAGRAM = """
CREATE SEQUENCE IF NOT EXISTS insta_seq;
-- Instagram's published approach (2011): one PL/pgSQL function per schema, shard hard-coded.
CREATE OR REPLACE FUNCTION insta_next_id(OUT result bigint) AS $$
DECLARE
    our_epoch bigint := 1314220021721;
    seq_id bigint;
    now_millis bigint;
    shard_id int := 5;
BEGIN
    SELECT nextval('insta_seq') % 1024 INTO seq_id;
    SELECT FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000) INTO now_millis;
    result := (now_millis - our_epoch) << 23;
    result := result | (shard_id << 10);
    result := result | (seq_id);
END;
$$ LANGUAGE plpgsql;
"""

FLOOR = "floor: int4abs"
NEXTVAL = "nextval()"
UUID = "gen_random_uuid()"
MASK = "snowid_mask()"
HMAC = "pgcrypto hmac()"
# The benchmark server's snowid.mask_key (bench/run sets it), and the same 16 bytes as the
# HMAC key.
BENCH_KEY = "3f9c1a7e5b2d4086c1e7a9f3b5d70248"
BENCH_KEY_BYTES = "\\x" + BENCH_KEY
MANY = "snowid_next, many shards"
SNOWID_ROWS = [MANY, "snowid_next, one shard", "snowid_next() (own shard)"]

# (name, expression over g, the function it needs or None). The one-shard rows use shard 5000,
# away from the low shards that snowid_next() picks by backend number, so that the two never
# share a shard's lead.
PER_CALL = [
    (FLOOR, "int4abs((g % 8192)::int)", None),
    (MANY, "snowid_next((g % 8192)::int)", None),
    ("snowid_next, one shard", "snowid_next(5000)", None),
    ("snowid_next() (own shard)", "snowid_next()", None),
    (NEXTVAL, "nextval('bench_seq')", None),
    ("random()", "random()", None),
    (UUID, "gen_random_uuid()", None),
    ("uuidv7()", "uuidv7()", "uuidv7()"),
    ("Instagram PL/pgSQL", "insta_next_id()", None),
    (MASK, "snowid_mask(g)", "snowid_mask(bigint)"),
    ("snowid_unmask()", "snowid_unmask(g)", "snowid_unmask(bigint)"),
    ("snowid_mask_text()", "snowid_mask_text(g)", "snowid_mask_text(bigint)"),
    ("snowid_unmask_text()", "snowid_unmask_text('2D476KTY36P9K')", "snowid_unmask_text(text)"),
    ("snowid_mask_text(), a domain", "snowid_mask_text(g, 'photos', 'pho')",
     "snowid_mask_text(bigint,text,text)"),
    (HMAC, f"hmac(int8send(g), '{BENCH_KEY_BYTES}'::bytea, 'sha256')", "hmac(bytea,bytea,text)"),
]

# The public IDs' mask beside the two things it is measured against in the same rounds: a random
# UUID (the mask should cost at most half of it) and a keyed hash of the ID (pgcrypto's HMAC-SHA256,
# the usual one-way way to hide an ID), where pgcrypto is installed.
MASK_ROWS = [MASK, "snowid_unmask()", "snowid_mask_text()", "snowid_unmask_text()",
             "snowid_mask_text(), a domain"]

# (key, column definition, the function it needs or None).
KEYS = [
    ("snowid", "bigint PRIMARY KEY DEFAULT snowid_next({shard})", None),
    ("bigserial", "bigserial PRIMARY KEY", None),
    ("uuid v4", "uuid PRIMARY KEY DEFAULT gen_random_uuid()", None),
    ("uuid v7", "uuid PRIMARY KEY DEFAULT uuidv7()", "uuidv7()"),
    ("Instagram", "bigint PRIMARY KEY DEFAULT insta_next_id()", None),
]

CLIENTS = [1, 2, 4, 8]
CEILING = 1_024_000
LEAD_IDS = 1_024_000  # the default snowid.max_lead of 1 s, at 1,024 IDs per millisecond


class Server:
    def __init__(self, bindir, host, port):
        self.bindir, self.host, self.port = bindir, host, str(port)

    def psql_command(self):
        return [os.path.join(self.bindir, "psql"), "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1",
                "-h", self.host, "-p", self.port, "-U", "postgres", "-d", "postgres"]

    def psql(self, sql):
        out = subprocess.run(self.psql_command(), input=sql, capture_output=True, text=True,
                             check=True)
        return out.stdout

    def has(self, function):
        return function is None or self.psql(f"SELECT to_regprocedure('{function}') IS NOT NULL").strip() == "t"

    def timed_ms(self, sql):
        """Server-side milliseconds of one statement, from psql's \\timing."""
        out = self.psql(f"\\timing on\n\\o /dev/null\n{sql};\n")
        return float(re.findall(r"Time: ([0-9.]+) ms", out)[-1])

    def pgbench_tps(self, script, clients, seconds):
        with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
            f.write(script)
        try:
            out = subprocess.run(
                [os.path.join(self.bindir, "pgbench"), "-n", "-h", self.host, "-p", self.port,
                 "-U", "postgres", "-c", str(clients), "-j", str(min(clients, 2)),
                 "-T", str(seconds), "-f", f.name, "postgres"],
                capture_output=True, text=True, check=True).stdout
        finally:
            os.unlink(f.name)
        return float(re.search(r"tps = ([0-9.]+)", out).group(1))


class Spread:
    """The median and the min–max of one series of per-round samples."""

    def __init__(self, samples):
        self.samples = list(samples)
        self.median = statistics.median(self.samples)
        self.lo, self.hi = min(self.samples), max(self.samples)

    def range(self, fmt):
        return f"{self.lo:{fmt}}–{self.hi:{fmt}}"


def per_round_ratios(samples, baseline):
    """Each round's value over the same round's baseline, summarised."""
    return Spread(v / b for v, b in zip(samples, baseline))


def per_call(db, methods, rounds, calls):
    samples = {name: [] for name, _ in methods}
    # A warm-up pass: catalog lookups, PL/pgSQL compilation, the first sequence page.
    for _, expr in methods:
        db.timed_ms(f"SELECT count({expr}) FROM generate_series(1, 10000) g")
    for r in range(rounds):
        order = list(methods)
        random.Random(r).shuffle(order)
        for name, expr in order:
            ms = db.timed_ms(f"SELECT count({expr}) FROM generate_series(1, {calls}) g")
            samples[name].append(ms * 1e6 / calls)
    return samples


def sustained_rate(db, ids):
    # Push shard 77 to its lead bound first, so the measurement is the steady ceiling and not
    # the lead's one-off allowance.
    db.timed_ms(f"SELECT count(snowid_next(77)) FROM generate_series(1, {LEAD_IDS + 500_000})")
    ms = db.timed_ms(f"SELECT count(snowid_next(77)) FROM generate_series(1, {ids})")
    return ids / (ms / 1000)


def create_table(db, name, key, shard):
    db.psql(f"DROP TABLE IF EXISTS {name}; CREATE TABLE {name} (id {key.format(shard=shard)});")


def bulk_inserts(db, keys, rounds, rows):
    samples = {k: [] for k, _ in keys}
    sizes = {}
    shard = 100
    for r in range(rounds):
        order = list(keys)
        random.Random(100 + r).shuffle(order)
        for key, ddl in order:
            shard += 1  # a fresh shard each time: no round starts at the lead bound
            create_table(db, "bulk", ddl, shard)
            db.psql("CHECKPOINT")
            samples[key].append(db.timed_ms(f"INSERT INTO bulk SELECT FROM generate_series(1, {rows})"))
            sizes[key] = int(db.psql("SELECT pg_relation_size('bulk_pkey')"))
    db.psql("DROP TABLE bulk")
    return samples, sizes


def concurrent_inserts(db, keys, seconds, rounds):
    """pgbench INSERT ... DEFAULT VALUES; rounds interleave the key types."""
    samples = {k: {c: [] for c in CLIENTS} for k, _ in keys}
    shard = 200
    for r in range(rounds):
        for clients in CLIENTS:
            order = list(keys)
            random.Random(200 + 10 * r + clients).shuffle(order)
            for key, ddl in order:
                shard += 1
                create_table(db, "ins", ddl, shard)
                db.psql("CHECKPOINT")
                tps = db.pgbench_tps("INSERT INTO ins DEFAULT VALUES;\n", clients, seconds)
                samples[key][clients].append(tps)
    db.psql("DROP TABLE ins")
    return samples


def opened_files(db, expr, calls=20):
    """The files a backend opens while running expr `calls` times (`strace -e trace=openat`),
    or a string saying why they could not be listed."""
    text, files = traced(db, expr, calls, ["-e", "trace=open,openat,openat2"])
    return text if files is None else files


def traced(db, expr, calls, strace_options):
    """Runs expr `calls` times in one backend under strace; (its output file's text, the files
    it opened) or (a string saying why not, None)."""
    if not shutil.which("strace"):
        return "strace is not installed", None
    session = subprocess.Popen(db.psql_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, bufsize=1)
    tracer = None
    try:
        session.stdin.write("SELECT pg_backend_pid();\n")
        session.stdin.flush()
        pid = int(session.stdout.readline())
        with tempfile.NamedTemporaryFile("r", suffix=".strace") as output:
            tracer = subprocess.Popen(["strace", *strace_options, "-o", output.name, "-p", str(pid)],
                                      stderr=subprocess.PIPE, text=True)
            line = tracer.stderr.readline()  # "strace: Process N attached", or why not
            if "attached" not in line:
                tracer.wait()
                return f"strace could not attach: {line.strip()}", None
            session.stdin.write(f"SELECT count({expr}) FROM generate_series(1, {calls}) g;\n")
            session.stdin.flush()
            session.stdout.readline()
            tracer.send_signal(signal.SIGINT)
            tracer.wait(timeout=30)
            text = output.read()
            return text, sorted(set(re.findall(r'open[a-z0-9]*\([^"]*"([^"]+)"', text)))
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        return f"strace failed: {e}", None
    finally:
        if tracer is not None and tracer.poll() is None:
            tracer.kill()
        session.stdin.close()
        session.wait(timeout=30)


def syscalls_per_call(db, expr, calls):
    """System calls per call of expr in one backend, counted by `strace -c` attached to it:
    {name: calls per SQL call}, or a string saying why they could not be counted."""
    text, files = traced(db, expr, calls, ["-c"])
    if files is None:
        return text
    counts = {}
    for row in text.splitlines():
        fields = row.split()
        if len(fields) >= 5 and re.fullmatch(r"[0-9.]+", fields[0]) and fields[-1] != "total":
            counts[fields[-1]] = int(fields[3]) / calls
    return counts


def describe_syscalls(counts):
    if isinstance(counts, str):
        return counts
    frequent = sorted(((n, c) for n, c in counts.items() if c >= 0.5), key=lambda nc: -nc[1])
    if not frequent:
        return "none per call"
    return ", ".join(f"{c:.2f} {n}" for n, c in frequent) + " per call"


def random_source_notes(db, samples, calls):
    """What the UUID generators' cost is made of, measured rather than assumed: the build's
    random source, the system calls and files each generator uses per call, and, where uuidv7()
    exists, its cost over the floor next to gen_random_uuid()'s, which draws its random bytes
    from the same pg_strong_random() (16 of them; uuidv7() draws 8)."""
    ssl = db.psql("SHOW ssl_library").strip()
    n = min(calls, 100_000)
    exprs = [("gen_random_uuid()", "gen_random_uuid()")]
    if "uuidv7()" in samples:
        exprs.insert(0, ("uuidv7()", "uuidv7()"))
    exprs += [("snowid_next()", "snowid_next((g % 8192)::int)"), ("the floor", "int4abs((g % 8192)::int)")]
    calls_text = "; ".join(f"{name} {describe_syscalls(syscalls_per_call(db, expr, n))}"
                           for name, expr in exprs)
    files = opened_files(db, "gen_random_uuid()")
    files_text = (", ".join(files) or "none") if isinstance(files, list) else files
    lines = [
        "Random source: "
        + (f"this build has {ssl}, so pg_strong_random() uses it." if ssl else
           "this build has no OpenSSL (`ssl_library` is empty), so pg_strong_random() reads "
           "/dev/urandom.")
        + f" System calls in a backend (`strace -c`, {n:,} calls each): {calls_text}. "
        f"Files gen_random_uuid() opens: {files_text}."
    ]
    if "uuidv7()" in samples:
        floor = samples[FLOOR]
        v7 = Spread(v - f for v, f in zip(samples["uuidv7()"], floor))
        v4 = Spread(v - f for v, f in zip(samples["gen_random_uuid()"], floor))
        share = Spread(a / b for a, b in zip(v4.samples, v7.samples) if b > 0)
        lines += [
            "",
            f"uuidv7() costs {v7.median:.0f} ns ({v7.range('.0f')}) a call over the floor, and "
            f"gen_random_uuid(), which draws its random bytes from the same pg_strong_random(), "
            f"{v4.median:.0f} ns ({v4.range('.0f')}): per round, gen_random_uuid()'s cost over the "
            f"floor is {share.median:.2f} ({share.range('.2f')}) × uuidv7()'s. "
            + ("So random-number generation dominates uuidv7() in this build; its time part is the "
               "small remainder." if share.median >= 0.7 else
               "So random-number generation does not dominate uuidv7() in this build."),
        ]
    return lines


def lease_writes(db):
    return int(db.psql("SELECT lease_writes FROM snowid_info()"))


def verdict(ok):
    return "PASS" if ok else "MISS"


def plural(c):
    return f"{c} client{'s' if c > 1 else ''}"


def svg_chart(stats, tps, title, path):
    """Two panels: ns per call by method (median bar, min–max whisker), and insert throughput
    (median) by client count."""
    width, height, pad = 1100, 440, 50
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             'font-family="sans-serif" font-size="11">',
             '<rect width="100%" height="100%" fill="white"/>',
             f'<text x="{pad}" y="18" font-size="12" fill="#555555">{title}</text>',
             f'<text x="{pad}" y="36" font-size="14">Per-call cost (ns; median, min–max whisker)</text>']
    names = list(stats)
    top = max(s.hi for s in stats.values())
    bar_w = (width / 2 - 2 * pad) / len(names)
    plot_h = height - 2 * pad - 80
    base = height - pad - 60
    for i, name in enumerate(names):
        s = stats[name]
        h = plot_h * s.median / top
        x = pad + i * bar_w
        y = base - h
        color = "#2b7bb9" if name.startswith("snowid") else "#999999"
        cx = x + bar_w / 2
        parts.append(f'<rect x="{x + 4:.1f}" y="{y:.1f}" width="{bar_w - 8:.1f}" height="{h:.1f}" fill="{color}"/>')
        y_lo, y_hi = base - plot_h * s.lo / top, base - plot_h * s.hi / top
        parts.append(f'<line x1="{cx:.1f}" y1="{y_lo:.1f}" x2="{cx:.1f}" y2="{y_hi:.1f}" stroke="black"/>')
        parts.append(f'<line x1="{cx - 4:.1f}" y1="{y_hi:.1f}" x2="{cx + 4:.1f}" y2="{y_hi:.1f}" stroke="black"/>')
        parts.append(f'<text x="{cx:.1f}" y="{y_hi - 4:.1f}" text-anchor="middle">{s.median:.0f}</text>')
        parts.append(f'<text transform="translate({cx:.1f},{base + 8}) rotate(40)">{name}</text>')
    if tps:
        x0 = width / 2 + pad
        parts.append(f'<text x="{x0}" y="36" font-size="14">INSERT ... DEFAULT VALUES, transactions/s (median)</text>')
        tmax = max(v for series in tps.values() for v in series.values())
        plot_w, plot_h = width / 2 - 2 * pad - 70, height - 2 * pad - 80
        parts.append(f'<text x="{x0 - 8}" y="{pad + 24}" text-anchor="end">{tmax:,.0f}</text>')
        parts.append(f'<text x="{x0 - 8}" y="{pad + 20 + plot_h}" text-anchor="end">0</text>')
        parts.append(f'<line x1="{x0}" y1="{pad + 20 + plot_h}" x2="{x0 + plot_w}" y2="{pad + 20 + plot_h}" stroke="#cccccc"/>')
        colors = ["#2b7bb9", "#e08a1e", "#6aa84f", "#c0392b", "#999999"]
        for i, c in enumerate(CLIENTS):
            x = x0 + plot_w * i / max(len(CLIENTS) - 1, 1)
            parts.append(f'<text x="{x:.1f}" y="{pad + 40 + plot_h}" text-anchor="middle">{plural(c)}</text>')
        for k, (key, series) in enumerate(tps.items()):
            pts = []
            for i, c in enumerate(CLIENTS):
                x = x0 + plot_w * i / max(len(CLIENTS) - 1, 1)
                y = pad + 20 + plot_h * (1 - series[c] / tmax)
                pts.append(f"{x:.1f},{y:.1f}")
            parts.append(f'<polyline points="{" ".join(pts)}" fill="none" stroke="{colors[k]}" stroke-width="2"/>')
            parts.append(f'<text x="{x0 + plot_w + 10}" y="{pad + 30 + 14 * k}" fill="{colors[k]}">{key}</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


def versions_table(ours, theirs, label, their_label):
    """Two builds measured in the same rounds: each against its own floor, and against each other."""
    lines = [
        f"| per call | {their_label}: ns | {their_label}: × floor | {label}: ns | {label}: × floor "
        f"| {label} / {their_label}, min–max |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name in SNOWID_ROWS + [FLOOR, NEXTVAL]:
        a, b = ours[name], theirs[name]
        fa, fb = per_round_ratios(a, ours[FLOOR]), per_round_ratios(b, theirs[FLOOR])
        between = per_round_ratios(a, b)
        lines.append(f"| {name} | {Spread(b).median:.0f} | {fb.median:.2f} ({fb.range('.2f')}) | "
                     f"{Spread(a).median:.0f} | {fa.median:.2f} ({fa.range('.2f')}) | "
                     f"{between.median:.2f} ({between.range('.2f')}) |")
    return lines


def per_call_versions(db, other, methods, rounds, calls):
    """Per-call rounds alternating between two servers, each running the other build."""
    ours, theirs = {n: [] for n, _ in methods}, {n: [] for n, _ in methods}
    for r in range(rounds):
        pair = [(db, ours), (other, theirs)]
        random.Random(-r).shuffle(pair)
        for server, samples in pair:
            for name, values in per_call(server, methods, 1, calls).items():
                samples[name].extend(values)
    return ours, theirs


def per_call_table(samples):
    floor, nextval = samples[FLOOR], samples[NEXTVAL]
    stats = {name: Spread(v) for name, v in samples.items()}
    lines = [
        "| per call | ns, median | ns, min–max | × floor, median | × floor, min–max | × nextval() |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, v in samples.items():
        s, f = stats[name], per_round_ratios(v, floor)
        n = per_round_ratios(v, nextval)
        lines.append(f"| {name} | {s.median:.0f} | {s.range('.0f')} | {f.median:.2f} | "
                     f"{f.range('.2f')} | {n.median:.2f} |")
    return stats, lines


def mask_table(samples):
    """The mask's rows against gen_random_uuid() and pgcrypto's hmac(), per round, and the
    target: a mask that costs at most half of gen_random_uuid()."""
    rows = [name for name in MASK_ROWS if name in samples]
    if not rows:
        return [], []
    against = [UUID] + ([HMAC] if HMAC in samples else [])
    lines = [
        "| per call | " + " | ".join(f"× {a}, median (min–max)" for a in against)
        + " | over the floor, ns, median |",
        "|---|" + "---:|" * (len(against) + 1),
    ]
    for name in rows:
        cells = [per_round_ratios(samples[name], samples[a]) for a in against]
        over = Spread(v - f for v, f in zip(samples[name], samples[FLOOR]))
        lines.append(f"| {name} | " + " | ".join(f"{c.median:.2f} ({c.range('.2f')})" for c in cells)
                     + f" | {over.median:.0f} |")
    if HMAC not in samples:
        lines += ["", "pgcrypto is not installed in this build: no hmac() row."]
    mask_uuid = per_round_ratios(samples[MASK], samples[UUID])
    targets = [("snowid_mask ≤ 0.5 × gen_random_uuid()", mask_uuid, mask_uuid.median <= 0.5)]
    return lines, targets


def spread_data(s, digits=2):
    return {"median": round(s.median, digits), "min": round(s.lo, digits), "max": round(s.hi, digits)}


def per_call_data(samples):
    """Each per-call row: ns, and its ratios to the floor and to nextval() taken per round."""
    return {name: {"ns": spread_data(Spread(v), 1),
                   "x_floor": spread_data(per_round_ratios(v, samples[FLOOR])),
                   "x_nextval": spread_data(per_round_ratios(v, samples[NEXTVAL]))}
            for name, v in samples.items()}


def mask_data(samples):
    """The mask's rows against gen_random_uuid() and pgcrypto's hmac(), per round."""
    against = [a for a in (UUID, HMAC) if a in samples]
    return {name: {a: spread_data(per_round_ratios(samples[name], samples[a])) for a in against}
            for name in MASK_ROWS if name in samples}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bindir", required=True)
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true", help="fewer rounds, calls and rows")
    ap.add_argument("--per-call-only", action="store_true", help="just the per-call table, printed")
    ap.add_argument("--against-port", help="a second server, running another build of snowid")
    ap.add_argument("--against-host", help="the second server's socket directory")
    ap.add_argument("--against-library", help="the path the second server preloads snowid from")
    ap.add_argument("--against-version", help="the extension version that build installs")
    ap.add_argument("--citus", action="store_true",
                    help="this server preloads Citus: create it, and take 8,191 shards")
    ap.add_argument("--label", default="this build")
    ap.add_argument("--against-label", default="the other build")
    args = ap.parse_args()
    db = Server(args.bindir, args.host, args.port)
    if args.citus:
        db.psql("CREATE EXTENSION citus;")
    db.psql("CREATE EXTENSION snowid; CREATE SEQUENCE bench_seq;" + INSTAGRAM)
    if db.psql("SELECT count(*) FROM pg_available_extensions WHERE name = 'pgcrypto'").strip() == "1":
        db.psql("CREATE EXTENSION pgcrypto")
    version = db.psql("SHOW server_version").strip()
    major = int(db.psql("SHOW server_version_num")) // 10000
    snowid = db.psql("SELECT extversion FROM pg_extension WHERE extname = 'snowid'").strip()
    day = time.strftime("%Y-%m-%d", time.gmtime())
    methods = [(n, e) for n, e, needs in PER_CALL if db.has(needs)]
    if args.citus:
        # Shard 8191 is not the servers' (0-8190 by hand, so that a Citus node claims them all).
        methods = [(n, e.replace("% 8192", "% 8191")) for n, e in methods]
    keys = [(k, d) for k, d, needs in KEYS if db.has(needs)]
    load_before = os.getloadavg()

    # Two rounds' calls fit in a shard's one-second lead (1,024,000 IDs), even when the shuffle
    # puts a one-shard row last in a round and first in the next: those rows then time the
    # generator, and the sustained rate below times the ceiling a shard meets past its lead.
    rounds, calls = (5, 200_000) if args.quick else (11, 500_000)
    assert 2 * calls < LEAD_IDS
    if args.against_port:
        other = Server(args.bindir, args.against_host or args.host, args.against_port)
        version_clause = f" VERSION '{args.against_version}'" if args.against_version else ""
        other.psql(f"CREATE EXTENSION snowid{version_clause}; CREATE SEQUENCE bench_seq;" + INSTAGRAM +
                   f"UPDATE pg_catalog.pg_proc SET probin = '{args.against_library}' "
                   "WHERE probin = '$libdir/snowid';")
        versions = [(n, e) for n, e in methods if n in SNOWID_ROWS + [FLOOR, NEXTVAL]]
        print(f"PostgreSQL {version}: per-call cost of two builds, {rounds} rounds ...", flush=True)
        ours, theirs = per_call_versions(db, other, versions, rounds, calls)
        print("\n".join(versions_table(ours, theirs, args.label, args.against_label)))
        return
    print(f"PostgreSQL {version}: per-call cost, {rounds} rounds ...", flush=True)
    samples = per_call(db, methods, rounds, calls)
    stats, call_lines = per_call_table(samples)
    mask_lines, mask_targets = mask_table(samples)
    if args.per_call_only:
        print("\n".join(call_lines + [""] + mask_lines))
        return
    print("sustained single-shard rate ...", flush=True)
    rate = sustained_rate(db, 2_000_000 if args.quick else 5_000_000)
    bulk_rounds, rows = (2, 200_000) if args.quick else (5, 1_000_000)
    print(f"bulk inserts, {bulk_rounds} rounds ...", flush=True)
    bulk, sizes = bulk_inserts(db, keys, bulk_rounds, rows)
    ins_rounds, seconds = (2, 1) if args.quick else (3, 3)
    print(f"concurrent inserts, {ins_rounds} rounds ...", flush=True)
    writes_before, started = lease_writes(db), time.monotonic()
    tps = concurrent_inserts(db, keys, seconds, ins_rounds)
    writes = lease_writes(db) - writes_before
    elapsed = time.monotonic() - started
    notes = random_source_notes(db, samples, calls)
    load_after = os.getloadavg()

    many = per_round_ratios(samples[MANY], samples[FLOOR])
    many_nextval = per_round_ratios(samples[MANY], samples[NEXTVAL])
    bulk_ratio = per_round_ratios(bulk["snowid"], bulk["bigserial"])
    rows_label = f"{rows // 1000}k" if rows < 1_000_000 else f"{rows // 1_000_000}M"
    mode = "quick run (a smoke check; not a result)" if args.quick else "full run"
    lines = [
        f"snowid {snowid} on PostgreSQL {version}, {mode}, {day}. Machine: {os.cpu_count()} cores, "
        f"{platform.machine()}; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after.",
        "",
        f"Per call: {rounds} interleaved rounds, in a shuffled order each round, of "
        f"`SELECT count(f) FROM generate_series(1, {calls:,}) g`. The ratios are taken per round "
        "against that round's floor (or nextval()), then summarised: median and min–max over "
        "the rounds.",
        "",
        *call_lines,
        "",
        f"The one-shard rows stay within a shard's one-second lead ({LEAD_IDS:,} IDs, regained "
        "at real-time rate), so they time the generator; `snowid_next()` "
        "without a shard uses its backend's own shard, so one session is one shard. Past the lead "
        f"a single shard is held to the layout's ceiling of {CEILING:,} IDs/s:",
        "",
        f"Sustained rate on one shard, at the lead bound: {rate:,.0f} IDs/s "
        f"({rate / CEILING:.3f} × the {CEILING:,}/s ceiling).",
        "",
        f"High-water mark writes (each an fsync) during the concurrent inserts: {writes} in "
        f"{elapsed:.0f} s, {writes / elapsed:.2f} per second.",
        "",
        f"Bulk: `INSERT INTO t SELECT FROM generate_series(1, {rows:,})`, a fresh table each time, "
        f"{bulk_rounds} interleaved rounds; × bigserial is taken per round.",
        "",
        f"| key | bulk INSERT of {rows_label} rows, ms, median | min–max | × bigserial, median | "
        "× bigserial, min–max | PK index, MiB |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for key, _ in keys:
        s, r = Spread(bulk[key]), per_round_ratios(bulk[key], bulk["bigserial"])
        lines.append(f"| {key} | {s.median:.0f} | {s.range('.0f')} | {r.median:.2f} | "
                     f"{r.range('.2f')} | {sizes[key] / 2**20:.1f} |")
    lines += [
        "",
        f"Concurrent: pgbench `INSERT INTO t DEFAULT VALUES`, {ins_rounds} interleaved rounds of "
        f"{seconds} s; transactions per second, median (min–max).",
        "",
        "| key | " + " | ".join(plural(c) for c in CLIENTS) + " |",
        "|---|" + "---:|" * len(CLIENTS),
    ]
    for key, _ in keys:
        cells = []
        for c in CLIENTS:
            s = Spread(tps[key][c])
            cells.append(f"{s.median:,.0f} ({s.lo:,.0f}–{s.hi:,.0f})")
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    if mask_lines:
        lines += [
            "",
            "Public IDs: the mask's rows above, each per round over gen_random_uuid() and "
            "pgcrypto's `hmac(int8send(g), key, 'sha256')` in the same round, then summarised.",
            "",
            *mask_lines,
        ]
    if notes:
        lines += ["", *notes]
    targets = [
        ("snowid_next across many shards ≤ 1.3 × the floor", many, many.median <= 1.3),
        ("snowid_next across many shards ≤ 0.6 × nextval()", many_nextval, many_nextval.median <= 0.6),
        ("one shard sustains ≥ 0.95 × 1,024,000 IDs/s", Spread([rate / CEILING]), rate >= 0.95 * CEILING),
        ("bulk insert keyed by snowid_next ≤ 1.0 × bigserial", bulk_ratio, bulk_ratio.median <= 1.0),
        *mask_targets,
    ]
    lines += ["", "| target (on the median) | measured, median | min–max | |", "|---|---:|---:|---|"]
    lines += [f"| {t} | {s.median:.2f} | {s.range('.2f')} | {verdict(ok)} |" for t, s, ok in targets]
    report = "\n".join(lines) + "\n"
    print(report)
    suffix = f"pg{major}" + ("-quick" if args.quick else "")
    results, chart = (os.path.join(args.out, f"{name}-{suffix}{ext}")
                      for name, ext in (("results", ".md"), ("chart", ".svg")))
    with open(results, "w") as f:
        f.write(report)
    # The same run's figures for bench/page, which writes docs/benchmarks.md from them.
    data = {
        "snowid": snowid, "postgresql": version, "major": major, "date": day,
        "mode": "quick" if args.quick else "full",
        "machine": {"cores": os.cpu_count(), "arch": platform.machine(),
                    "load_before": round(load_before[0], 2), "load_after": round(load_after[0], 2)},
        "per_call": {"rounds": rounds, "calls": calls, "rows": per_call_data(samples)},
        "sustained_ids_per_second": round(rate),
        "bulk": {"rounds": bulk_rounds, "rows": rows, "keys": {
            key: {"ms": Spread(bulk[key]).median,
                  "x_bigserial": spread_data(per_round_ratios(bulk[key], bulk["bigserial"])),
                  "pk_mib": round(sizes[key] / 2**20, 1)} for key, _ in keys}},
        "lease_writes_per_second": round(writes / elapsed, 2),
        "mask": mask_data(samples),
        "targets": [{"target": t, "median": round(s.median, 2), "pass": ok} for t, s, ok in targets],
    }
    with open(os.path.splitext(results)[0] + ".json", "w") as f:
        json.dump(data, f, indent=1, ensure_ascii=False)
        f.write("\n")
    medians = {k: {c: statistics.median(v) for c, v in by_count.items()} for k, by_count in tps.items()}
    svg_chart(stats, medians, f"PostgreSQL {version}, {mode}", chart)
    print(f"wrote {results}, its .json and {chart}; bench/page puts them in docs/benchmarks.md")


if __name__ == "__main__":
    main()
