\echo Use "ALTER EXTENSION snowid UPDATE TO '0.8.0'" to load this file. \quit

-- snowid 0.8.0.
