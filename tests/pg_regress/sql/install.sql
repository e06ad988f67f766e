-- CREATE EXTENSION refuses a schema aedb_queue (or aedb_queue_internal) that
-- someone else prepared, rather than adopting it: its owner could otherwise
-- put look-alike functions and operators there (docs/security.md). Each
-- attempt runs in a database of its own.
\set VERBOSITY terse
\set sqlstate '\\echo SQLSTATE :LAST_ERROR_SQLSTATE'
DO $$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'install_squatter') THEN
        CREATE ROLE install_squatter;
    END IF;
END $$;
CREATE DATABASE aedb_install_check;
\c aedb_install_check

-- A schema the squatter owns (it could fill it with look-alike objects).
CREATE SCHEMA aedb_queue AUTHORIZATION install_squatter;
CREATE EXTENSION aedb_queue;
:sqlstate
SELECT count(*) AS extensions FROM pg_extension WHERE extname = 'aedb_queue';
DROP SCHEMA aedb_queue;

-- Owned by the installer, but with objects in it already.
CREATE SCHEMA aedb_queue;
CREATE TABLE aedb_queue.planted (x int);
CREATE EXTENSION aedb_queue;
:sqlstate
DROP SCHEMA aedb_queue CASCADE;

-- Owned by the installer, but others may create in it.
CREATE SCHEMA aedb_queue;
GRANT CREATE ON SCHEMA aedb_queue TO install_squatter;
CREATE EXTENSION aedb_queue;
:sqlstate
DROP SCHEMA aedb_queue;

-- The helpers' schema made beforehand.
CREATE SCHEMA aedb_queue_internal AUTHORIZATION install_squatter;
CREATE EXTENSION aedb_queue;
:sqlstate
DROP SCHEMA aedb_queue_internal;

-- With neither, the extension installs.
CREATE EXTENSION aedb_queue;
SELECT extversion IS NOT NULL AS installed FROM pg_extension WHERE extname = 'aedb_queue';
SELECT nspname, pg_get_userbyid(nspowner) = current_user AS ours
FROM pg_namespace WHERE nspname LIKE 'aedb_queue%' ORDER BY 1;

\c aedb_queue_regress
DROP DATABASE aedb_install_check;
DROP ROLE install_squatter;
