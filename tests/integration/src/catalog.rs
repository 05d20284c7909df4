//! What a user or a dump can see of the extension installed in a database, for tests that check
//! that one install equals another (an updated database and a fresh one; an install under a
//! database owner's planted objects and settings and a plain one).

/// Everything about the extension's functions that a user or a dump can see: signature, body
/// (a SQL-standard body too), markings, settings, privileges and comment, one line per function,
/// sorted; then its tables: access method, tablespace (0, the database's default, where it is
/// `pg_default`), persistence, columns, constraints, privileges and comment.
pub const CATALOG: &str = "
    SELECT string_agg(format('%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s',
                             p.oid::regprocedure, pg_get_function_arguments(p.oid), p.prosrc,
                             pg_get_function_sqlbody(p.oid), p.probin, p.provolatile,
                             p.proparallel, p.proisstrict, p.proretset,
                             pg_get_function_result(p.oid), p.proconfig, p.proacl,
                             obj_description(p.oid, 'pg_proc')),
                      E'\\n' ORDER BY p.oid::regprocedure::text)
           || E'\\n' || obj_description(e.oid, 'pg_extension')
           || E'\\n' || (
        SELECT string_agg(format('%s|%s|%s|%s|%s|%s|%s|%s', c.oid::regclass, am.amname,
                                 c.reltablespace, c.relpersistence, c.relkind, c.relacl,
                                 obj_description(c.oid, 'pg_class'),
                                 (SELECT string_agg(format('%s %s %s', a.attname,
                                                           format_type(a.atttypid, a.atttypmod),
                                                           a.attnotnull), ', ' ORDER BY a.attnum)
                                  FROM pg_attribute a
                                  WHERE a.attrelid = c.oid AND a.attnum > 0
                                    AND NOT a.attisdropped)
                                 || ' ' || (SELECT string_agg(pg_get_constraintdef(k.oid), ', '
                                                              ORDER BY k.conname)
                                            FROM pg_constraint k WHERE k.conrelid = c.oid)),
                          E'\\n' ORDER BY c.oid::regclass::text)
        FROM pg_depend t
        JOIN pg_class c ON c.oid = t.objid
        LEFT JOIN pg_am am ON am.oid = c.relam
        WHERE t.refobjid = e.oid AND t.deptype = 'e' AND t.classid = 'pg_class'::regclass)
    FROM pg_extension e
    JOIN pg_depend d ON d.refobjid = e.oid AND d.deptype = 'e' AND d.classid = 'pg_proc'::regclass
    JOIN pg_proc p ON p.oid = d.objid
    WHERE e.extname = 'snowid'
    GROUP BY e.oid";
