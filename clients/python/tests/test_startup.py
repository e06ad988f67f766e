"""The installed script, failing fast on a wrong DSN, and the runtime's log lines."""

from __future__ import annotations

import importlib.metadata
import logging
import pathlib
import socket
import subprocess
import sys

import psycopg
import pytest

from aedb_queue import App, DeadLetter, StartupError, enqueue
from helpers import running, wait_until

HERE = pathlib.Path(__file__).resolve().parent
SCRIPT = pathlib.Path(sys.executable).parent / "aedb-queue-worker"
PASSWORD = "right-horse-battery"


def test_installed_script_does_not_shadow_the_operator_cli():
    scripts = {e.name for e in importlib.metadata.distribution("aedb_queue").entry_points
               if e.group == "console_scripts"}
    assert scripts == {"aedb-queue-worker"}
    assert not (SCRIPT.parent / "aedb-queue").exists()
    help_ = subprocess.run([str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert help_.returncode == 0 and "module:attribute" in help_.stdout
    old = subprocess.run([str(SCRIPT), "worker", "apps.plain_app:app"], capture_output=True, text=True,
                         timeout=60)
    assert old.returncode == 2
    assert "aedb-queue-worker apps.plain_app:app" in old.stderr, old.stderr


def worker(dsn: str, queue: str = "q") -> subprocess.CompletedProcess:
    """``aedb-queue-worker apps.plain_app:app`` on ``dsn``; a bound on the wait, not a timed assertion."""
    return subprocess.run([str(SCRIPT), "apps.plain_app:app"], cwd=HERE, capture_output=True, text=True,
                          timeout=60, env={"AEDB_TEST_DSN": dsn, "AEDB_TEST_QUEUE": queue, "PATH": "/usr/bin:/bin"})


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket is closed


@pytest.fixture(scope="module")
def password_role(cluster):
    """A role that must give a password (scram), as a production role would."""
    with cluster.su() as su:
        su.execute(f"CREATE ROLE app_pw LOGIN PASSWORD '{PASSWORD}' IN ROLE aedb_queue_worker")
    hba = cluster.data / "pg_hba.conf"
    hba.write_text("host all app_pw 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
    with cluster.su() as su:
        su.execute("SELECT pg_reload_conf()")
    return cluster.dsn("app_pw")


def test_wrong_port_fails_at_start(cluster):
    port = closed_port()
    out = worker(f"host=127.0.0.1 port={port} dbname=app user=app_worker")
    assert out.returncode == 1, out.stderr
    assert f"cannot connect to host=127.0.0.1 port={port} dbname=app user=app_worker" in out.stderr, out.stderr


def test_wrong_password_fails_at_start_without_showing_it(cluster, password_role):
    out = worker(password_role + " password=wrong-guess")
    assert out.returncode == 1, out.stderr
    assert "password authentication failed" in out.stderr and "wrong-guess" not in out.stderr, out.stderr
    ok = subprocess.Popen([str(SCRIPT), "apps.plain_app:app"], cwd=HERE, stderr=subprocess.PIPE, text=True,
                          env={"AEDB_TEST_DSN": password_role + f" password={PASSWORD}", "AEDB_TEST_QUEUE": "q",
                               "PATH": "/usr/bin:/bin"})
    try:
        line = ok.stderr.readline()
        while "started" not in line and line:
            line = ok.stderr.readline()
        assert "user=app_pw" in line and PASSWORD not in line, line
    finally:
        ok.terminate()
        assert ok.wait(30) == 0


def test_missing_database_or_extension_fails_at_start(cluster, su):
    out = worker(cluster.dsn("app_worker", dbname="no_such_db"))
    assert out.returncode == 1 and 'database "no_such_db" does not exist' in out.stderr, out.stderr
    su.execute("DROP DATABASE IF EXISTS aedb_noext")
    su.execute("CREATE DATABASE aedb_noext")
    out = worker(cluster.dsn("app_worker", dbname="aedb_noext"))
    assert out.returncode == 1 and "extension is not installed" in out.stderr, out.stderr


def test_app_run_raises_startup_error(cluster):
    app = App(f"host=127.0.0.1 port={closed_port()} dbname=app user=app_worker")

    @app.task("q")
    def handle(task):
        return None

    with pytest.raises(StartupError, match="cannot connect to"):
        app.run(handle_signals=False)


def test_start_and_every_failed_attempt_are_logged(cluster, admin, producer, su, queue, caplog):
    admin.execute("SELECT aedb_queue.queue_configure(%s, max_attempts => 2, backoff_base => '1 ms', "
                  "backoff_max => '1 ms')", (queue,))
    app = App(cluster.dsn("app_worker"))

    @app.task(queue, concurrency=3, poll_interval=0.2)
    def handle(task):
        if task.payload.get("dead"):
            raise DeadLetter("no such address")
        raise ValueError(f"boom {task.attempts}")

    retried = enqueue(producer, queue, {}).task_id
    dead = enqueue(producer, queue, {"dead": True}).task_id
    with caplog.at_level(logging.INFO, logger="aedb_queue"), running(app):
        wait_until(lambda: su.execute("SELECT count(*) FROM aedb_queue.task WHERE queue = %s AND state = 'dead'",
                                      (queue,)).fetchone()[0] == 2, 60, "both tasks dead")
        wait_until(lambda: sum("failed (attempt" in r.getMessage() for r in caplog.records) == 3, 30, "3 lines")
    lines = [r.getMessage() for r in caplog.records]
    started = next(line for line in lines if "started" in line)
    assert f"queues {queue} (concurrency 3)" in started
    assert f"host=127.0.0.1 port={cluster.port} dbname=aedb_pytest user=app_worker" in started
    assert f"task {retried} of queue '{queue}' failed (attempt 1): ValueError: boom 1; will be retried" in lines
    assert f"task {retried} of queue '{queue}' failed (attempt 2): ValueError: boom 2; dead-lettered" in lines
    assert f"task {dead} of queue '{queue}' failed (attempt 1): DeadLetter: no such address; dead-lettered" in lines


def test_server_restart_after_a_first_success_is_survived(cluster, producer, su, queue):
    app = App(cluster.dsn("app_worker"))

    @app.task(queue, poll_interval=0.2)
    def handle(task):
        return None

    with running(app):
        first = enqueue(producer, queue, {}).task_id
        wait_until(lambda: done(su, first), 60, "first task done")
        cluster.restart()
        with psycopg.connect(cluster.dsn("app_producer"), autocommit=True) as again:
            second = enqueue(again, queue, {}).task_id
        with cluster.su() as check:
            wait_until(lambda: done(check, second), 60, "the task after the restart done")


def done(conn: psycopg.Connection, task_id: int) -> bool:
    return conn.execute("SELECT count(*) FROM aedb_queue.task WHERE task_id = %s", (task_id,)).fetchone()[0] == 0
