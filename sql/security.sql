-- Roles and privileges. Runs last, once every function exists.
--
-- Applications get rights only through three roles: grant them to login
-- roles (GRANT aedb_queue_worker TO app_worker). Roles are cluster-wide and
-- outlive DROP EXTENSION; they are created only if absent.
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['aedb_queue_producer', 'aedb_queue_worker', 'aedb_queue_admin'] LOOP
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = r) THEN
            EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', r);
        END IF;
    END LOOP;
END
$$;

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA aedb_queue FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA aedb_queue_internal FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA aedb_queue FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA aedb_queue FROM PUBLIC;
GRANT USAGE ON SCHEMA aedb_queue TO aedb_queue_producer, aedb_queue_worker, aedb_queue_admin;
-- Helpers that are not API (the views' read check, the invalidation
-- trigger) live apart, so \df aedb_queue.* shows the API alone.
GRANT USAGE ON SCHEMA aedb_queue_internal TO aedb_queue_producer, aedb_queue_worker, aedb_queue_admin;

GRANT EXECUTE ON FUNCTION
    aedb_queue.queue_enqueue, aedb_queue.queue_enqueue_batch, aedb_queue.queue_shard,
    aedb_queue.queue_emit
TO aedb_queue_producer;

GRANT EXECUTE ON FUNCTION
    aedb_queue.queue_claim, aedb_queue.queue_complete, aedb_queue.queue_complete_batch,
    aedb_queue.queue_fail, aedb_queue.queue_heartbeat, aedb_queue.queue_release, aedb_queue.queue_get,
    aedb_queue.queue_complete_and_claim, aedb_queue.queue_fail_and_claim,
    aedb_queue.queue_list, aedb_queue.queue_tasks, aedb_queue_internal.can_read,
    aedb_queue.queue_schedule_list, aedb_queue.queue_cron_preview, aedb_queue.queue_parents,
    aedb_queue.queue_overview, aedb_queue.queue_counters, aedb_queue.queue_access, aedb_queue.queue_find,
    aedb_queue.queue_children, aedb_queue.queue_errors, aedb_queue.queue_shard,
    aedb_queue.queue_step_record, aedb_queue.queue_steps, aedb_queue.queue_waits, aedb_queue.queue_sleep,
    aedb_queue.queue_await_event, aedb_queue.queue_await_tasks
TO aedb_queue_worker;

-- Admins can do everything, including what the other two roles can.
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA aedb_queue TO aedb_queue_admin;
GRANT EXECUTE ON FUNCTION aedb_queue_internal.can_read TO aedb_queue_admin;
GRANT SELECT ON aedb_queue.tasks, aedb_queue.queue_stats, aedb_queue.concurrency_keys, aedb_queue.ordering_keys,
    aedb_queue.fairness_keys TO aedb_queue_admin;
GRANT aedb_queue_producer, aedb_queue_worker TO aedb_queue_admin;
