-- Rate limits: a queue may start at most rate_limit tasks per rate_interval,
-- rate_burst at once (a token bucket shared by every worker). A claim takes
-- what the bucket holds and never waits for more.
SET aedb_queue.claim_rescan_interval = 0;
SELECT count(*) FROM aedb_queue.queue_enqueue_batch('rl', ARRAY(SELECT jsonb_build_object('n', i) FROM generate_series(1, 10) i));

-- 3 per hour, all 3 at once.
SELECT rate_limit, rate_interval, rate_burst
FROM aedb_queue.queue_configure('rl', rate_limit => 3, rate_interval => '1 hour');
SELECT queue, ready, rate_limit, rate_tokens FROM aedb_queue.queue_stats WHERE queue = 'rl';
SELECT payload->>'n' AS n FROM aedb_queue.queue_claim('rl', 'w', max => 10) ORDER BY task_id;
-- The bucket is empty: claims return at once with nothing.
SELECT count(*) FROM aedb_queue.queue_claim('rl', 'w', max => 10);
SELECT queue, ready, in_flight, rate_tokens FROM aedb_queue.queue_stats WHERE queue = 'rl';

-- A claim that finds fewer tasks than tokens keeps the rest.
SELECT rate_limit, rate_burst FROM aedb_queue.queue_configure('rl2', rate_limit => 5, rate_interval => '1 hour');
SELECT count(*) FROM aedb_queue.queue_enqueue_batch('rl2', ARRAY['{}', '{}']::jsonb[]);
SELECT count(*) FROM aedb_queue.queue_claim('rl2', 'w', max => 10);
SELECT rate_tokens FROM aedb_queue.queue_stats WHERE queue = 'rl2';

-- A smaller burst caps the tokens at once; a reset removes the limit.
SELECT rate_burst FROM aedb_queue.queue_configure('rl2', rate_burst => 1);
SELECT rate_tokens FROM aedb_queue.queue_stats WHERE queue = 'rl2';
SELECT rate_limit FROM aedb_queue.queue_configure('rl', reset => true);
SELECT count(*) FROM aedb_queue.queue_claim('rl', 'w', max => 10);
SELECT count(*) AS buckets FROM aedb_queue.rate_bucket WHERE queue = 'rl';

-- Bad settings are refused, naming the argument.
SELECT aedb_queue.queue_configure('rl', rate_limit => 0);
SELECT aedb_queue.queue_configure('rl', rate_limit => 5, rate_interval => '0');
SELECT aedb_queue.queue_configure('rl', rate_limit => 5, rate_burst => -1);
