"""The README's examples (kept as files under examples/) run as written, as the roles its set-up SQL makes;
the benchmark script works."""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import subprocess
import sys

import pytest

from aedb_queue import enqueue_batch
from conftest import PG_BIN
from helpers import live, wait_until

ROOT = pathlib.Path(__file__).resolve().parents[1]


def readme_blocks() -> dict[str, str]:
    """Code blocks of the README that follow a line ``<!-- file: examples/NAME -->``."""
    text = (ROOT / "README.md").read_text()
    pattern = re.compile(r"<!-- file: (\S+) -->\n```(?:python|sql)\n(.*?)```", re.S)
    return {name: body for name, body in pattern.findall(text)}


def test_readme_shows_the_example_files_verbatim():
    blocks = readme_blocks()
    assert set(blocks) == {"examples/setup.sql", "examples/producer.py", "examples/worker.py",
                           "examples/workflow.py"}
    for name, body in blocks.items():
        assert body == (ROOT / name).read_text(), f"README's {name} differs from the file"


def test_setup_sql_then_producer_and_worker_examples_run_as_its_roles(bare_cluster, tmp_path):
    """A cluster of its own (the SQL creates cluster-wide roles), set up by the README's block through psql
    as a deployer would; the examples then run as the roles it made, with only the grants it gave."""
    cluster = bare_cluster
    sql = readme_blocks()["examples/setup.sql"]
    setup = subprocess.run([str(PG_BIN / "psql"), "-X", "-v", "ON_ERROR_STOP=1", "-d", cluster.dsn("postgres")],
                           input=sql, capture_output=True, text=True, timeout=60)
    assert setup.returncode == 0, setup.stderr
    with cluster.su() as su:
        roles = su.execute("SELECT r.rolname, r.rolsuper, array_agg(g.rolname ORDER BY g.rolname) "
                           "FROM pg_roles r JOIN pg_auth_members m ON m.member = r.oid "
                           "JOIN pg_roles g ON g.oid = m.roleid WHERE r.rolname LIKE 'app_%' "
                           "GROUP BY 1, 2 ORDER BY 1").fetchall()
        assert roles == [("app_producer", False, ["aedb_queue_producer"]),
                         ("app_service", False, ["aedb_queue_producer", "aedb_queue_worker"])]
        run_examples(cluster, su, tmp_path)
        run_workflow_example(cluster, su, tmp_path)


def run_examples(cluster, su, tmp_path) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    produced = subprocess.run([sys.executable, "examples/producer.py"], cwd=ROOT, capture_output=True, text=True,
                              timeout=60, env={**env, "AEDB_QUEUE_DSN": cluster.dsn("app_producer")})
    assert produced.returncode == 0, produced.stderr
    order_id = int(re.match(r"order (\d+): task \d+", produced.stdout).group(1))
    log = open(tmp_path / "worker.log", "w")
    proc = subprocess.Popen([sys.executable, "examples/worker.py"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            env={**env, "AEDB_QUEUE_DSN": cluster.dsn("app_service")})
    try:
        wait_until(lambda: su.execute("SELECT count(*) FROM sent_emails WHERE order_id = %s",
                                      (order_id,)).fetchone()[0] == 1, 30,
                   f"the audit row; worker output: {(tmp_path / 'worker.log').read_text()}")
        wait_until(lambda: live(su, "emails") == 0 and live(su, "email-audit") == 0, 60, "both queues empty")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        log.close()
    assert "sending welcome to ada@example.com" in (tmp_path / "worker.log").read_text()


def run_workflow_example(cluster, su, tmp_path) -> None:
    """examples/workflow.py enqueues order 42 and works it: charged, a 1 s sleep, then parked
    waiting for the warehouse; ``workflow.py packed 42`` (as the producer) emits the event, and
    the order ships once."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    log_path = tmp_path / "workflow.log"
    log = open(log_path, "w")
    proc = subprocess.Popen([sys.executable, "examples/workflow.py"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            env={**env, "AEDB_QUEUE_DSN": cluster.dsn("app_service")})
    try:
        wait_until(lambda: "parked: waiting for event 'order-42/packed'" in log_path.read_text(), 30,
                   f"the workflow waits for the warehouse; output: {log_path.read_text()}")
        assert "parked: sleeping until" in log_path.read_text()
        assert su.execute("SELECT count(*) FROM sent_emails WHERE order_id = 42").fetchone()[0] == 0
        packed = subprocess.run([sys.executable, "examples/workflow.py", "packed", "42"], cwd=ROOT,
                                capture_output=True, text=True, timeout=60,
                                env={**env, "AEDB_QUEUE_DSN": cluster.dsn("app_producer")})
        assert packed.returncode == 0, packed.stderr
        wait_until(lambda: "order 42 shipped: {'boxes': 2}" in log_path.read_text(), 30,
                   f"the order shipped; output: {log_path.read_text()}")
        wait_until(lambda: live(su, "orders") == 0, 30, "the workflow completed")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        log.close()
    assert su.execute("SELECT count(*) FROM sent_emails WHERE order_id = 42").fetchone()[0] == 1
    output = log_path.read_text()
    assert "resumed: event 'order-42/packed' arrived (step 'packed')" in output


def test_drain_benchmark_prints_one_json_line(cluster, su, producer, queue):
    enqueue_batch(producer, queue, [{}] * 300)
    out = subprocess.run([sys.executable, "benchmarks/drain.py", "--dsn", cluster.dsn("app_worker"),
                          "--queue", queue, "--handlers", "8", "--max-seconds", "60"],
                         cwd=ROOT, capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1
    report = json.loads(lines[0])
    assert report["jobs"] == 300 and report["seconds"] > 0
    assert report["jobs_per_s"] == pytest.approx(300 / report["seconds"], rel=0.02)
    assert live(su, queue) == 0
