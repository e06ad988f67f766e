"""A worker app for the process tests, configured by environment variables.

Each task is handled transactionally: the handler writes a ledger row and
the completion commits with it, so the ledger holds a row for a task iff
this worker's completion of it applied. Payload keys steer the handler:
``sleep`` (seconds), ``sleep_if`` ({worker name: seconds}, overrides),
``checkpoint`` (store progress before sleeping).
"""

import asyncio
import os
import time

from aedb_queue import App

DSN = os.environ["AEDB_TEST_DSN"]
QUEUE = os.environ["AEDB_TEST_QUEUE"]
NAME = os.environ.get("AEDB_TEST_WORKER", "worker")
MODE = os.environ.get("AEDB_TEST_MODE", "sync")
LEASE = float(os.environ.get("AEDB_TEST_LEASE", "30"))
POLL = float(os.environ.get("AEDB_TEST_POLL", "0.5"))
CONCURRENCY = int(os.environ.get("AEDB_TEST_CONCURRENCY", "8"))

app = App(DSN, owner_id=f"{NAME}-{os.getpid()}")

LEDGER = "INSERT INTO ledger (queue, task_id, worker, attempt) VALUES (%s, %s, %s, %s)"


def pause_for(payload) -> float:
    payload = payload or {}
    return float(payload.get("sleep_if", {}).get(NAME, payload.get("sleep", 0)))


if MODE == "async":

    @app.task(QUEUE, concurrency=CONCURRENCY, lease=LEASE, poll_interval=POLL, transactional=True)
    async def handle(task, conn):
        if (task.payload or {}).get("checkpoint"):
            await task.checkpoint({"by": NAME, "attempt": task.attempts})
        await asyncio.sleep(pause_for(task.payload))
        await conn.execute(LEDGER, (task.queue, task.task_id, NAME, task.attempts))
        return {"by": NAME}

else:

    @app.task(QUEUE, concurrency=CONCURRENCY, lease=LEASE, poll_interval=POLL, transactional=True)
    def handle(task, conn):
        if (task.payload or {}).get("checkpoint"):
            task.checkpoint({"by": NAME, "attempt": task.attempts})
        time.sleep(pause_for(task.payload))
        conn.execute(LEDGER, (task.queue, task.task_id, NAME, task.attempts))
        return {"by": NAME}
