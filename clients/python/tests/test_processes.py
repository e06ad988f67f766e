"""Worker processes (``python -m aedb_queue worker``): drain, shutdown, crash, the CLI."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from aedb_queue import enqueue, enqueue_batch
from helpers import HERE, completed, configure, live, states, stop_worker, task_row, wait_until, worker


def ledger(su, queue):
    return su.execute("SELECT task_id, worker, attempt FROM ledger WHERE queue = %s", (queue,)).fetchall()


def test_drain_exactly_once_across_worker_processes(cluster, su, producer, queue, tmp_path):
    """2,000 tasks, three worker processes of 8 handlers each (two sync, one
    async), enqueued while they run: the ledger the handlers write in the
    completion's transaction has each task exactly once."""
    dsn = cluster.dsn("app_service")
    env = {"AEDB_TEST_QUEUE": queue, "AEDB_TEST_CONCURRENCY": "8", "AEDB_TEST_POLL": "0.5"}
    with worker("apps.ledger_app:app", dsn, tmp_path, env={**env, "AEDB_TEST_WORKER": "a"}) as a, \
         worker("apps.ledger_app:app", dsn, tmp_path, env={**env, "AEDB_TEST_WORKER": "b"}) as b, \
         worker("apps.ledger_app:app", dsn, tmp_path,
                env={**env, "AEDB_TEST_WORKER": "c", "AEDB_TEST_MODE": "async"}) as c:
        ids: list[int] = []
        for start in range(0, 2000, 100):
            ids += enqueue_batch(producer, queue, [{"n": i} for i in range(start, start + 100)])
            if start % 500 == 0:
                ids.append(enqueue(producer, queue, {"single": start}).task_id)
        total = len(ids)
        wait_until(lambda: live(su, queue) == 0, 120,
                   f"queue drained; {states(su, queue)}; {a.output()[-2000:]}")
        for w in (a, b, c):
            assert stop_worker(w) == 0, w.output()
        rows = ledger(su, queue)
    done = [r[0] for r in rows]
    assert len(done) == total, f"{len(done)} ledger rows for {total} tasks"
    assert sorted(done) == sorted(ids), "a task done twice or not at all"
    by_worker = {r[1] for r in rows}
    assert len(by_worker) >= 2, f"only {by_worker} did any work"
    assert all(r[2] == 1 for r in rows), "a task ran more than once"
    assert states(su, queue) == {}


def test_sigterm_completes_or_hands_back_every_task(cluster, admin, su, producer, queue, tmp_path, needs_release):
    """Running handlers get the shutdown timeout; those still running then are
    handed back with their attempt restored and their progress kept."""
    q_sync, q_async = f"{queue}_s", f"{queue}_a"
    tasks: dict[str, dict[str, list[int]]] = {}
    for q in (q_sync, q_async):
        configure(admin, q, keep_completed="1 hour")
        tasks[q] = {
            "short": [enqueue(producer, q, {"sleep": 3}, priority=10).task_id for _ in range(2)],
            "long": [enqueue(producer, q, {"sleep": 300, "checkpoint": True}, priority=10).task_id for _ in range(2)],
            "waiting": [enqueue(producer, q, {"sleep": 0}).task_id for _ in range(3)],
        }
    env = {"AEDB_TEST_QUEUE": q_sync, "AEDB_TEST_QUEUE_ASYNC": q_async, "AEDB_TEST_WORKER": "w"}
    with worker("apps.plain_app:app", cluster.dsn("app_service"), tmp_path,
                "--shutdown-timeout", "8", env=env) as w:
        def checkpointed() -> bool:
            return all((task_row(su, t) or {}).get("progress") == {"by": "w"}
                       for q in tasks for t in tasks[q]["long"]) and \
                all(states(su, q).get("in_flight") == 4 for q in tasks)
        wait_until(checkpointed, 60, f"4 tasks per queue in flight, long ones checkpointed; {w.output()}")
        w.signal(signal.SIGTERM)
        assert w.wait(30) == 0, w.output()
        output = w.output()
    for q, kinds in tasks.items():
        for t in kinds["short"]:
            done = completed(su, t)
            assert done is not None and done["attempts"] == 1, f"{q} short task {t} not completed: {output}"
        for t in kinds["long"]:
            row = task_row(su, t)
            assert row["state"] == "ready", f"{q} long task {t}: {row}\n{output}"
            assert row["attempts"] == 0, "handing back spent an attempt"
            assert row["progress"] == {"by": "w"}, "handing back lost the progress"
        for t in kinds["waiting"]:
            row = task_row(su, t)
            assert (row["state"], row["attempts"]) == ("ready", 0), "claimed during shutdown"
    assert "handed back" in output


def test_sigkilled_workers_tasks_are_reclaimed_after_the_lease(cluster, su, producer, queue, tmp_path):
    dsn = cluster.dsn("app_service")
    # A 4 s lease: a heartbeat (every 1.3 s) may come more than 2 s late.
    env = {"AEDB_TEST_QUEUE": queue, "AEDB_TEST_LEASE": "4", "AEDB_TEST_POLL": "0.3",
           "AEDB_TEST_CONCURRENCY": "4"}
    ids = enqueue_batch(producer, queue, [{"sleep_if": {"victim": 600}}] * 4)
    with worker("apps.ledger_app:app", dsn, tmp_path, env={**env, "AEDB_TEST_WORKER": "victim"}) as victim:
        wait_until(lambda: su.execute(
            "SELECT count(*) FROM aedb_queue.task WHERE queue = %s AND state = 'in_flight' "
            "AND owner_id LIKE 'victim-%%'", (queue,)).fetchone()[0] == 4, 60,
            f"the victim holds every task; {victim.output()}")
        first = su.execute("SELECT max(lease_deadline) FROM aedb_queue.task WHERE queue = %s",
                           (queue,)).fetchone()[0]
        wait_until(lambda: su.execute("SELECT now() > %s", (first,)).fetchone()[0], 60, "past the first leases")
        # heartbeats have kept the leases alive meanwhile
        assert states(su, queue) == {"in_flight": 4}
        assert su.execute("SELECT bool_and(lease_deadline > now()) FROM aedb_queue.task WHERE queue = %s",
                          (queue,)).fetchone()[0], "the leases were not extended"
        victim.signal(signal.SIGKILL)
        victim.wait(10)
    with worker("apps.ledger_app:app", dsn, tmp_path, env={**env, "AEDB_TEST_WORKER": "rescuer"}) as rescuer:
        wait_until(lambda: live(su, queue) == 0, 60, f"tasks reclaimed; {rescuer.output()}")
        assert stop_worker(rescuer) == 0
    rows = sorted(ledger(su, queue))
    assert rows == [(t, "rescuer", 2) for t in sorted(ids)]


def test_entry_point_runs_an_app_with_its_options(cluster, su, admin, producer, queue, tmp_path):
    configure(admin, queue, keep_completed="1 hour")
    ids = [enqueue(producer, queue, {"sleep": 0.5}).task_id for _ in range(6)]
    env = {"AEDB_TEST_QUEUE": queue, "AEDB_TEST_POLL": "0.2", "AEDB_TEST_QUEUE_ASYNC": f"{queue}_unused"}
    with worker("apps.plain_app:app", cluster.dsn("app_service"), tmp_path,
                "--concurrency", "2", "--queues", queue, "--shutdown-timeout", "5", env=env) as w:
        peak = 0
        deadline = time.monotonic() + 60
        while not all(completed(su, t) for t in ids):
            assert time.monotonic() < deadline, w.output()
            peak = max(peak, states(su, queue).get("in_flight", 0))
            time.sleep(0.05)
        w.signal(signal.SIGINT)  # Ctrl-C stops it as gracefully as SIGTERM
        assert w.wait(30) == 0, w.output()
        output = w.output()
    assert peak == 2, f"--concurrency 2, but {peak} ran at once"
    assert f"{queue}_unused" not in output, "--queues ignored"
    assert "stopped" in output


def test_entry_point_refuses_bad_targets(cluster, tmp_path):
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "aedb_queue", *args], cwd=HERE, capture_output=True,
                              text=True, timeout=60, env={"AEDB_TEST_DSN": cluster.dsn("app_worker"),
                                                          "AEDB_TEST_QUEUE": "q", "PATH": "/usr/bin:/bin"})

    assert run("worker", "--help").returncode == 0
    missing = run("worker", "no_such_module:app")
    assert missing.returncode == 2 and "no_such_module" in missing.stderr
    wrong = run("worker", "apps.plain_app:handle")
    assert wrong.returncode == 2 and "not an aedb_queue.App" in wrong.stderr
    unknown = run("worker", "apps.plain_app:app", "--queues", "nope")
    assert unknown.returncode == 2 and "queues" in unknown.stderr
    bad = run("worker", "apps.plain_app:app", "--concurrency", "0")
    assert bad.returncode == 2 and "concurrency" in bad.stderr
