-- pg_upgrade test (scripts/pg_upgrade_test.sh): everything the extension
-- keeps in database "app", as text that must read the same before and after
-- pg_upgrade: its version, every row of every table and sequence of its
-- schemas, who owns its objects and what other roles may do with them, and
-- the roles and memberships its grants rest on. psql -At.

SELECT 'version ' || extversion FROM pg_extension WHERE extname = 'aedb_queue';

-- Every row, table by table (sorted by the row's text), and where each
-- sequence stands.
SELECT CASE c.relkind
       WHEN 'S' THEN format('SELECT %L || '' '' || last_value || '' '' || is_called FROM %s', c.oid::regclass, c.oid::regclass)
       ELSE format('SELECT %L || '' '' || r::text FROM %s r ORDER BY r::text', c.oid::regclass, c.oid::regclass) END
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname IN ('aedb_queue', 'aedb_queue_internal') AND c.relkind IN ('r', 'p', 'S')
ORDER BY c.oid::regclass::text \gexec

-- Owners, and every privilege held by another role than the owner (the
-- owner's own are implicit: 17 gave owners of tables MAINTAIN), on schemas,
-- relations and functions.
SELECT 'schema ' || nspname || ' owner ' || nspowner::regrole
    || coalesce(' ' || (SELECT string_agg(a.grantee::regrole || '=' || a.privilege_type, ',' ORDER BY 1)
                        FROM aclexplode(coalesce(nspacl, acldefault('n', nspowner))) a
                        WHERE a.grantee <> nspowner), '')
FROM pg_namespace WHERE nspname IN ('aedb_queue', 'aedb_queue_internal') ORDER BY 1;
SELECT 'relation ' || c.oid::regclass || ' ' || c.relkind::text || ' owner ' || c.relowner::regrole
    || coalesce(' ' || (SELECT string_agg(a.grantee::regrole || '=' || a.privilege_type, ',' ORDER BY 1)
                        FROM aclexplode(coalesce(c.relacl, acldefault(CASE c.relkind WHEN 'S' THEN 's' ELSE 'r' END::"char", c.relowner))) a
                        WHERE a.grantee <> c.relowner), '')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname IN ('aedb_queue', 'aedb_queue_internal') ORDER BY 1;
SELECT 'function ' || p.oid::regprocedure || ' owner ' || p.proowner::regrole || ' definer ' || p.prosecdef
    || coalesce(' ' || (SELECT string_agg(a.grantee::regrole || '=' || a.privilege_type, ',' ORDER BY 1)
                        FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
                        WHERE a.grantee <> p.proowner), '')
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname IN ('aedb_queue', 'aedb_queue_internal') ORDER BY 1;

-- Roles and who is a member of what.
SELECT 'role ' || rolname || ' login=' || rolcanlogin || ' super=' || rolsuper
FROM pg_roles WHERE rolname LIKE 'aedb\_queue\_%' OR rolname LIKE 'upg\_%' ORDER BY 1;
SELECT 'member ' || m.rolname || ' of ' || r.rolname
FROM pg_auth_members a JOIN pg_roles r ON r.oid = a.roleid JOIN pg_roles m ON m.oid = a.member
WHERE r.rolname LIKE 'aedb\_queue\_%' OR m.rolname LIKE 'upg\_%' ORDER BY 1;
