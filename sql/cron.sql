-- Reaping on a schedule with pg_cron: one job, named 'aedb_queue_reaper',
-- runs queue_reap() in this database, so expired leases and due timers are
-- handled even when no worker is polling (docs/pg_cron.md).
--
-- pg_cron is optional and may be missing when this extension is created.
-- These are plpgsql functions because their bodies are resolved only when
-- they run; they check for pg_cron first and name its objects with their
-- schema (cron.*). The job name and its command are constants: nothing a
-- caller passes is ever spliced into SQL.

-- The cron expression for `every`. pg_cron 1.4 (Debian 12's
-- postgresql-15-cron) takes 5-field cron expressions only, so it runs a job
-- at most once a minute and cannot express an arbitrary interval: accept
-- exactly the intervals that map onto a step of one cron field. Intervals
-- are compared as PostgreSQL compares them (60 minutes = 1 hour, 24 hours =
-- 1 day). STABLE, not IMMUTABLE: the error text depends on IntervalStyle.
CREATE FUNCTION aedb_queue.reaper_cron_schedule(every interval)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = aedb_queue, pg_catalog, pg_temp
AS $$
DECLARE
    secs numeric := extract(epoch FROM $1);
BEGIN
    IF secs % 60 = 0 AND secs / 60 BETWEEN 1 AND 59 THEN
        RETURN format('*/%s * * * *', (secs / 60)::int);
    ELSIF secs % 3600 = 0 AND secs / 3600 BETWEEN 1 AND 23 THEN
        RETURN format('0 */%s * * *', (secs / 3600)::int);
    ELSIF secs = 86400 THEN
        RETURN '0 0 * * *';
    END IF;
    -- NULL lands here too (every comparison above is NULL).
    RAISE EXCEPTION USING
        ERRCODE = 'invalid_parameter_value',
        MESSAGE = format('invalid argument "every": must be 1 to 59 whole minutes, 1 to 23 whole hours, or 1 day; got %s',
                         coalesce($1::text, 'NULL')),
        HINT = 'pg_cron 1.4 schedules with cron expressions, so a job runs at most once a minute.';
END
$$;

-- Raises 55000, saying what is missing, unless pg_cron can run a job here:
-- its library is preloaded (only then does cron.database_name exist and the
-- scheduler run), it serves this database, and its extension is created in
-- it (pg_cron keeps its jobs in that one database).
CREATE FUNCTION aedb_queue.check_pg_cron()
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = aedb_queue, pg_catalog, pg_temp
AS $$
DECLARE
    cron_db text := current_setting('cron.database_name', true);
BEGIN
    IF cron_db IS NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'object_not_in_prerequisite_state',
            MESSAGE = format('pg_cron is not installed in database "%s": install pg_cron and add it to shared_preload_libraries',
                             current_database()),
            HINT = format('On Debian: apt-get install postgresql-15-cron; in postgresql.conf: '
                          'shared_preload_libraries = ''pg_cron'' and cron.database_name = ''%s''; '
                          'restart PostgreSQL; then CREATE EXTENSION pg_cron in this database.',
                          current_database());
    ELSIF cron_db <> current_database() THEN
        RAISE EXCEPTION USING
            ERRCODE = 'object_not_in_prerequisite_state',
            MESSAGE = format('pg_cron serves database "%s" (cron.database_name), not "%s"',
                             cron_db, current_database()),
            HINT = format('Set cron.database_name = ''%s'' in postgresql.conf, restart PostgreSQL, '
                          'then CREATE EXTENSION pg_cron in this database.', current_database());
    ELSIF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
        RAISE EXCEPTION USING
            ERRCODE = 'object_not_in_prerequisite_state',
            MESSAGE = format('pg_cron is not installed in database "%s": run CREATE EXTENSION pg_cron',
                             current_database());
    END IF;
END
$$;

-- Creates the reaper job, or updates its schedule if it exists (cron.schedule
-- with a job name upserts since pg_cron 1.3). Returns the job id.
-- SECURITY DEFINER: the job belongs to, and runs as, the extension's owner,
-- whoever schedules it, so there is only ever one.
CREATE FUNCTION aedb_queue.schedule_reaper(every interval DEFAULT '1 minute')
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = aedb_queue, pg_catalog, pg_temp
AS $$
DECLARE
    -- Validated before the pg_cron check: a bad argument is reported as such
    -- whether or not pg_cron is there.
    cron_expr text := aedb_queue.reaper_cron_schedule($1);
BEGIN
    PERFORM aedb_queue.check_pg_cron();
    RETURN cron.schedule('aedb_queue_reaper'::text, cron_expr, 'SELECT aedb_queue.queue_reap()'::text);
END
$$;

-- Removes the reaper job; false if there was none.
CREATE FUNCTION aedb_queue.unschedule_reaper()
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = aedb_queue, pg_catalog, pg_temp
AS $$
DECLARE
    job bigint;
BEGIN
    PERFORM aedb_queue.check_pg_cron();
    -- cron.unschedule raises when the job does not exist, so look it up
    -- first. FOR UPDATE: of two concurrent calls, the second waits for the
    -- first and then finds no job, instead of failing.
    SELECT jobid INTO job FROM cron.job
     WHERE jobname = 'aedb_queue_reaper' AND username = current_user
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    RETURN cron.unschedule(job);
END
$$;

-- The job runs as the extension's owner (a superuser), so changing it is an
-- administrator's call: only the owner, and roles it grants EXECUTE to.
REVOKE ALL ON FUNCTION aedb_queue.schedule_reaper(interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION aedb_queue.unschedule_reaper() FROM PUBLIC;
