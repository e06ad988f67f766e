-- Shard numbers (docs/scale-out.md): a node numbered n gives its tasks ids
-- from n * 2^48 + 1, so a router sends every call on a task to the node
-- that holds it (task_id >> 48). In a database of its own: the numbering
-- is per database.
\set VERBOSITY terse
\set sqlstate '\\echo SQLSTATE :LAST_ERROR_SQLSTATE'
DO $$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'shard_admin') THEN
        CREATE ROLE shard_admin;
    END IF;
END $$;
CREATE DATABASE aedb_shard_check;
\c aedb_shard_check
CREATE EXTENSION aedb_queue;
SET client_min_messages = warning;  -- (a member already when the cluster is reused)
GRANT aedb_queue_admin TO shard_admin;
RESET client_min_messages;

-- An unsharded node is shard 0; its ids start at 1.
SELECT aedb_queue.queue_shard();

-- Numbering is for superusers, even an unconfined aedb_queue admin may not.
SET SESSION AUTHORIZATION shard_admin;
SELECT aedb_queue.queue_shard_assign(3);
:sqlstate
RESET SESSION AUTHORIZATION;

-- Bad numbers are refused, naming the argument.
SELECT aedb_queue.queue_shard_assign(NULL);
:sqlstate
SELECT aedb_queue.queue_shard_assign(0);
:sqlstate
SELECT aedb_queue.queue_shard_assign(32768);
:sqlstate
SELECT aedb_queue.queue_shard();

-- Numbered 3: the next ids are shard 3's; numbering again changes nothing.
SELECT aedb_queue.queue_shard_assign(3);
SELECT aedb_queue.queue_shard(), aedb_queue.queue_shard_assign(3) AS changed;
SELECT task_id >> 48 AS shard, task_id - (3::bigint << 48) AS local FROM aedb_queue.queue_enqueue('q', '{"n": 1}');
SELECT task_id >> 48 AS shard, task_id - (3::bigint << 48) AS local FROM aedb_queue.queue_enqueue('q', '{"n": 2}');

-- A node holding tasks cannot take another number: a router would send
-- them to the wrong node. Nothing changes.
SELECT aedb_queue.queue_shard_assign(4);
:sqlstate
SELECT aedb_queue.queue_shard();
SELECT task_id >> 48 AS shard FROM aedb_queue.queue_enqueue('q', '{"n": 3}');

-- Any aedb_queue role may read the number (a router asks it for it).
SET SESSION AUTHORIZATION shard_admin;
SELECT aedb_queue.queue_shard();
RESET SESSION AUTHORIZATION;

\c aedb_queue_regress
DROP DATABASE aedb_shard_check;
