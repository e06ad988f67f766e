"""The runtime carries on when its connections are killed or the server restarts."""

from __future__ import annotations

import time

from aedb_queue import App, enqueue, enqueue_batch
from helpers import tag, configure, live, running, wait_until


def test_server_restart_mid_run(cluster, queue):
    """pg_ctl restart -m fast while 4 transactional handlers drain 400 tasks:
    the worker reconnects (claims, settles, LISTEN) and finishes every task,
    each exactly once in the ledger."""
    with cluster.connect("app_admin", autocommit=True) as admin:
        configure(admin, queue, notify=True, backoff_base="100 milliseconds")
    with cluster.connect("app_producer", autocommit=True) as producer:
        ids = enqueue_batch(producer, queue, [{"i": i} for i in range(400)], max_attempts=20)
    app = App(cluster.dsn("app_service"), application_name=f"restart-{tag(queue)}")

    @app.task(queue, concurrency=4, lease=3, poll_interval=30, transactional=True)
    def handle(task, conn):
        time.sleep(0.01)
        conn.execute("INSERT INTO ledger (queue, task_id, worker, attempt) VALUES (%s, %s, 'r', %s)",
                     (task.queue, task.task_id, task.attempts))

    def done() -> int:
        try:
            with cluster.su() as su:
                return su.execute("SELECT count(*) FROM ledger WHERE queue = %s", (queue,)).fetchone()[0]
        except Exception:
            return 0

    with running(app):
        wait_until(lambda: done() >= 80, 60, "some tasks done before the restart")
        cluster.restart()
        wait_until(lambda: done() >= len(ids), 90, "every task done after the restart")
        # the LISTEN connection is back: with a 30 s poll, a new task is picked up on its notification
        with cluster.su() as su:
            wait_until(lambda: su.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND query = 'LISTEN aedb_queue'",
                (f"restart-{tag(queue)} listener",)).fetchone()[0], 60, "listener reconnected")
        time.sleep(0.5)
        with cluster.connect("app_producer", autocommit=True) as producer:
            extra = enqueue(producer, queue, {"after": "restart"}).task_id
        # (under the 30 s poll, and generous for a notification on a loaded machine)
        wait_until(lambda: done() == len(ids) + 1, 25, "the task enqueued after the restart")
    with cluster.su() as su:
        rows = [r[0] for r in su.execute("SELECT task_id FROM ledger WHERE queue = %s", (queue,)).fetchall()]
        assert sorted(rows) == sorted([*ids, extra]), "a task done twice or not at all"
        assert live(su, queue) == 0


def test_terminated_backends_are_replaced(cluster, queue):
    with cluster.connect("app_admin", autocommit=True) as admin:
        configure(admin, queue, keep_completed="1 hour", notify=True)
    with cluster.connect("app_producer", autocommit=True) as producer:
        ids = enqueue_batch(producer, queue, [{"i": i} for i in range(300)], max_attempts=20)
    app = App(cluster.dsn("app_worker"), application_name=f"terminate-{tag(queue)}")

    @app.task(queue, concurrency=4, lease=3, poll_interval=30)
    async def handle(task):
        return {"i": task.payload["i"]}

    with cluster.su() as su, running(app):
        def count() -> int:
            return su.execute("SELECT count(*) FROM aedb_queue.completed_task WHERE queue = %s",
                              (queue,)).fetchone()[0]

        wait_until(lambda: count() >= 50, 60, "some tasks done")
        killed = su.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                            "WHERE application_name LIKE %s", (f"terminate-{tag(queue)}%",)).fetchone()[0]
        assert killed >= 2  # the pool's and the listener's
        wait_until(lambda: count() == len(ids), 60, "every task completed after the terminations")
        results = dict(su.execute("SELECT task_id, result FROM aedb_queue.completed_task WHERE queue = %s",
                                  (queue,)).fetchall())
    assert sorted(results) == sorted(ids)
