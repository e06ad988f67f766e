"""The worker runtime behind PgBouncer in transaction mode: with
``transaction_pooler=True`` nothing is prepared server-side (psycopg would
prepare a statement after 5 runs, and lose it on the next server
connection); LISTEN runs on a direct connection (``listen_conninfo``)."""

from __future__ import annotations

import time

import psycopg
import pytest

from aedb_queue import App, enqueue, enqueue_batch
from helpers import configure, live, running, tag, wait_until
from pooler import PgBouncer


@pytest.fixture
def pooler(cluster):
    bouncer = PgBouncer(cluster)
    try:
        yield bouncer
    finally:
        bouncer.stop()


def test_a_runtime_behind_the_pooler_completes_each_task_once(cluster, pooler, su, queue):
    n = 200
    su.execute(f"CREATE TABLE ledger_{queue} (task_id bigint NOT NULL, attempt int NOT NULL, backend int NOT NULL)")
    su.execute(f"GRANT INSERT ON ledger_{queue} TO app_service")
    with psycopg.connect(pooler.dsn("app_producer"), autocommit=True, prepare_threshold=None) as producer:
        ids = [enqueue(producer, queue, {"n": i}).task_id for i in range(n // 2)]
        ids += enqueue_batch(producer, queue, [{"n": i} for i in range(n // 2, n)])
    app = App(pooler.dsn("app_service"), transaction_pooler=True, listen=False)

    @app.task(queue, concurrency=4, poll_interval=0.1, transactional=True)
    async def record(task, conn):
        await conn.execute(f"INSERT INTO ledger_{queue} VALUES (%s, %s, pg_backend_pid())",
                           (task.task_id, task.attempts))

    with running(app):
        wait_until(lambda: live(su, queue) == 0, 60, "the queue drained")
    rows = dict(su.execute(f"SELECT task_id, count(*) FROM ledger_{queue} GROUP BY task_id").fetchall())
    assert rows == {i: 1 for i in ids}, "each task's ledger row once"
    # Without transaction_pooler, psycopg prepares what it ran 5 times and the
    # next server connection lacks it (26000) or has another's (42P05): the
    # attempt fails and is retried.
    retried = su.execute(f"SELECT count(*) FROM ledger_{queue} WHERE attempt > 1").fetchone()[0]
    assert retried == 0, "every task done at its first attempt"
    backends = su.execute(f"SELECT count(DISTINCT backend) FROM ledger_{queue}").fetchone()[0]
    assert backends == 2, "the handlers' transactions ran on both server connections"


def test_listen_on_a_direct_connection_wakes_a_runtime_behind_the_pooler(cluster, pooler, admin, su, queue):
    configure(admin, queue, notify=True)
    app = App(pooler.dsn("app_service"), transaction_pooler=True,
              listen_conninfo=cluster.dsn("app_service"), application_name=f"pooled-{tag(queue)}")
    done: list[float] = []

    # A poll far beyond the bound below: only the notification can be in time.
    @app.task(queue, poll_interval=600)
    def handle(task):
        done.append(time.monotonic())

    with running(app):
        wait_until(lambda: su.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND query = 'LISTEN aedb_queue'",
            (f"pooled-{tag(queue)} listener",)).fetchone()[0], 60, "listener connected")
        time.sleep(0.5)  # the initial claim found nothing; the next poll is 600 s away
        with psycopg.connect(pooler.dsn("app_producer"), autocommit=True, prepare_threshold=None) as producer:
            enqueue(producer, queue, {})
        enqueued = time.monotonic()
        wait_until(lambda: done, 60, "woken by NOTIFY, not by the 600 s poll")
    print(f"handled {done[0] - enqueued:.3f} s after the enqueue committed")


def test_a_transaction_pooler_without_a_listen_connection_is_refused(pooler):
    with pytest.raises(ValueError, match="^listen_conninfo"):
        App(pooler.dsn("app_service"), transaction_pooler=True)
    App(pooler.dsn("app_service"), transaction_pooler=True, listen=False)
