-- Upgrade test, schema comparison (scripts/upgrade_test.sh): detaches every
-- member object from the extension (ALTER EXTENSION ... DROP, which keeps the
-- object), so that a plain pg_dump --schema-only shows them. Run after
-- members.sql has recorded the membership; the database is a throwaway.
DO $$
DECLARE
    o record;
BEGIN
    FOR o IN
        SELECT i.type, i.identity
        FROM pg_depend d, pg_identify_object(d.classid, d.objid, d.objsubid) i
        WHERE d.refclassid = 'pg_extension'::regclass
          AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'aedb_queue')
          AND d.deptype = 'e'
          -- From 18 array types and the row types of tables and views are
          -- members beside what they belong to, and go with it.
          AND NOT EXISTS (SELECT FROM pg_type t LEFT JOIN pg_class c ON c.oid = t.typrelid
                          WHERE d.classid = 'pg_type'::regclass AND t.oid = d.objid
                            AND (t.typcategory = 'A' OR c.relkind <> 'c'))
    LOOP
        EXECUTE format('ALTER EXTENSION aedb_queue DROP %s %s',
                       CASE o.type WHEN 'composite type' THEN 'type' ELSE o.type END, o.identity);
    END LOOP;
END
$$;
