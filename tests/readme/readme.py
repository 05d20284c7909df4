"""The README as tests: its SQL runs as written, and its client snippets are the client tests' code.

    python3 readme.py sql README.md > all.sql     every ```sql block, in order, as one psql script
    python3 readme.py snippets README.md ROOT     check every quoted snippet against its source

A block preceded by the line `<!-- illustration -->` is not run (it needs several servers, say).
A block preceded by `<!-- snippet: PATH#NAME -->` must equal the region of PATH (relative to
ROOT) between the comment lines `snippet: NAME` and `end snippet`, ignoring common indentation.
"""

import re
import sys
import textwrap

FENCE = re.compile(r"^\s*```(\w*)\s*$")
MARK = re.compile(r"^\s*<!--\s*(illustration|snippet:\s*(\S+))\s*-->\s*$")


def blocks(path):
    """(language, marker, first line number, text) for every fenced block."""
    lines = open(path, encoding="utf-8").read().splitlines()
    i, marker = 0, None
    while i < len(lines):
        m = MARK.match(lines[i])
        f = FENCE.match(lines[i])
        if m:
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


def sql(readme):
    out = []
    for lang, marker, line, text in blocks(readme):
        if lang == "sql" and marker != "illustration":
            out.append(f"\\echo README.md line {line}\n{text}\n")
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
        if not marker or marker == "illustration":
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
