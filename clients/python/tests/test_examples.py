"""The README's examples (kept as files under examples/) run as written; the benchmark script works."""

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
from helpers import live, wait_until

ROOT = pathlib.Path(__file__).resolve().parents[1]


def readme_blocks() -> dict[str, str]:
    """Code blocks of the README that follow a line ``<!-- file: examples/NAME.py -->``."""
    text = (ROOT / "README.md").read_text()
    pattern = re.compile(r"<!-- file: (\S+) -->\n```python\n(.*?)```", re.S)
    return {name: body for name, body in pattern.findall(text)}


def test_readme_shows_the_example_files_verbatim():
    blocks = readme_blocks()
    assert set(blocks) == {"examples/producer.py", "examples/worker.py"}
    for name, body in blocks.items():
        assert body == (ROOT / name).read_text(), f"README's {name} differs from the file"


def test_producer_and_worker_examples_run(cluster, su, tmp_path):
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
