"""The README and docs/ as tests: their SQL runs as written, and their client snippets are the
client tests' code.

    python3 readme.py sql FILE > file.sql          every ```sql block of FILE, in order, as one psql
                                                   script that echoes "FILE line N" before each
    python3 readme.py snippets ROOT FILE...        check every quoted snippet of the FILEs against
                                                   its source; fails if none of them quotes any

A block preceded by the line `<!-- illustration -->` is not run (it needs several servers, say).
A block preceded by `<!-- needs EXTENSION -->` runs only when the server has that extension
available in one of the major versions the docs are written for (see NEEDS), and one preceded by
`<!-- needs EXTENSION MAJOR -->` only when it has that major version of it (pg_partman's 4.x and
5.x APIs differ). When the extension is missing, or in a version the docs are not written for,
the script prints, once per extension and file, a line `readme: FILE: EXTENSION blocks: not run:
WHY`, which tests/readme/run reports; the blocks for another major version than the installed one
are left out with a line `readme: FILE: EXTENSION N.x blocks: for another version: WHY`.
A block preceded by `<!-- snippet: PATH#NAME -->` must equal the region of PATH (relative to
ROOT) between the comment lines `snippet: NAME` and `end snippet`, ignoring common indentation.
"""

import re
import sys
import textwrap

FENCE = re.compile(r"^\s*```(\w*)\s*$")
MARK = re.compile(
    r"^\s*<!--\s*(illustration|snippet:\s*(\S+)|needs\s+(\w+)(?:\s+(\d+))?)\s*-->\s*$"
)

# For each extension a block may need: the major versions the docs' blocks are written for
# (pg_partman 4.x, Debian 12's, and 5.x, whose APIs differ).
NEEDS = {"pg_partman": (4, 5)}


def blocks(path):
    """(language, marker, first line number, text) for every fenced block."""
    lines = open(path, encoding="utf-8").read().splitlines()
    i, marker = 0, None
    while i < len(lines):
        m = MARK.match(lines[i])
        f = FENCE.match(lines[i])
        if m:
            if m.group(3):
                marker = ("needs", m.group(3), m.group(4))
            else:
                marker = m.group(2) or m.group(1)
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


def needs_check(doc, ext):
    """psql lines that set :needs_EXT to whether the server has EXT available in a major version
    the docs are written for, and :needs_EXT_N to whether it has major version N; they print the
    not-run line when it has none of them, and a line for each major version whose blocks are
    left out."""
    if ext not in NEEDS:
        raise SystemExit(f"{doc}: no requirement known for <!-- needs {ext} --> (see NEEDS)")
    var = f"needs_{ext}"
    majors = NEEDS[ext]
    written_for = " and ".join(f"{m}.x" for m in majors)
    listed = ", ".join(f"'{m}'" for m in majors)
    columns = "".join(
        f"       coalesce(bool_or(split_part(default_version, '.', 1) = '{m}'), false) AS {var}_{m},\n"
        for m in majors
    )
    lines = [
        f"SELECT coalesce(bool_or(split_part(default_version, '.', 1) IN ({listed})), false) AS {var},\n"
        f"{columns}"
        f"       coalesce('{ext} ' || max(default_version) || ' is installed into PostgreSQL '\n"
        f"                || current_setting('server_version') || ', and {doc} is written for {written_for}',\n"
        f"                '{ext} is not installed into PostgreSQL ' || current_setting('server_version')) AS {var}_why,\n"
        f"       coalesce(max(default_version), '') AS {var}_version\n"
        f"FROM pg_available_extensions WHERE name = '{ext}' \\gset\n"
        f"\\if :{var}\n"
    ]
    for m in majors:
        lines.append(
            f"\\if :{var}_{m}\n"
            f"\\else\n"
            f"\\echo 'readme: {doc}: {ext} {m}.x blocks: for another version: {ext}' :{var}_version 'is installed'\n"
            f"\\endif\n"
        )
    lines.append(f"\\else\n\\echo 'readme: {doc}: {ext} blocks: not run:' :{var}_why\n\\endif\n")
    return "".join(lines)


def sql(doc):
    out, checked = [], set()
    for lang, marker, line, text in blocks(doc):
        if lang != "sql" or marker == "illustration":
            continue
        block = f"\\echo {doc} line {line}\n{text}\n"
        if isinstance(marker, tuple):
            _, ext, major = marker
            if ext not in checked:
                out.append(needs_check(doc, ext))
                checked.add(ext)
            if major is not None and int(major) not in NEEDS[ext]:
                raise SystemExit(f"{doc} line {line}: {ext} {major}.x is not in NEEDS")
            var = f"needs_{ext}_{major}" if major else f"needs_{ext}"
            block = f"\\if :{var}\n{block}\\endif\n"
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


def snippets(root, docs):
    total, failures = 0, 0
    for doc in docs:
        checked = 0
        for lang, marker, line, text in blocks(doc):
            if not marker or marker == "illustration" or isinstance(marker, tuple):
                continue
            path, name = marker.split("#", 1)
            want = region(f"{root}/{path}", name)
            if textwrap.dedent(text).strip("\n") != want:
                failures += 1
                print(f"{doc} line {line}: differs from {path}#{name}:\n--- {doc}\n{text}\n--- {path}\n{want}")
            checked += 1
        if checked:
            print(f"{doc}: {checked} snippets checked")
        total += checked
    print(f"{total} snippets checked, {failures} differ")
    sys.exit(1 if failures or not total else 0)


if __name__ == "__main__":
    {"sql": lambda: sql(sys.argv[2]), "snippets": lambda: snippets(sys.argv[2], sys.argv[3:])}[sys.argv[1]]()
