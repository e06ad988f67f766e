"""A non-transactional worker app for the process tests (sync and async handlers).

``AEDB_TEST_QUEUE`` gets a sync handler, ``AEDB_TEST_QUEUE_ASYNC`` (if set)
an async one. Payload ``sleep`` is how long the handler takes;
``checkpoint`` stores progress first. The result names the worker.
"""

import asyncio
import os
import time

from aedb_queue import App

DSN = os.environ["AEDB_TEST_DSN"]
NAME = os.environ.get("AEDB_TEST_WORKER", "worker")
LEASE = float(os.environ.get("AEDB_TEST_LEASE", "30"))
POLL = float(os.environ.get("AEDB_TEST_POLL", "0.5"))

app = App(DSN, owner_id=f"{NAME}-{os.getpid()}")


@app.task(os.environ["AEDB_TEST_QUEUE"], concurrency=4, lease=LEASE, poll_interval=POLL)
def handle(task):
    if task.payload.get("checkpoint"):
        task.checkpoint({"by": NAME})
    time.sleep(task.payload.get("sleep", 0))
    return {"by": NAME}


if os.environ.get("AEDB_TEST_QUEUE_ASYNC"):

    @app.task(os.environ["AEDB_TEST_QUEUE_ASYNC"], concurrency=4, lease=LEASE, poll_interval=POLL)
    async def handle_async(task):
        if task.payload.get("checkpoint"):
            await task.checkpoint({"by": NAME})
        await asyncio.sleep(task.payload.get("sleep", 0))
        return {"by": NAME}
