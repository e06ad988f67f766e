#!/usr/bin/env python3
"""Benchmark driver for Oban for Python (PyPI `oban`, Python 3.12 or newer),
embedded in the driver's process. Protocol and scenarios: harness.py and
README.md next to this file.

    python oban_driver.py '{"system":"oban-py","db":"postgres://...","scenario":"drain",...}'
"""

from __future__ import annotations

import sys
from datetime import timedelta

import harness

if sys.version_info < (3, 12):
    # Every oban release declares Requires-Python >=3.12 (PyPI).
    harness.die(f"oban needs Python 3.12 or newer (this is {sys.version.split()[0]})", 2)

from oban import Oban, worker  # noqa: E402
from oban.schema import install  # noqa: E402

QUEUE = "bench"
ON_JOBS = [None]


@worker(queue=QUEUE)
class Noop:
    async def process(self, job) -> None:
        ON_JOBS[0](harness.now_ms(), [job.args])


class ObanAdapter:
    name = "oban"

    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.version = harness.pkg_version("oban")
        self.pool = None
        self.client: Oban | None = None
        self.server: Oban | None = None
        # Oban fetches up to (limit - running) jobs per fetch and acks
        # finished jobs in batches, so its one knob is the queue's limit:
        # W workers taking B jobs at a time hold W x B jobs, as for awa.
        self.limit = cfg["workers"] * cfg["batch"]

    async def setup(self) -> None:
        pool = await Oban.create_pool(self.cfg["db"])
        try:
            # The programmatic form of `oban install` (docs/installation.md).
            await install(pool)
        finally:
            await pool.close()

    async def open(self) -> None:
        # The pool at its default bounds, 1 to 10: "The default of 10 is
        # comfortable for most deployments" (docs/production.md, Sizing the
        # Connection Pool).
        self.pool = await Oban.create_pool(self.cfg["db"])
        # Client mode (no queues): enqueues only.
        self.client = Oban(pool=self.pool, name="bench-client")

    async def enqueue_batch(self, payloads: list[dict]) -> None:
        # enqueue_many: "a single database query to insert all jobs".
        await self.client.enqueue_many([Noop.new(p) for p in payloads])

    async def fill_backlog(self, mix: dict, chunk) -> None:
        # Ready: another queue (no worker runs it); scheduled: scheduled_in a
        # year. oban-py has no call that discards a job (discarded is what
        # exhausted attempts leave): the dead part is enqueued and then ended
        # with cancel_many_jobs (state 'cancelled', its other terminal failure).
        async def dead(ps: list[dict]) -> None:
            jobs = await self.client.enqueue_many([Noop.new(p) for p in ps])
            await self.client.cancel_many_jobs(jobs)

        await chunk(mix["dead"], dead)
        year = timedelta(days=365)
        await chunk(mix["scheduled"], lambda ps: self.client.enqueue_many([Noop.new(p, scheduled_in=year) for p in ps]))
        await chunk(mix["ready"], lambda ps: self.client.enqueue_many([Noop.new(p, queue="backlog_other") for p in ps]))

    async def enqueue_one(self, payload: dict) -> None:
        await self.client.enqueue(Noop.new(payload))

    async def start_workers(self, on_jobs) -> None:
        ON_JOBS[0] = on_jobs
        # Server mode: queues={"bench": limit} (docs/defining_queues.md,
        # Programmatic Configuration); everything else at its defaults
        # (debounce 5 ms, stager 1 s, PostgreSQL notifier, leadership on).
        self.server = Oban(pool=self.pool, name="bench-server", queues={QUEUE: self.limit})
        await self.server.start()

    async def stop_workers(self) -> None:
        if self.server is not None:
            s, self.server = self.server, None
            await s.stop()

    async def close(self) -> None:
        await self.stop_workers()
        if self.pool is not None:
            await self.pool.close()
            self.pool = None

    count_sql = f"SELECT count(*)::bigint FROM oban_jobs WHERE queue = '{QUEUE}' AND state = 'completed'"

    @staticmethod
    def completed_from(n: int, enqueued: int) -> int:
        return n

    analyze_tables = ["oban_jobs"]

    def settings(self, scenario: str) -> str:
        cfg = self.cfg
        pool = "psycopg pool 1..10 (default)"
        if scenario == "enqueue":
            return (
                f"enqueue_many([{cfg['batch']} jobs]) per call, 1 producer; {pool}"
                if cfg["batch"] > 1
                else f"enqueue() one job per call, {cfg['workers']} concurrent producers; {pool}"
            )
        work = f"Oban(queues={{'{QUEUE}': {self.limit}}}) (limit = workers x batch), defaults otherwise; {pool}"
        if scenario == "drain":
            return f"{work}; preload enqueue_many() x{harness.PRELOAD_CHUNK} + ANALYZE + CHECKPOINT (untimed); done = state 'completed'"
        return f"{work}; producer enqueue_many() every {harness.TICK_MS}ms at {cfg['rate']:g}/s (<={harness.MAX_INFLIGHT} calls in flight)"


if __name__ == "__main__":
    harness.main("oban-py", ObanAdapter)
