"""The runtime of one running App: runners, the LISTEN connection, database
calls with reconnection, and shutdown.

Shutdown: stop claiming; wait up to ``shutdown_timeout`` for running
handlers to finish and settle; hand every task still running back with
``queue_release`` (no attempt spent, progress kept; the handler's eventual
result is dropped); close the connections.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from datetime import timedelta
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg_errors

from . import args as _args
from . import sql
from .connections import Backoff, Pool, StartupError, connect_kwargs, describe, is_transient
from .runner import Job, QueueRunner, _one_line, fetchval
from .spec import TaskSpec
from .threads import Threads
from .tx import drop_thread_connection

log = logging.getLogger("aedb_queue")

T = TypeVar("T")

# After the shutdown deadline: how long settles already under way may take,
# and how long hand-backs are retried across a lost connection.
SETTLE_GRACE = 10.0


class Runtime:
    def __init__(
        self,
        conninfo: str,
        specs: Iterable[TaskSpec],
        *,
        owner_id: str,
        shutdown_timeout: float | str,
        listen: bool,
        application_name: str,
        transaction_pooler: bool = False,
        listen_conninfo: str | None = None,
    ) -> None:
        self.conninfo = conninfo
        self.transaction_pooler = transaction_pooler
        self.listen_conninfo = listen_conninfo or conninfo
        self.owner_id = owner_id
        # A text is read by the server at start (_read_durations); 0 until then.
        self._shutdown_timeout_text = shutdown_timeout if isinstance(shutdown_timeout, str) else None
        self.shutdown_timeout = 0.0 if isinstance(shutdown_timeout, str) else shutdown_timeout
        self.application_name = application_name
        self._listen_enabled = listen
        specs = list(specs)
        slots = sum(s.concurrency for s in specs)
        self.pool = Pool(conninfo, size=slots + 4, application_name=application_name,
                         transaction_pooler=transaction_pooler)
        self.threads = Threads(on_exit=drop_thread_connection)
        self.runners = {s.queue: QueueRunner(self, s) for s in specs}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stopping = False
        self._stop_requested = asyncio.Event()
        self._force = asyncio.Event()
        self._hard_deadline: float | None = None
        self._release_missing = False

    # -- control -------------------------------------------------------------

    def request_stop(self, *, force: bool = False) -> None:
        """Begin the graceful shutdown (on the loop thread); ``force`` skips the wait."""
        if not self.stopping:
            self.stopping = True
            log.info("stopping: no more claims")
            self._stop_requested.set()
            for runner in self.runners.values():
                runner.kick()
        if force:
            self._force.set()

    async def sleep_unless_stopping(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._stop_requested.wait(), seconds)
        except TimeoutError:
            pass

    def call_from_thread(self, coro: Coroutine[Any, Any, bool]) -> bool:
        """Run ``coro`` (a heartbeat: True while the lease is held) on the
        runtime's loop from a handler thread and wait for it; False once the
        loop is gone (the runtime stopped)."""
        assert self.loop is not None
        try:
            return asyncio.run_coroutine_threadsafe(coro, self.loop).result()
        except RuntimeError:  # the loop is gone: the runtime stopped
            coro.close()
            return False

    # -- database calls ------------------------------------------------------

    async def run_db(
        self,
        op: Callable[[psycopg.AsyncConnection], Awaitable[T]],
        *,
        what: str,
        retry: bool = False,
    ) -> T:
        """``op`` on a pooled connection. A lost connection is replaced and ``op``
        tried once more at once (idle connections die with a server restart);
        with ``retry``, then again with backoff until it works or shutdown gives up."""
        backoff = Backoff()
        immediate = True
        while True:
            conn = None
            try:
                conn = await self.pool.acquire()
                result = await op(conn)
            except psycopg.Error as exc:
                transient = is_transient(exc, conn)
                if conn is not None:
                    self.pool.release(conn, discard=transient)
                if not transient:
                    raise
                self.pool.drop_idle()
                if immediate and conn is not None:
                    immediate = False
                    continue
                if not retry or self._past_hard_deadline():
                    raise
                delay = backoff.next()
                log.warning("%s: %s; retrying in %.1f s", what, _one_line(exc), delay)
                await asyncio.sleep(delay)
                continue
            except BaseException:
                if conn is not None:
                    self.pool.release(conn, discard=True)
                raise
            self.pool.release(conn)
            return result

    def _past_hard_deadline(self) -> bool:
        return self._hard_deadline is not None and time.monotonic() > self._hard_deadline

    async def hand_back(self, job: Job) -> None:
        """``queue_release`` the task: ready again at once, its attempt not spent."""
        job.abandoned = True
        if self._release_missing:
            return
        params = {**job.key(), "delay": timedelta(0)}

        async def op(conn: psycopg.AsyncConnection) -> str:
            return await fetchval(conn, sql.RELEASE, params, str)

        try:
            outcome = await self.run_db(op, what=f"hand back {job!r}", retry=True)
        except pg_errors.UndefinedFunction:
            self._release_missing = True
            log.warning("aedb_queue.queue_release does not exist (extension older than 0.7.0): "
                        "tasks still running stay leased until their leases expire")
            return
        except psycopg.Error as exc:
            log.error("could not hand back %r: %s; it is retried after its lease", job, _one_line(exc))
            return
        if outcome == "applied":
            log.info("handed back %r", job)
        else:
            log.info("%r was no longer ours to hand back", job)

    # -- the run ------------------------------------------------------------

    async def _first_connections(self) -> None:
        """Connect once before anything else, and raise StartupError if that fails:
        a wrong DSN, password, database or a database without the extension is a
        configuration error to report, not an outage to wait out. After this
        succeeded, lost connections are retried with backoff."""
        where = describe(self.conninfo)
        try:
            conn = await self.pool.acquire()
        except psycopg.Error as exc:
            await self.pool.close()
            raise StartupError(f"cannot connect to {where}: {_one_line(exc)}") from exc
        try:
            rows = await (await conn.execute(sql.EXTENSION_VERSION)).fetchall()
        except psycopg.Error as exc:
            rows = None
            failure = exc
        if not rows:
            self.pool.release(conn)
            await self.pool.close()
            if rows is None:
                raise StartupError(f"cannot use {where}: {_one_line(failure)}") from failure
            raise StartupError(f"the aedb_queue extension is not installed in {where} "
                               "(CREATE EXTENSION aedb_queue)")
        try:
            await self._read_durations(conn)
        except BaseException:
            self.pool.release(conn)
            await self.pool.close()
            raise
        self.pool.release(conn)
        if self._listen_enabled and self.listen_conninfo != self.conninfo:
            listen_where = describe(self.listen_conninfo)
            kwargs = connect_kwargs(self.listen_conninfo, self.application_name + " listener")
            try:
                conn = await psycopg.AsyncConnection.connect(self.listen_conninfo, autocommit=True, **kwargs)
            except psycopg.Error as exc:
                await self.pool.close()
                raise StartupError(f"cannot connect to {listen_where} (listen_conninfo): {_one_line(exc)}") from exc
            await conn.close()
        log.info("worker %s started: queues %s; connected to %s (extension %s)", self.owner_id,
                 ", ".join(f"{q} (concurrency {r.spec.concurrency})" for q, r in self.runners.items()),
                 where, rows[0][0])

    async def _read_durations(self, conn: psycopg.AsyncConnection) -> None:
        """The durations given as text (``shutdown_timeout``, a task's ``lease``,
        ``poll_interval``, ``heartbeat_interval``), read by PostgreSQL's interval
        input on the first connection: one it refuses, or one out of its
        option's range, is a StartupError naming the option and the text."""
        wanted: list[tuple[str, str, str]] = []  # (what to call it, option, text)
        if self._shutdown_timeout_text is not None:
            wanted.append(("", "shutdown_timeout", self._shutdown_timeout_text))
        for queue, runner in self.runners.items():
            wanted += [(f"queue {queue!r}: ", name, text) for name, text in runner.spec.texts]
        read: dict[str, float] = {}
        for prefix, name, text in wanted:
            if text in read:
                continue
            try:
                row = await (await conn.execute(_args.INTERVAL_SECONDS, (text,))).fetchone()
                assert row is not None
                read[text] = row[0]
            except psycopg.errors.DataError as exc:  # SQLSTATE class 22: what interval input refuses
                reason = exc.diag.message_primary or _one_line(exc)
                raise StartupError(prefix + str(_args.bad_text(name, text, reason))) from exc
            except psycopg.Error as exc:
                raise StartupError(f"{prefix}{name}: cannot read {text!r}: {_one_line(exc)}") from exc
        if self._shutdown_timeout_text is not None:
            text = self._shutdown_timeout_text
            try:
                self.shutdown_timeout = _args.check_read(read[text], text, "shutdown_timeout", positive=False)
            except ValueError as exc:
                raise StartupError(str(exc)) from exc
            self._shutdown_timeout_text = None
        for queue, runner in self.runners.items():
            try:
                runner.spec = runner.spec.read(read)
            except ValueError as exc:
                raise StartupError(f"queue {queue!r}: {exc}") from exc

    async def run(self) -> None:
        self.loop = asyncio.get_running_loop()
        try:
            await self._first_connections()
        except BaseException:
            self.threads.close()
            raise
        loops = [asyncio.ensure_future(r.run()) for r in self.runners.values()]
        listener = asyncio.ensure_future(self._listen()) if self._listen_enabled else None
        try:
            await self._stop_requested.wait()
            await asyncio.gather(*loops, return_exceptions=True)
            await self._drain()
        finally:
            self.stopping = True
            for task in loops:
                task.cancel()
            if listener is not None:
                listener.cancel()
                await asyncio.gather(listener, return_exceptions=True)
            await self._cancel_slots()
            self.threads.close()
            await self.pool.close()
            log.info("worker %s stopped", self.owner_id)

    def _slots(self) -> set[asyncio.Task[None]]:
        return {slot for r in self.runners.values() for slot in r.slots}

    def _jobs(self) -> list[Job]:
        return [job for r in self.runners.values() for job in r.jobs]

    async def _wait_slots(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        force = asyncio.ensure_future(self._force.wait())
        try:
            while (slots := self._slots()) and not self._force.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                await asyncio.wait({*slots, force}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        finally:
            force.cancel()

    async def _drain(self) -> None:
        running = len(self._jobs())
        if running:
            log.info("waiting up to %.1f s for %d running task(s)", self.shutdown_timeout, running)
        await self._wait_slots(self.shutdown_timeout)
        self._hard_deadline = time.monotonic() + SETTLE_GRACE
        late = [job for job in self._jobs() if job.phase == "handler" and not job.abandoned]
        if late:
            log.info("handing back %d task(s) still running", len(late))
        for job in late:
            job.abandoned = True
            if job.slot is not None:
                job.slot.cancel()
        await asyncio.gather(*(self.hand_back(job) for job in late))
        self._force.clear()
        await self._wait_slots(SETTLE_GRACE)

    async def _cancel_slots(self) -> None:
        slots = self._slots()
        for slot in slots:
            slot.cancel()
        if slots:
            await asyncio.gather(*slots, return_exceptions=True)

    # -- wake-ups --------------------------------------------------------------

    async def _listen(self) -> None:
        """LISTEN on a dedicated connection; reconnect with backoff when it is lost."""
        backoff = Backoff()
        kwargs = connect_kwargs(self.listen_conninfo, self.application_name + " listener")
        while not self.stopping:
            conn = None
            try:
                conn = await psycopg.AsyncConnection.connect(self.listen_conninfo, autocommit=True, **kwargs)
                await conn.execute(sql.LISTEN)
                log.debug("listening on channel %r", sql.CHANNEL)
                backoff.reset()
                for runner in self.runners.values():
                    runner.wake()  # whatever was notified while we were not listening
                async for note in conn.notifies():
                    notified = self.runners.get(note.payload)
                    if notified is not None:
                        notified.wake()
                raise psycopg.OperationalError("the notification stream ended")
            except psycopg.Error as exc:
                if self.stopping:
                    return
                delay = backoff.next()
                log.warning("LISTEN connection: %s; reconnecting in %.1f s", _one_line(exc), delay)
                for runner in self.runners.values():
                    runner.wake()  # poll while deaf
                await self.sleep_unless_stopping(delay)
            finally:
                if conn is not None:
                    try:
                        await conn.close()
                    except Exception:
                        pass
