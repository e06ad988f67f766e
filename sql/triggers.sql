-- Every write to the tables backends keep copies of, through our functions
-- or by direct DML (a restore, a manual fix), drops those copies in every
-- backend before its next statement (src/cache.rs).
CREATE TRIGGER copies_stale AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON aedb_queue.queue
    FOR EACH STATEMENT EXECUTE FUNCTION aedb_queue_internal.invalidate_copies();
CREATE TRIGGER copies_stale AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON aedb_queue.queue_grant
    FOR EACH STATEMENT EXECUTE FUNCTION aedb_queue_internal.invalidate_copies();
CREATE TRIGGER copies_stale AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON aedb_queue.confined_role
    FOR EACH STATEMENT EXECUTE FUNCTION aedb_queue_internal.invalidate_copies();
