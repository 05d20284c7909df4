\echo Use "ALTER EXTENSION snowid UPDATE TO '0.8.0'" to load this file. \quit

-- snowid 0.8.0.

-- The cluster-wide statements (issues 51 and 53): snowid_resume_above is the Rust function of its
-- own name, whose symbol also serves 0.6.0's one-argument shape; 0.7.0's symbol stays exported
-- for databases not yet updated.
CREATE OR REPLACE FUNCTION snowid_resume_above(
    "id" bigint,
    "skip_databases" TEXT[] DEFAULT NULL
) RETURNS timestamp with time zone
VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'snowid_resume_above_wrapper';
