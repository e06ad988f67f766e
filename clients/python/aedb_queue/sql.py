"""Every SQL statement the client runs, in one place.

Values are always bound parameters (psycopg's ``%(name)s`` placeholders),
never spliced into the text; each carries an explicit cast so PostgreSQL
resolves the function by its declared argument types whatever Python type
psycopg picked for the value. Arguments use named notation, as the
extension's README documents them.
"""

ENQUEUE = """
SELECT task_id, deduplicated
FROM aedb_queue.queue_enqueue(
    queue => %(queue)s::text,
    payload => %(payload)s::jsonb,
    delay => %(delay)s::interval,
    priority => %(priority)s::bigint,
    max_attempts => %(max_attempts)s::int,
    backoff_base => %(backoff_base)s::interval,
    backoff_max => %(backoff_max)s::interval,
    idempotency_key => %(idempotency_key)s::text,
    wait_for => %(wait_for)s::bigint[],
    on_parent_failure => %(on_parent_failure)s::text,
    concurrency_key => %(concurrency_key)s::text,
    ordering_key => %(ordering_key)s::text,
    fairness_key => %(fairness_key)s::text)
"""

ENQUEUE_BATCH = """
SELECT task_id
FROM aedb_queue.queue_enqueue_batch(
    queue => %(queue)s::text,
    payloads => %(payloads)s::jsonb[],
    delay => %(delay)s::interval,
    priority => %(priority)s::bigint,
    max_attempts => %(max_attempts)s::int,
    backoff_base => %(backoff_base)s::interval,
    backoff_max => %(backoff_max)s::interval,
    wait_for => %(wait_for)s::bigint[],
    on_parent_failure => %(on_parent_failure)s::text,
    concurrency_key => %(concurrency_key)s::text,
    ordering_key => %(ordering_key)s::text,
    fairness_key => %(fairness_key)s::text) AS t(task_id)
"""

# The columns of a claimed task, in the order Task rows are read.
_TASK_COLUMNS = (
    "task_id, payload, attempts, fencing_token, lease_deadline, priority, "
    "enqueued_at, progress"
)

CLAIM = f"""
SELECT {_TASK_COLUMNS}
FROM aedb_queue.queue_claim(
    queue => %(queue)s::text,
    owner_id => %(owner_id)s::text,
    lease => %(lease)s::interval,
    max => %(max)s::int)
"""

COMPLETE = """
SELECT aedb_queue.queue_complete(
    queue => %(queue)s::text,
    task_id => %(task_id)s::bigint,
    fencing_token => %(fencing_token)s::bigint,
    result => %(result)s::jsonb,
    follow_ups => %(follow_ups)s::jsonb,
    strict => %(strict)s::boolean)::text
"""

COMPLETE_AND_CLAIM = f"""
SELECT settled::text, {_TASK_COLUMNS}
FROM aedb_queue.queue_complete_and_claim(
    queue => %(queue)s::text,
    owner_id => %(owner_id)s::text,
    held_task_id => %(task_id)s::bigint,
    held_fencing_token => %(fencing_token)s::bigint,
    result => %(result)s::jsonb,
    follow_ups => %(follow_ups)s::jsonb,
    strict => %(strict)s::boolean,
    lease => %(lease)s::interval,
    max => %(max)s::int)
"""

FAIL = """
SELECT aedb_queue.queue_fail(
    queue => %(queue)s::text,
    task_id => %(task_id)s::bigint,
    fencing_token => %(fencing_token)s::bigint,
    error => %(error)s::text,
    retry_in => %(retry_in)s::interval,
    dead_letter => %(dead_letter)s::boolean)::text
"""

FAIL_AND_CLAIM = f"""
SELECT settled::text, {_TASK_COLUMNS}
FROM aedb_queue.queue_fail_and_claim(
    queue => %(queue)s::text,
    owner_id => %(owner_id)s::text,
    held_task_id => %(task_id)s::bigint,
    held_fencing_token => %(fencing_token)s::bigint,
    error => %(error)s::text,
    retry_in => %(retry_in)s::interval,
    dead_letter => %(dead_letter)s::boolean,
    lease => %(lease)s::interval,
    max => %(max)s::int)
"""

HEARTBEAT = """
SELECT aedb_queue.queue_heartbeat(
    queue => %(queue)s::text,
    task_id => %(task_id)s::bigint,
    fencing_token => %(fencing_token)s::bigint,
    extend => %(extend)s::interval,
    progress => %(progress)s::jsonb)::text
"""

# Hands a task back without spending an attempt (extension 0.7.0).
RELEASE = """
SELECT aedb_queue.queue_release(
    queue => %(queue)s::text,
    task_id => %(task_id)s::bigint,
    fencing_token => %(fencing_token)s::bigint,
    delay => %(delay)s::interval)::text
"""

# Durable workflows (extension 0.9.0): a task's recorded steps, read once per claim.
STEPS = """
SELECT step, result
FROM aedb_queue.queue_steps(queue => %(queue)s::text, task_id => %(task_id)s::bigint)
"""

STEP_RECORD = """
SELECT aedb_queue.queue_step_record(
    queue => %(queue)s::text,
    task_id => %(task_id)s::bigint,
    fencing_token => %(fencing_token)s::bigint,
    step => %(step)s::text,
    result => %(result)s::jsonb,
    strict => %(strict)s::boolean)::text
"""

SLEEP = """
SELECT outcome::text, waiting, wake_at
FROM aedb_queue.queue_sleep(
    queue => %(queue)s::text,
    task_id => %(task_id)s::bigint,
    fencing_token => %(fencing_token)s::bigint,
    step => %(step)s::text,
    duration => %(duration)s::interval,
    until => %(until)s::timestamptz)
"""

AWAIT_EVENT = """
SELECT outcome::text, waiting, wake_at, payload, timed_out
FROM aedb_queue.queue_await_event(
    queue => %(queue)s::text,
    task_id => %(task_id)s::bigint,
    fencing_token => %(fencing_token)s::bigint,
    step => %(step)s::text,
    key => %(key)s::text,
    timeout => %(timeout)s::interval)
"""

# Waits for other tasks (a workflow's children) as the step; park => false
# only links them, in the transaction that enqueues them.
AWAIT_TASKS = """
SELECT outcome::text, waiting, results
FROM aedb_queue.queue_await_tasks(
    queue => %(queue)s::text,
    task_id => %(task_id)s::bigint,
    fencing_token => %(fencing_token)s::bigint,
    step => %(step)s::text,
    task_ids => %(task_ids)s::bigint[],
    park => %(park)s::boolean,
    strict => %(strict)s::boolean)
"""

EMIT = """
SELECT aedb_queue.queue_emit(
    queue => %(queue)s::text,
    key => %(key)s::text,
    payload => %(payload)s::jsonb)
"""

# The channel the extension notifies on; the payload is the queue name.
# After a failure applied: whether it dead-lettered the task (dead, still at
# the fencing token of the attempt that failed; a retry's claim moves it).
DEAD_AT_TOKEN = """
SELECT EXISTS (SELECT FROM aedb_queue.queue_get(%(queue)s::text, %(task_id)s::bigint)
               WHERE state = 'dead' AND fencing_token = %(fencing_token)s::bigint)
"""

# The worker's check at start: the extension is there.
EXTENSION_VERSION = "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'aedb_queue'"

CHANNEL = "aedb_queue"
LISTEN = "LISTEN aedb_queue"
