"""A workflow worker for the crash tests of children: spawn, wait, return the results.

The workflow of ``AEDB_TEST_QUEUE`` spawns ``AEDB_TEST_CHILDREN`` children
into ``AEDB_TEST_QUEUE + "_kids"`` (served here too) as the step ``spawn``,
waits for them as the step ``join`` and returns their results in order.
Each child writes a ledger row (``worker`` = ``child``) in the transaction
of its completion, so the ledger has a row per child completed.
``AEDB_TEST_KILL`` names the point at which the worker SIGKILLs itself:

- ``mid-spawn``: inside the spawn's transaction, the first children
  enqueued, the last not yet (its payload kills the worker as it is encoded);
- ``after-spawn``: right after the spawn committed, before the wait;
- ``parked-wait``: right after the wait parked the workflow;
- ``after-wait``: right after the wait returned the results.
"""

import os
import time

from pydantic import BaseModel, model_serializer

from aedb_queue import Child, WorkflowExit

from .crash import LEASE, LEDGER, QUEUE, app, kill_at

KIDS = QUEUE + "_kids"
N = int(os.environ.get("AEDB_TEST_CHILDREN", "4"))


class Last(BaseModel):
    """The last child's payload: encoding it is the ``mid-spawn`` point."""

    n: int

    @model_serializer
    def _encode(self) -> dict:
        kill_at("mid-spawn")
        return {"n": self.n}


@app.task(QUEUE, concurrency=1, lease=LEASE, poll_interval=0.2)
def parent(task):
    # The last child has a priority of its own, so it is enqueued by a
    # statement of its own after the others' (theirs is one batch).
    children = [Child(KIDS, {"n": n}) for n in range(N - 1)] + [Child(KIDS, Last(n=N - 1), priority=1)]
    ids = task.spawn("spawn", children)
    kill_at("after-spawn")
    try:
        results = task.wait_for_tasks("join", ids)
    except WorkflowExit:
        kill_at("parked-wait")
        raise
    kill_at("after-wait")
    return {"ids": ids, "squares": [r.result["square"] for r in results]}


@app.task(KIDS, concurrency=N, lease=LEASE, poll_interval=0.2, transactional=True)
def child(task, conn):
    time.sleep(0.5)  # long enough for the workflow to park before the last child ends
    conn.execute(LEDGER, (task.queue, task.task_id, "child", task.attempts))
    return {"square": task.payload["n"] ** 2}
