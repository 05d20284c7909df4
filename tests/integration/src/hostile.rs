//! A database owner's traps, for the tests of what she can do to what a superuser runs
//! (`hostile_owner`, `hostile_objects`): `owner1`'s function that, whenever it runs, logs who it
//! ran as and makes `owner1` a superuser if it runs as one (so that a test would see the
//! escalation itself), and the check that it never did.

use crate::postgres::Client;
use crate::Cluster;

/// `owner1`'s trap, the table it logs into, and IMMUTABLE wrappers for the places that want one.
/// Every name in them is qualified, so that they work under any `search_path`.
pub const TRAPS: &str = r#"
CREATE TABLE public.trap_log (who pg_catalog.text, via pg_catalog.text);
GRANT INSERT, SELECT ON public.trap_log TO PUBLIC;
CREATE FUNCTION public.trap(via pg_catalog.text) RETURNS pg_catalog.bool LANGUAGE plpgsql AS $$
BEGIN
    BEGIN
        IF (SELECT r.rolsuper FROM pg_catalog.pg_roles r
            WHERE r.rolname OPERATOR(pg_catalog.=) current_user) THEN
            EXECUTE 'ALTER ROLE owner1 SUPERUSER';
        END IF;
    EXCEPTION WHEN OTHERS THEN NULL;
    END;
    INSERT INTO public.trap_log VALUES (current_user, via);
    RETURN true;
EXCEPTION WHEN OTHERS THEN RETURN true;
END $$;
CREATE FUNCTION public.imm(id pg_catalog.int8) RETURNS pg_catalog.int8 IMMUTABLE
LANGUAGE plpgsql AS $$ BEGIN PERFORM public.trap('immutable'); RETURN id; END $$;
CREATE FUNCTION public.immb(id pg_catalog.int8) RETURNS pg_catalog.bool IMMUTABLE
LANGUAGE plpgsql AS $$ BEGIN RETURN public.trap('predicate'); END $$;
"#;

/// `owner1` is no superuser, and no code of hers ever ran as one, in any of `databases`.
pub fn assert_nothing_of_hers_ran_as_a_superuser(
    cluster: &Cluster,
    databases: &[&str],
    when: &str,
) {
    let mut db = checker(cluster, "postgres");
    let superuser: bool = db
        .query_one(
            "SELECT rolsuper FROM pg_roles WHERE rolname = 'owner1'",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(!superuser, "{when}: owner1 became a superuser");
    for database in databases {
        let escalated: Vec<String> = checker(cluster, database)
            .query(
                "SELECT who || ' via ' || via FROM public.trap_log l \
                 JOIN pg_roles r ON r.rolname = l.who WHERE r.rolsuper",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert!(
            escalated.is_empty(),
            "{when}: owner1's code ran as a superuser in {database}: {escalated:?}"
        );
    }
}

/// A superuser's connection to a database with `search_path` put right for a test's own queries
/// (her planted operators and domains are then never reached by them).
pub fn checker(cluster: &Cluster, database: &str) -> Client {
    let mut db = cluster.client_of(database);
    db.batch_execute("SET search_path = pg_catalog, public")
        .unwrap();
    db
}
