"""A workflow worker for the crash tests: charge -> sleep -> label -> wait for 'packed' -> ship.

Each of the three steps writes a ledger row (``worker`` = the step's name)
in the transaction that records the step (``transactional=True``), so the
ledger has a row per step if and only if the step's record committed.
``AEDB_TEST_KILL`` names the point at which the worker SIGKILLs itself:

- ``before-STEP``: in the step's transaction, before its write;
- ``effect-STEP``: after its write, before the commit;
- ``after-STEP``: right after the step committed;
- ``parked-sleep`` / ``parked-event``: right after the task parked;
- ``after-event``: right after the event arrived.
"""

from aedb_queue import WorkflowExit

from .crash import LEASE, LEDGER, QUEUE, app, kill_at


@app.task(QUEUE, concurrency=1, lease=LEASE, poll_interval=0.2)
def order(task):
    def effect(step):
        def write(conn):
            kill_at(f"before-{step}")
            conn.execute(LEDGER, (task.queue, task.task_id, step, task.attempts))
            kill_at(f"effect-{step}")
            return {"done": step}

        return write

    def step(name):
        result = task.step(name, effect(name), transactional=True)
        kill_at(f"after-{name}")
        return result

    def parking(point, wait):
        try:
            return wait()
        except WorkflowExit:
            kill_at(point)
            raise

    charged = step("charge")
    parking("parked-sleep", lambda: task.sleep("cool-off", "1 second"))
    labelled = step("label")
    packed = parking("parked-event", lambda: task.wait_for_event(
        "packed", f"{task.queue}/{task.task_id}/packed", timeout="1 minute"))
    kill_at("after-event")
    shipped = step("ship")
    return {"steps": [charged, labelled, shipped], "packed": packed.payload}
