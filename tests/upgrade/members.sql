-- Upgrade test, schema comparison (scripts/upgrade_test.sh): what the
-- extension owns, one line each, for databases "upgraded" and "fresh" to be
-- compared. pg_dump leaves extension members out of its output, so these
-- lines carry what it would not show: the version, every member object
-- (including any outside schema aedb_queue) and the tables whose contents
-- pg_dump keeps (pg_extension_config_dump).
SELECT 'extension aedb_queue version ' || extversion || ', schema ' || extnamespace::regnamespace
       || ', relocatable ' || extrelocatable
FROM pg_extension WHERE extname = 'aedb_queue';

SELECT 'member ' || pg_describe_object(d.classid, d.objid, d.objsubid) AS line
FROM pg_depend d
WHERE d.refclassid = 'pg_extension'::regclass
  AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'aedb_queue')
  AND d.deptype = 'e'
ORDER BY line COLLATE "C";

SELECT 'config dump ' || c.tab::regclass || coalesce(' where ' || nullif(c.cond, ''), '') AS line
FROM pg_extension e, unnest(e.extconfig, e.extcondition) AS c(tab, cond)
WHERE e.extname = 'aedb_queue'
ORDER BY line COLLATE "C";
