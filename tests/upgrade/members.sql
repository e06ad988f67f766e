-- Upgrade test, schema comparison (scripts/upgrade_test.sh): what the
-- extension owns, one line each, for the databases being compared. pg_dump
-- leaves extension members out of its output, and prints privileges only as
-- changes from those the extension's scripts set, so these lines carry what
-- it would not show: the version and schema, every member object (including
-- any outside schema aedb_queue), each member's privileges (the schema's
-- too), and the tables whose contents pg_dump keeps (pg_extension_config_dump).
SELECT 'extension aedb_queue version ' || extversion || ', schema ' || extnamespace::regnamespace
       || ', relocatable ' || extrelocatable
FROM pg_extension WHERE extname = 'aedb_queue';

WITH ext AS (SELECT oid, extnamespace FROM pg_extension WHERE extname = 'aedb_queue'),
members AS (
    SELECT d.classid, d.objid
    FROM pg_depend d, ext
    WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid AND d.deptype = 'e'
),
owned AS (
    SELECT classid, objid FROM members
    UNION
    SELECT 'pg_namespace'::regclass, extnamespace FROM ext
),
acls AS (
    SELECT o.classid, o.objid,
           coalesce(c.relacl, p.proacl, t.typacl, n.nspacl) AS acl
    FROM owned o
    LEFT JOIN pg_class c ON o.classid = 'pg_class'::regclass AND c.oid = o.objid
    LEFT JOIN pg_proc p ON o.classid = 'pg_proc'::regclass AND p.oid = o.objid
    LEFT JOIN pg_type t ON o.classid = 'pg_type'::regclass AND t.oid = o.objid
    LEFT JOIN pg_namespace n ON o.classid = 'pg_namespace'::regclass AND n.oid = o.objid
),
lines AS (
    SELECT 'member ' || pg_describe_object(classid, objid, 0) AS line FROM members
    UNION ALL
    SELECT 'privileges ' || pg_describe_object(classid, objid, 0) || ': '
           || coalesce((SELECT string_agg(a::text, ' ' ORDER BY a::text) FROM unnest(acl) a), 'default')
    FROM acls
    UNION ALL
    SELECT 'config dump ' || c.tab::regclass || coalesce(' where ' || nullif(c.cond, ''), '')
    FROM pg_extension e, unnest(e.extconfig, e.extcondition) AS c(tab, cond)
    WHERE e.extname = 'aedb_queue'
)
SELECT line FROM lines ORDER BY line COLLATE "C";
