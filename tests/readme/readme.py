"""The README as tests: its SQL runs as written, and its client snippets are the client tests' code.

    python3 readme.py sql README.md > all.sql     every ```sql block, in order, as one psql script
    python3 readme.py snippets README.md ROOT     check every quoted snippet against its source

A block preceded by the line `<!-- illustration -->` is not run (it needs several servers, say).
A block preceded by `<!-- needs EXTENSION -->` runs only when the server has that extension
available, in the version the README is written for (see NEEDS); otherwise the script prints, once
per extension, a line `readme: EXTENSION blocks: not run: WHY`, which tests/readme/run reports.
A block preceded by `<!-- snippet: PATH#NAME -->` must equal the region of PATH (relative to
ROOT) between the comment lines `snippet: NAME` and `end snippet`, ignoring common indentation.
"""

import re
import sys
import textwrap

FENCE = re.compile(r"^\s*```(\w*)\s*$")
MARK = re.compile(r"^\s*<!--\s*(illustration|snippet:\s*(\S+)|needs\s+(\w+))\s*-->\s*$")

# For each extension a block may need: the oldest major version the README's blocks are written
# for (pg_partman's 4.x API differs from 5.x's).
NEEDS = {"pg_partman": 5}


def blocks(path):
    """(language, marker, first line number, text) for every fenced block."""
    lines = open(path, encoding="utf-8").read().splitlines()
    i, marker = 0, None
    while i < len(lines):
        m = MARK.match(lines[i])
        f = FENCE.match(lines[i])
        if m:
            marker = ("needs", m.group(3)) if m.group(3) else (m.group(2) or m.group(1))
        elif f:
            lang, start, body = f.group(1), i + 1, []
            i += 1
            while i < len(lines) and not lines[i].lstrip().startswith("```"):
                body.append(lines[i])
                i += 1
            yield lang, marker, start + 1, textwrap.dedent("\n".join(body))
            marker = None
        elif lines[i].strip():
            marker = None
        i += 1


def needs_check(ext):
    """psql lines that set :needs_EXT to whether the server has EXT available in a version the
    README is written for, and print the not-run line when it has not."""
    if ext not in NEEDS:
        raise SystemExit(f"README.md: no requirement known for <!-- needs {ext} --> (see NEEDS)")
    var = f"needs_{ext}"
    return (
        f"SELECT coalesce(bool_or(split_part(default_version, '.', 1)::int >= {NEEDS[ext]}), false) AS {var},\n"
        f"       coalesce('{ext} ' || max(default_version) || ' is installed into PostgreSQL '\n"
        f"                || current_setting('server_version') || ', and the README is written for {NEEDS[ext]}.x',\n"
        f"                '{ext} is not installed into PostgreSQL ' || current_setting('server_version')) AS {var}_why\n"
        f"FROM pg_available_extensions WHERE name = '{ext}' \\gset\n"
        f"\\if :{var}\n"
        f"\\else\n"
        f"\\echo 'readme: {ext} blocks: not run:' :{var}_why\n"
        f"\\endif\n"
    )


def sql(readme):
    out, checked = [], set()
    for lang, marker, line, text in blocks(readme):
        if lang != "sql" or marker == "illustration":
            continue
        block = f"\\echo README.md line {line}\n{text}\n"
        if isinstance(marker, tuple):
            ext = marker[1]
            if ext not in checked:
                out.append(needs_check(ext))
                checked.add(ext)
            block = f"\\if :needs_{ext}\n{block}\\endif\n"
        out.append(block)
    sys.stdout.write("\n".join(out))


def region(path, name):
    lines = open(path, encoding="utf-8").read().splitlines()
    begin = re.compile(r"^\s*(#|//|--)\s*snippet:\s*" + re.escape(name) + r"\s*$")
    end = re.compile(r"^\s*(#|//|--)\s*end snippet\s*$")
    for i, line in enumerate(lines):
        if begin.match(line):
            body = []
            for later in lines[i + 1:]:
                if end.match(later):
                    return textwrap.dedent("\n".join(body)).strip("\n")
                body.append(later)
    raise SystemExit(f"{path}: no snippet named {name}")


def snippets(readme, root):
    checked, failures = 0, 0
    for lang, marker, line, text in blocks(readme):
        if not marker or marker == "illustration" or isinstance(marker, tuple):
            continue
        path, name = marker.split("#", 1)
        want = region(f"{root}/{path}", name)
        if textwrap.dedent(text).strip("\n") != want:
            failures += 1
            print(f"README.md line {line}: differs from {path}#{name}:\n--- README\n{text}\n--- {path}\n{want}")
        checked += 1
    print(f"{checked} snippets checked, {failures} differ")
    sys.exit(1 if failures or not checked else 0)


if __name__ == "__main__":
    {"sql": lambda: sql(sys.argv[2]), "snippets": lambda: snippets(sys.argv[2], sys.argv[3])}[sys.argv[1]]()
