"""The top-level README's Python examples are examples/five_minutes.py and examples/workflow.py,
verbatim; the first runs here (test_examples.py runs the workflow)."""

from __future__ import annotations

import os
import pathlib
import re
import signal
import subprocess
import sys

from helpers import live, wait_until

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLE = "examples/five_minutes.py"
WORKFLOW = "examples/workflow.py"


def test_the_readme_shows_the_example_verbatim():
    text = (ROOT.parents[1] / "README.md").read_text()
    blocks = re.findall(r"<!-- file: clients/python/(\S+) -->\n```python\n(.*?)```", text, re.S)
    assert [name for name, _ in blocks] == [EXAMPLE, WORKFLOW]
    for name, text in blocks:
        assert text == (ROOT / name).read_text(), name


def test_the_example_enqueues_and_works_its_task(cluster, su, tmp_path):
    log_path = tmp_path / "five_minutes.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, EXAMPLE], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "AEDB_QUEUE_DSN": cluster.dsn("app_service")})
        try:
            wait_until(lambda: "sending to ada@example.com" in log_path.read_text(), 30,
                       f"the handler's line; output: {log_path.read_text()}")
            wait_until(lambda: live(su, "welcome-emails") == 0, 30, "the task completed")
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0, log_path.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
