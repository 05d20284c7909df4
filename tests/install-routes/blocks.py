"""The README's install and set-up blocks, as tests/install-routes/run runs them.

    python3 blocks.py README.md ROUTE [MAJOR]      the block of that route, as written

A route's block is the fenced block right after the line `<!-- install-route: ROUTE -->`:
`package`, `image` and `source` (the three ways to install), `setup` (the preload line and the
restart) and `first-table` (the first SQL). Each route has exactly one block; a missing or
repeated one fails, so that no route drops out of the test unnoticed.

The shell blocks are written for PostgreSQL 15 and say so in one line, `PG=15`, which is all a
reader changes for another major (the README says so). Every shell block must have exactly one
such line, and no other `15` (a path or package name written for 15 would be wrong for another
major, and a run on 15 could not tell); with MAJOR, that line is printed as `PG=MAJOR` and nothing
else changes.
"""

import re
import sys

MARK = re.compile(r"^\s*<!--\s*install-route:\s*([a-z-]+)\s*-->\s*$")
FENCE = re.compile(r"^\s*```(\w*)\s*$")
MAJOR_LINE = re.compile(r"^PG=15(\s+#.*)?$")
HARD_CODED_MAJOR = re.compile(r"(?<![\d.])15(?![\d.])")
ROUTES = {"package": "sh", "image": "sh", "source": "sh", "setup": "sh", "first-table": "sql"}


def routes(path):
    """{route: [(line number, language, text)]} for every marked block."""
    lines = open(path, encoding="utf-8").read().splitlines()
    found = {}
    for i, line in enumerate(lines):
        m = MARK.match(line)
        if not m:
            continue
        route = m.group(1)
        f = FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
        if not f:
            raise SystemExit(f"{path} line {i + 1}: <!-- install-route: {route} --> is not right above a fenced block")
        body, j = [], i + 2
        while j < len(lines) and not lines[j].lstrip().startswith("```"):
            body.append(lines[j])
            j += 1
        found.setdefault(route, []).append((i + 2, f.group(1), "\n".join(body) + "\n"))
    return found


def block(path, route, major=None):
    if route not in ROUTES:
        raise SystemExit(f"no route {route}: the routes are {', '.join(ROUTES)}")
    found = routes(path)
    unknown = sorted(set(found) - set(ROUTES))
    if unknown:
        raise SystemExit(f"{path}: unknown install routes {', '.join(unknown)}")
    blocks = found.get(route, [])
    if len(blocks) != 1:
        where = ", ".join(f"line {n}" for n, _, _ in blocks) or "none"
        raise SystemExit(f"{path}: route {route} needs exactly one marked block ({where})")
    line, lang, text = blocks[0]
    if lang != ROUTES[route]:
        raise SystemExit(f"{path} line {line}: route {route}'s block is ```{lang}, not ```{ROUTES[route]}")
    if lang != "sh":
        return text
    out = text.splitlines()
    majors = [i for i, l in enumerate(out) if MAJOR_LINE.match(l)]
    if len(majors) != 1:
        raise SystemExit(f"{path} line {line}: route {route}'s block needs exactly one line `PG=15`, the major a reader changes")
    for i, l in enumerate(out):
        if i != majors[0] and HARD_CODED_MAJOR.search(l):
            raise SystemExit(f"{path} line {line + 1 + i}: route {route}'s block names 15 outside its `PG=15` line: use $PG")
    if major is not None:
        out[majors[0]] = f"PG={major}"
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        raise SystemExit(__doc__)
    sys.stdout.write(block(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) == 4 else None))
