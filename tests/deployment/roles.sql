-- Run once, as a superuser, in the database that holds the queues (app):
--   psql -d app -v a_app_password=... -v b_app_password=... \
--        -v alice_password=... -v dashboard_password=... -f roles.sql
CREATE EXTENSION aedb_queue;

-- Each tenant's application enqueues and works its own queues only.
CREATE ROLE tenant_a_app LOGIN PASSWORD :'a_app_password' IN ROLE aedb_queue_producer, aedb_queue_worker;
CREATE ROLE tenant_b_app LOGIN PASSWORD :'b_app_password' IN ROLE aedb_queue_producer, aedb_queue_worker;
SELECT aedb_queue.queue_grant('tenant_a.*', 'tenant_a_app', privilege)
  FROM unnest(ARRAY['producer', 'worker']) AS privilege;
SELECT aedb_queue.queue_grant('tenant_b.*', 'tenant_b_app', privilege)
  FROM unnest(ARRAY['producer', 'worker']) AS privilege;

-- Each tenant's operators: a role of their own, admin of their queues only.
CREATE ROLE tenant_a_ops IN ROLE aedb_queue_admin;
CREATE ROLE tenant_b_ops IN ROLE aedb_queue_admin;
SELECT aedb_queue.queue_grant('tenant_a.*', 'tenant_a_ops', 'admin');
SELECT aedb_queue.queue_grant('tenant_b.*', 'tenant_b_ops', 'admin');

-- An operator of tenant a who also uses the command line logs in as herself.
CREATE ROLE alice LOGIN PASSWORD :'alice_password' IN ROLE tenant_a_ops;

-- The dashboard's connection role: no rights of its own, may become each operators' role.
CREATE ROLE dashboard LOGIN NOINHERIT PASSWORD :'dashboard_password' IN ROLE tenant_a_ops, tenant_b_ops;
