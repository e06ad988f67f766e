-- Inspection: plain SQL over the tasks view; arguments are checked in Rust
-- so errors match the rest of the API.

CREATE FUNCTION aedb_queue.queue_get(queue text, task_id bigint)
RETURNS SETOF aedb_queue.tasks
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
    PERFORM aedb_queue.check_get_args($1, $2);
    RETURN QUERY SELECT * FROM aedb_queue.tasks t WHERE t.queue = $1 AND t.task_id = $2;
END
$$;

-- Each state is read through its own partial index in its natural order:
-- ready in service order, in-flight by lease deadline, scheduled by due time,
-- dead oldest first.
CREATE FUNCTION aedb_queue.queue_list(queue text, state text DEFAULT NULL, "limit" int DEFAULT 100)
RETURNS SETOF aedb_queue.tasks
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
    PERFORM aedb_queue.check_list_args($1, $2, $3);
    RETURN QUERY
    (SELECT * FROM aedb_queue.tasks t
      WHERE t.queue = $1 AND t.state = 'ready' AND ($2 IS NULL OR $2 = 'ready')
      ORDER BY t.priority DESC, -t.task_id DESC LIMIT $3)
    UNION ALL
    (SELECT * FROM aedb_queue.tasks t
      WHERE t.queue = $1 AND t.state = 'in_flight' AND ($2 IS NULL OR $2 = 'in_flight')
      ORDER BY t.lease_deadline LIMIT $3)
    UNION ALL
    (SELECT * FROM aedb_queue.tasks t
      WHERE t.queue = $1 AND t.state = 'scheduled' AND ($2 IS NULL OR $2 = 'scheduled')
      ORDER BY t.not_before LIMIT $3)
    UNION ALL
    (SELECT * FROM aedb_queue.tasks t
      WHERE t.queue = $1 AND t.state = 'dead' AND ($2 IS NULL OR $2 = 'dead')
      ORDER BY t.task_id LIMIT $3)
    LIMIT $3;
END
$$;
