#!/usr/bin/env python3
"""Benchmark driver for procrastinate (PyPI `procrastinate`), async API over
psycopg 3. Protocol and scenarios: harness.py and README.md next to this file.

    python procrastinate_driver.py '{"system":"procrastinate","db":"postgres://...","scenario":"drain",...}'
"""

from __future__ import annotations

import asyncio
import contextlib

import procrastinate
from procrastinate.jobs import Status

import harness

QUEUE = "bench"


class Procrastinate:
    name = "procrastinate"

    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.version = harness.pkg_version("procrastinate")
        w = cfg["workers"]
        # "The shorter your average job execution time, the more your pool
        # will need to contain as many connections as your concurrency (plus
        # one)": docs/discussions.md, "Mind the size of your PostgreSQL pool".
        # The steady producer's calls (at most 4 in flight) get their own.
        self.pool = w + 1 + (harness.MAX_INFLIGHT if cfg["scenario"] == "steady" else 0)
        self.app = procrastinate.App(
            connector=procrastinate.PsycopgConnector(
                conninfo=cfg["db"], min_size=self.pool, max_size=self.pool
            )
        )
        self.on_jobs = None

        @self.app.task(queue=QUEUE, name="noop")
        async def noop(i: int, t: float, pad: str) -> None:
            self.on_jobs(harness.now_ms(), [{"i": i, "t": t}])

        self.task = noop
        self.worker: asyncio.Task | None = None
        self.opened = False

    async def setup(self) -> None:
        async with self.app.open_async():
            await self.app.schema_manager.apply_schema_async()

    async def open(self) -> None:
        await self.app.open_async()
        self.opened = True

    async def enqueue_batch(self, payloads: list[dict]) -> None:
        # Task.batch_defer_async: one INSERT for the whole batch.
        await self.task.batch_defer_async(*payloads)

    async def fill_backlog(self, mix: dict, chunk) -> None:
        # Dead: deferred, then finished as failed by procrastinate's own
        # procrastinate_finish_job_v1 (the job manager's finish_job_by_id_async),
        # from todo, so attempts stays 0 where a worker's failure makes it 1.
        jm = self.app.job_manager

        async def dead(ps: list[dict]) -> None:
            for job_id in await self.task.batch_defer_async(*ps):
                await jm.finish_job_by_id_async(job_id, status=Status.FAILED, delete_job=False)

        await chunk(mix["dead"], dead)
        # Scheduled: configure(schedule_in=a year); ready elsewhere: configure(queue=...).
        scheduled = self.task.configure(schedule_in={"days": 365})
        await chunk(mix["scheduled"], lambda ps: scheduled.batch_defer_async(*ps))
        other = self.task.configure(queue="backlog_other")
        await chunk(mix["ready"], lambda ps: other.batch_defer_async(*ps))

    async def enqueue_one(self, payload: dict) -> None:
        await self.task.defer_async(**payload)

    async def start_workers(self, on_jobs) -> None:
        self.on_jobs = on_jobs
        # One worker with W asynchronous sub-workers: "app.run_worker(concurrency=30)",
        # docs/howto/production/concurrency.md. Everything else at its
        # default: listen_notify=True, fetch_job_polling_interval=5 s,
        # delete_jobs='never' (finished jobs stay, status 'succeeded').
        self.worker = asyncio.create_task(
            self.app.run_worker_async(
                queues=[QUEUE],
                concurrency=self.cfg["workers"],
                install_signal_handlers=False,
            )
        )

    async def stop_workers(self) -> None:
        if self.worker is not None:
            w, self.worker = self.worker, None
            # Cancelling the worker's task is its documented stop: it waits
            # for running jobs, then returns.
            w.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await w

    async def close(self) -> None:
        await self.stop_workers()
        if self.opened:
            await self.app.close_async()
            self.opened = False

    count_sql = f"SELECT count(*)::bigint FROM procrastinate_jobs WHERE queue_name = '{QUEUE}' AND status = 'succeeded'"

    @staticmethod
    def completed_from(n: int, enqueued: int) -> int:
        return n

    analyze_tables = ["procrastinate_jobs"]

    def settings(self, scenario: str) -> str:
        cfg = self.cfg
        pool = f"PsycopgConnector pool {self.pool}"
        if scenario == "enqueue":
            return (
                f"batch_defer_async({cfg['batch']} jobs) per call, 1 producer; {pool}"
                if cfg["batch"] > 1
                else f"defer_async() one job per call, {cfg['workers']} concurrent producers; {pool}"
            )
        work = (
            f"run_worker_async(concurrency={cfg['workers']}) listen_notify on, one job per fetch "
            f"(no batch claim: batch={cfg['batch']} has no setting); {pool}"
        )
        if scenario == "drain":
            return f"{work}; preload batch_defer_async() x{harness.PRELOAD_CHUNK} + ANALYZE + CHECKPOINT (untimed); done = status 'succeeded'"
        return f"{work}; producer batch_defer_async() every {harness.TICK_MS}ms at {cfg['rate']:g}/s (<={harness.MAX_INFLIGHT} calls in flight)"


if __name__ == "__main__":
    harness.main("procrastinate", Procrastinate)
