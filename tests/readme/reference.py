"""The reference against the installed extension: a psql script that lists every difference.

    python3 reference.py docs/reference.md > check.sql

Run check.sql with psql -At in a database where snowid is created, on a server that preloads it.
It prints one line for each difference, and nothing when the reference and the extension agree:
- the version the reference names in its opening sentence ("... of snowid 0.7.0."), against the
  installed extension's version (pg_extension);
- a function of the extension (pg_proc, a member of the extension) whose name and arguments
  (names and types, OUT arguments left out) no heading of the reference's "Functions" section
  gives, or a function the reference gives that the extension lacks;
- a function whose markings, the first sentence after its heading (such as
  `VOLATILE, STRICT, PARALLEL SAFE, superuser only.`), differ from the catalog's: volatility,
  STRICT (left out for functions without arguments, where it means nothing), PARALLEL SAFE,
  RESTRICTED or UNSAFE, and "superuser only" where PUBLIC may not execute it;
- a setting named `snowid.*` in pg_settings that no heading of the "Settings" section gives, or
  one the reference gives that the server lacks (a hidden setting, which pg_settings leaves out
  even for superusers, as it did 0.7.0's `snowid.mask_key`, is found by name with current_setting).

The reference writes a function's heading as `#### \\`name(arg type, arg type DEFAULT x)\\` → ...`,
with every argument named (as the extension names them); several overloads may share a heading.
A setting's heading is `### \\`snowid.name\\``. Argument types are compared as the server spells
them (`int` is `integer`), through to_regtype.
"""

import re
import sys

SIGNATURE = re.compile(r"`([a-z_][a-z0-9_]*)\(([^`]*)\)`")
SETTING = re.compile(r"^###\s+`(snowid\.[a-z_]+)`\s*$")
VERSION = re.compile(r"\bof snowid (\d+\.\d+\.\d+)\b")


def split_arguments(text):
    """The arguments of a signature, split at the commas outside parentheses and quotes."""
    args, depth, quoted, current = [], 0, False, ""
    for ch in text:
        if ch == "'":
            quoted = not quoted
        elif not quoted and ch == "(":
            depth += 1
        elif not quoted and ch == ")":
            depth -= 1
        if ch == "," and depth == 0 and not quoted:
            args.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        args.append(current.strip())
    return args


def argument(text):
    """(name, type) of one documented argument; OUT arguments are not part of the identity."""
    text = re.split(r"\s+DEFAULT\s+", text, maxsplit=1, flags=re.IGNORECASE)[0].strip()
    words = text.split()
    if words and words[0].upper() in ("IN", "INOUT", "VARIADIC"):
        words = words[1:]
    if words and words[0].upper() == "OUT":
        return None
    if len(words) < 2:
        return (text, "")
    return (words[0], " ".join(words[1:]))


def sections(lines):
    """The line numbers of each `## ` section, by title."""
    found, title = {}, None
    for number, line in enumerate(lines, 1):
        if line.startswith("## "):
            title = line[3:].strip()
            found[title] = []
        elif title is not None:
            found[title].append(number)
    return found


def literal(text):
    return "'" + text.replace("'", "''") + "'"


def array(items):
    return "ARRAY[" + ", ".join(literal(i) for i in items) + "]::text[]"


def named_version(path, lines):
    """The version the reference's opening paragraph names, and its line."""
    for number, line in enumerate(lines, 1):
        if line.startswith("## "):
            break
        m = VERSION.search(line)
        if m:
            return number, m.group(1)
    raise SystemExit(f"{path}: the opening paragraph names no version (\"of snowid X.Y.Z\")")


def parse(path):
    lines = open(path, encoding="utf-8").read().splitlines()
    version = named_version(path, lines)
    parts = sections(lines)
    if "Functions" not in parts or "Settings" not in parts:
        raise SystemExit(f"{path}: no \"## Functions\" or \"## Settings\" section")
    functions, settings = [], []
    for number in parts["Functions"]:
        heading = lines[number - 1]
        if not heading.startswith("#### "):
            continue
        # The markings: the first sentence of the first paragraph after the heading.
        paragraph = []
        for later in lines[number:]:
            if not later.strip():
                if paragraph:
                    break
                continue
            paragraph.append(later.strip())
        markings = " ".join(paragraph).split(".", 1)[0].strip()
        signatures = SIGNATURE.findall(heading)
        if not signatures:
            raise SystemExit(f"{path} line {number}: a function heading with no `name(arguments)`")
        for name, args in signatures:
            parsed = [a for a in (argument(t) for t in split_arguments(args)) if a is not None]
            functions.append((number, name, [n for n, _ in parsed], [t for _, t in parsed], markings))
    for number in parts["Settings"]:
        m = SETTING.match(lines[number - 1])
        if m:
            settings.append((number, m.group(1)))
    return version, functions, settings


def script(path):
    (version_line, version), functions, settings = parse(path)
    out = [
        "CREATE TEMP TABLE documented_function (line int, name text, arg_names text[], arg_types text[], markings text);",
        "CREATE TEMP TABLE documented_setting (line int, name text);",
    ]
    for number, name, names, types, markings in functions:
        out.append(
            f"INSERT INTO documented_function VALUES ({number}, {literal(name)}, {array(names)}, "
            f"{array(types)}, {literal(markings)});"
        )
    for number, name in settings:
        out.append(f"INSERT INTO documented_setting VALUES ({number}, {literal(name)});")
    doc = literal(path)
    out.append(f"""
WITH installed AS (
    SELECT p.proname || '(' || coalesce((
               SELECT string_agg(coalesce(nullif(n, '') || ' ', '') || format_type(t, NULL), ', ' ORDER BY i)
               FROM unnest(coalesce(p.proallargtypes, p.proargtypes::oid[]),
                           coalesce(p.proargmodes, array_fill('i'::"char", ARRAY[p.pronargs::int])),
                           p.proargnames) WITH ORDINALITY AS a(t, m, n, i)
               WHERE m IN ('i', 'b', 'v')), '') || ')' AS signature,
           concat_ws(', ',
               CASE p.provolatile WHEN 'i' THEN 'IMMUTABLE' WHEN 's' THEN 'STABLE' ELSE 'VOLATILE' END,
               CASE WHEN p.proisstrict AND p.pronargs > 0 THEN 'STRICT' END,
               CASE p.proparallel WHEN 's' THEN 'PARALLEL SAFE' WHEN 'r' THEN 'PARALLEL RESTRICTED'
                   ELSE 'PARALLEL UNSAFE' END,
               CASE WHEN NOT has_function_privilege('public', p.oid, 'EXECUTE') THEN 'superuser only' END
           ) AS markings
    FROM pg_proc p
    JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
    JOIN pg_extension e ON e.oid = d.refobjid AND d.refclassid = 'pg_extension'::regclass
    WHERE e.extname = 'snowid'
),
documented AS (
    SELECT f.line, f.markings,
           f.name || '(' || coalesce((
               SELECT string_agg(n || ' ' || coalesce(to_regtype(t)::text, t || ' (not a type)'), ', ' ORDER BY i)
               FROM unnest(f.arg_names, f.arg_types) WITH ORDINALITY AS a(n, t, i)), '') || ')' AS signature
    FROM documented_function f
),
problems AS (
    SELECT 0 AS kind, e.extversion AS item,
           {doc} || ' line {version_line}: the reference of snowid {version}; the extension is ' || e.extversion AS problem
    FROM pg_extension e WHERE e.extname = 'snowid' AND e.extversion <> {literal(version)}
    UNION ALL
    SELECT 1, i.signature,
           'missing from ' || {doc} || ': function ' || i.signature || ', ' || i.markings AS problem
    FROM installed i WHERE NOT EXISTS (SELECT FROM documented d WHERE d.signature = i.signature)
    UNION ALL
    SELECT 2, d.signature,
           {doc} || ' line ' || d.line || ': function ' || d.signature || ' is not in the extension'
    FROM documented d WHERE NOT EXISTS (SELECT FROM installed i WHERE i.signature = d.signature)
    UNION ALL
    SELECT 3, d.signature,
           {doc} || ' line ' || d.line || ': function ' || d.signature || ' is marked "' || d.markings
           || '"; the extension has "' || i.markings || '"'
    FROM documented d JOIN installed i USING (signature) WHERE d.markings <> i.markings
    UNION ALL
    SELECT 4, d.signature,
           {doc} || ' lines ' || string_agg(d.line::text, ', ' ORDER BY d.line) || ': function '
           || d.signature || ' is documented more than once'
    FROM documented d GROUP BY d.signature HAVING count(*) > 1
    UNION ALL
    SELECT 5, s.name, 'missing from ' || {doc} || ': setting ' || s.name
    FROM pg_settings s
    WHERE s.name LIKE 'snowid.%' AND NOT EXISTS (SELECT FROM documented_setting d WHERE d.name = s.name)
    UNION ALL
    SELECT 6, d.name, {doc} || ' line ' || d.line || ': setting ' || d.name || ' is not in the server'
    FROM documented_setting d WHERE NOT EXISTS (SELECT FROM pg_settings s WHERE s.name = d.name)
        AND current_setting(d.name, true) IS NULL
    UNION ALL
    SELECT 7, d.name, {doc} || ' lines ' || string_agg(d.line::text, ', ' ORDER BY d.line) || ': setting '
           || d.name || ' is documented more than once'
    FROM documented_setting d GROUP BY d.name HAVING count(*) > 1
)
SELECT problem FROM problems ORDER BY kind, item;
""")
    out.append(
        f"SELECT 'checked: version {version}, ' || (SELECT count(*) FROM documented_function) || ' functions and '"
        " || (SELECT count(*) FROM documented_setting) || ' settings';"
    )
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    script(sys.argv[1])
