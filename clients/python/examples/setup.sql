-- Run once as a superuser (psql -v ON_ERROR_STOP=1 -d app -f examples/setup.sql).

CREATE EXTENSION IF NOT EXISTS aedb_queue;

-- The examples' own tables (yours will differ).
CREATE TABLE orders (id bigserial PRIMARY KEY, email text NOT NULL);
CREATE TABLE sent_emails (order_id bigint NOT NULL, sent_at timestamptz NOT NULL DEFAULT now());

-- The producer: enqueues (aedb_queue_producer) and writes orders; RETURNING id needs SELECT on id,
-- and the bigserial's default needs its sequence.
CREATE ROLE app_producer LOGIN PASSWORD 'change-me';
GRANT aedb_queue_producer TO app_producer;
GRANT INSERT (email), SELECT (id) ON orders TO app_producer;
GRANT USAGE ON SEQUENCE orders_id_seq TO app_producer;

-- The worker: claims and settles (aedb_queue_worker), enqueues follow-ups (aedb_queue_producer),
-- and its transactional handler writes sent_emails.
CREATE ROLE app_service LOGIN PASSWORD 'change-me';
GRANT aedb_queue_worker, aedb_queue_producer TO app_service;
GRANT INSERT (order_id) ON sent_emails TO app_service;
