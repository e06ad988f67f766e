"""What the crash-test apps (workflow_app, children_app) share: their
settings from the environment, the worker (its owner id names the kill
point, or ``rescuer``), the ledger statement, and the SIGKILL at a point.
"""

import os
import signal

from aedb_queue import App

DSN = os.environ["AEDB_TEST_DSN"]
QUEUE = os.environ["AEDB_TEST_QUEUE"]
KILL = os.environ.get("AEDB_TEST_KILL", "")
LEASE = float(os.environ.get("AEDB_TEST_LEASE", "5"))

app = App(DSN, owner_id=f"{KILL or 'rescuer'}-{os.getpid()}")

LEDGER = "INSERT INTO ledger (queue, task_id, worker, attempt) VALUES (%s, %s, %s, %s)"


def kill_at(point: str) -> None:
    """SIGKILL this worker if ``AEDB_TEST_KILL`` names ``point``."""
    if KILL == point:
        print(f"killed at {point}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
