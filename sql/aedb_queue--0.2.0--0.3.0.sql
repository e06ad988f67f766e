-- aedb_queue upgrade 0.2.0 -> 0.3.0, run once by
--   ALTER EXTENSION aedb_queue UPDATE;   (or UPDATE TO '0.3.0')
-- inside that statement's transaction, with search_path set to aedb_queue.
--
-- Rules (docs/upgrades.md): as in aedb_queue--0.1.0--0.2.0.sql. Plain DDL
-- against exactly the 0.2.0 schema; the result must equal a fresh CREATE
-- EXTENSION at 0.3.0 (scripts/upgrade_test.sh compares pg_dump of both);
-- a section per change, below the last one.

\echo Use "ALTER EXTENSION aedb_queue UPDATE TO '0.3.0'" to load this file. \quit

-- == 1. Trust (issue 9): explicit confinement ================================
-- In 0.2.0 a role holding a grant was confined and one holding none was
-- not, so revoking its last grant freed a role, and a grant to one of the
-- extension's group roles confined every member. Confinement is now a row
-- of its own. Grants held by a group role cannot be carried over (it may
-- no longer be confined); say so instead of changing who is confined.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM aedb_queue.queue_grant g
                WHERE g.role::oid IN (SELECT oid FROM pg_catalog.pg_roles
                                       WHERE rolname IN ('aedb_queue_producer', 'aedb_queue_worker', 'aedb_queue_admin'))) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'object_not_in_prerequisite_state',
            MESSAGE = 'aedb_queue 0.3.0 no longer lets the extension''s own roles hold per-queue grants, and some do',
            HINT = 'Move those grants to roles of your own (aedb_queue.queue_grant to the new role, aedb_queue.queue_revoke from aedb_queue_*), then run ALTER EXTENSION aedb_queue UPDATE again.';
    END IF;
END
$$;

CREATE TABLE aedb_queue.confined_role (
    role        regrole PRIMARY KEY,
    confined_at timestamptz NOT NULL
);
-- Every role that was confined under 0.2.0's rule stays confined.
INSERT INTO aedb_queue.confined_role (role, confined_at)
SELECT DISTINCT role, pg_catalog.now() FROM aedb_queue.queue_grant;
SELECT pg_catalog.pg_extension_config_dump('aedb_queue.confined_role', '');
REVOKE ALL ON aedb_queue.confined_role FROM PUBLIC;

CREATE FUNCTION "queue_confine"(
	"role" TEXT /* Option < & str > */
) RETURNS bool /* bool */
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_confine_wrapper';

CREATE FUNCTION "queue_unconfine"(
	"role" TEXT /* Option < & str > */
) RETURNS bool /* bool */
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_unconfine_wrapper';

REVOKE ALL ON FUNCTION aedb_queue.queue_confine(text), aedb_queue.queue_unconfine(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION aedb_queue.queue_confine(text), aedb_queue.queue_unconfine(text) TO aedb_queue_admin;

-- == 2. Trust: helpers that are not API leave schema aedb_queue ===========
CREATE SCHEMA aedb_queue_internal;
GRANT USAGE ON SCHEMA aedb_queue_internal TO aedb_queue_producer, aedb_queue_worker, aedb_queue_admin;
-- The views follow the function (they refer to it by oid).
ALTER FUNCTION aedb_queue.can_read(text) SET SCHEMA aedb_queue_internal;
-- Only 0.1.0's own SQL functions called these; its databases keep their
-- definitions, and the library keeps the symbols.
DROP FUNCTION aedb_queue.check_get_args(text, bigint);
DROP FUNCTION aedb_queue.check_list_args(text, text, integer);

-- == 3. Trust: copies invalidated by a trigger, whoever writes ===============
CREATE FUNCTION aedb_queue_internal."invalidate_copies"()
	RETURNS TRIGGER
	LANGUAGE c
	AS 'MODULE_PATHNAME', 'invalidate_copies_wrapper';
REVOKE ALL ON FUNCTION aedb_queue_internal.invalidate_copies() FROM PUBLIC;

CREATE TRIGGER copies_stale AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON aedb_queue.queue
    FOR EACH STATEMENT EXECUTE FUNCTION aedb_queue_internal.invalidate_copies();
CREATE TRIGGER copies_stale AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON aedb_queue.queue_grant
    FOR EACH STATEMENT EXECUTE FUNCTION aedb_queue_internal.invalidate_copies();
CREATE TRIGGER copies_stale AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON aedb_queue.confined_role
    FOR EACH STATEMENT EXECUTE FUNCTION aedb_queue_internal.invalidate_copies();

-- == 4. Trust: the pg_cron reaper belongs to unconfined admins ===============
-- The plpgsql functions ran SECURITY DEFINER, which hid who called them;
-- the Rust ones check the caller, then run as the owner.
DROP FUNCTION aedb_queue.schedule_reaper(interval);
DROP FUNCTION aedb_queue.unschedule_reaper();
DROP FUNCTION aedb_queue.check_pg_cron();
DROP FUNCTION aedb_queue.reaper_cron_schedule(interval);

CREATE FUNCTION "schedule_reaper"(
	"every" interval DEFAULT '1 minute' /* Option < Interval > */
) RETURNS bigint /* i64 */
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'schedule_reaper_wrapper';

CREATE FUNCTION "unschedule_reaper"() RETURNS bool /* bool */
STRICT
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'unschedule_reaper_wrapper';

REVOKE ALL ON FUNCTION aedb_queue.schedule_reaper(interval), aedb_queue.unschedule_reaper() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION aedb_queue.schedule_reaper(interval), aedb_queue.unschedule_reaper() TO aedb_queue_admin;

-- == 5. Trust: queue_reap() reads only the queues with work ===================
CREATE INDEX queue_keeps_keys_idx ON aedb_queue.queue (name) WHERE keep_idempotency_keys IS NOT NULL;

-- == 6. The task row said once: queue_get and queue_list return task_row ====
-- Same columns as before, so SELECT * and named columns read the same.
CREATE TYPE aedb_queue.task_row AS (
    task_id         bigint,
    queue           text,
    state           text,
    not_before      timestamptz,
    priority        bigint,
    attempts        integer,
    max_attempts    integer,
    owner_id        text,
    fencing_token   bigint,
    lease_deadline  timestamptz,
    payload         jsonb,
    progress        jsonb,
    last_error      text,
    idempotency_key text,
    backoff_base    interval,
    backoff_max     interval,
    created_at      timestamptz,
    updated_at      timestamptz,
    result          jsonb,
    completed_at    timestamptz
);
DROP FUNCTION aedb_queue.queue_get(text, bigint);
DROP FUNCTION aedb_queue.queue_list(text, text, integer);

CREATE  FUNCTION "queue_get"(
	"queue" TEXT, /* Option < & str > */
	"task_id" bigint /* Option < i64 > */
) RETURNS SETOF aedb_queue.task_row /* RawTaskRow */
STABLE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_get_wrapper';

CREATE  FUNCTION "queue_list"(
	"queue" TEXT, /* Option < & str > */
	"state" TEXT DEFAULT NULL, /* Option < & str > */
	"limit" INT DEFAULT 100 /* Option < i32 > */
) RETURNS SETOF aedb_queue.task_row /* RawTaskRow */
STABLE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_list_wrapper';

REVOKE ALL ON FUNCTION aedb_queue.queue_get(text, bigint), aedb_queue.queue_list(text, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION aedb_queue.queue_get(text, bigint), aedb_queue.queue_list(text, text, integer)
    TO aedb_queue_worker, aedb_queue_admin;
