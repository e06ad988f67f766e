"""Python client of the aedb_queue PostgreSQL extension: producer API and worker runtime.

Producer (on your own connection, inside your transaction)::

    from aedb_queue import enqueue
    with psycopg.connect(dsn) as conn:
        enqueue(conn, "emails", {"to": "ada@example.com"})

Worker::

    from aedb_queue import App
    app = App(dsn)

    @app.task("emails", concurrency=8)
    def send(task):
        ...

    app.run()   # or: python -m aedb_queue worker mymodule:app

Durable workflows: in a handler, ``task.step(name, fn)``, ``task.sleep(name,
duration)``, ``task.wait_for_event(name, key, timeout)``, and children with
``ids = task.spawn(name, [Child(queue, payload), ...])`` then
``task.wait_for_tasks(name, ids)``; ``emit(conn, queue, key, payload)`` on
the producer side.
"""

from .app import App
from .connections import StartupError
from .payloads import PayloadError
from .producer import Enqueued, aemit, aenqueue, aenqueue_batch, emit, enqueue, enqueue_batch
from .task import (AsyncTask, Child, ChildFailed, ChildResult, Complete, DeadLetter, Event, FollowUp, Retry, Task,
                   WorkflowExit)

__version__ = "0.9.0"

__all__ = [
    "App",
    "AsyncTask",
    "Child",
    "ChildFailed",
    "ChildResult",
    "Complete",
    "DeadLetter",
    "Enqueued",
    "Event",
    "FollowUp",
    "PayloadError",
    "Retry",
    "StartupError",
    "Task",
    "WorkflowExit",
    "aemit",
    "aenqueue",
    "aenqueue_batch",
    "emit",
    "enqueue",
    "enqueue_batch",
]
