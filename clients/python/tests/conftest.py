"""A real PostgreSQL 15 cluster for the tests, started once per session.

initdb/pg_ctl from $AEDB_PG_BIN (default /usr/lib/postgresql/15/bin), run as
the ``postgres`` OS user when the tests run as root, data under /var/tmp,
bound to 127.0.0.1 on a free port in 55400-55499. After ``CREATE EXTENSION
aedb_queue`` the application roles are made: ordinary LOGIN roles that are
members of the extension's roles. Code under test connects as those; the
superuser is only for set-up and assertions.
"""

from __future__ import annotations

import itertools
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import tempfile

import psycopg
import pytest

HERE = pathlib.Path(__file__).resolve().parent
# The suite's guard against backend deaths (docs/testing.md), run on the log at teardown.
CHECK_SERVER_LOG = HERE.parents[2] / "scripts" / "check_server_log.sh"
sys.path.insert(0, str(HERE))  # the worker apps (apps/) and helpers

PG_BIN = pathlib.Path(os.environ.get("AEDB_PG_BIN", "/usr/lib/postgresql/15/bin"))
PORTS = range(55400, 55500)
DBNAME = "aedb_pytest"
PREFIX = "aedb-pytest-"

# role -> the extension roles it is a member of
ROLES = {
    "app_producer": ["aedb_queue_producer"],
    "app_worker": ["aedb_queue_worker"],
    "app_admin": ["aedb_queue_admin"],
    # handlers that write the application's tables and enqueue follow-ups
    "app_service": ["aedb_queue_producer", "aedb_queue_worker"],
}


def _as_postgres(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


def _free_port() -> int:
    for port in PORTS:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port in 55400-55499")


def _reap_stale() -> None:
    """Stop clusters left by an earlier run whose pytest process is gone."""
    for base in pathlib.Path("/var/tmp").glob(PREFIX + "*"):
        owner = base / "owner.pid"
        try:
            pid = int(owner.read_text())
            os.kill(pid, 0)
            continue  # still running
        except (OSError, ValueError):
            pass
        data = base / "data"
        if (data / "postmaster.pid").exists():
            subprocess.run(_as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(data), "stop", "-m", "immediate"]),
                           capture_output=True, timeout=60)
        shutil.rmtree(base, ignore_errors=True)


class Cluster:
    def __init__(self) -> None:
        self.base = pathlib.Path(tempfile.mkdtemp(prefix=PREFIX, dir="/var/tmp"))
        (self.base / "owner.pid").write_text(str(os.getpid()))
        self.data = self.base / "data"
        self.log = self.base / "postgres.log"
        self.port = _free_port()

    def _pg(self, *cmd: str, timeout: float = 120) -> None:
        result = subprocess.run(_as_postgres(list(cmd)), capture_output=True, text=True, timeout=timeout)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{result.stdout}\n{result.stderr}\n{self.tail_log()}")

    def tail_log(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text().splitlines()[-lines:])
        except OSError:
            return ""

    def start(self, *, app: bool = True) -> None:
        """initdb, start and CREATE DATABASE; with ``app``, also the extension, roles and tables of the suite."""
        if os.geteuid() == 0:
            shutil.chown(self.base, "postgres", "postgres")
        self._pg(str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust",
                 "-E", "UTF8", "--locale=C", "--no-sync")
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(
                f"\nport = {self.port}\n"
                "listen_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.base}'\n"
                "shared_preload_libraries = 'aedb_queue'\n"
                "max_connections = 200\n"
                "fsync = off\n"
                "full_page_writes = off\n"
                "log_min_messages = warning\n"
                "log_connections = off\n"
                "track_functions = 'all'\n"
            )
        self.pg_ctl_start()
        with psycopg.connect(self.dsn("postgres", "postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {DBNAME}")
        if app:
            self._set_up_app()

    def _set_up_app(self) -> None:
        with self.su() as conn:
            conn.execute("CREATE EXTENSION aedb_queue")
            for role, memberships in ROLES.items():
                conn.execute(f"CREATE ROLE {role} LOGIN")
                for group in memberships:
                    conn.execute(f"GRANT {group} TO {role}")
            apps = ", ".join(ROLES)
            conn.execute(f"GRANT USAGE ON SCHEMA public TO {apps}")
            conn.execute(f"ALTER DEFAULT PRIVILEGES IN SCHEMA public "
                         f"GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {apps}")
            conn.execute(f"ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE ON SEQUENCES TO {apps}")
            # What handlers write: no unique constraint, so a task done twice shows twice.
            conn.execute("CREATE TABLE ledger (queue text NOT NULL, task_id bigint NOT NULL, "
                         "worker text NOT NULL, attempt int, at timestamptz NOT NULL DEFAULT clock_timestamp())")
            conn.execute("CREATE TABLE orders (id bigserial PRIMARY KEY, email text NOT NULL)")
            conn.execute("CREATE TABLE sent_emails (order_id bigint NOT NULL, sent_at timestamptz NOT NULL DEFAULT now())")

    def pg_ctl_start(self) -> None:
        self._pg(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start")

    def restart(self) -> None:
        self._pg(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60",
                 "restart", "-m", "fast")

    def stop(self) -> None:
        """Stops the server and fails when its log shows a process that died."""
        try:
            self._pg(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "stop", "-m", "immediate", timeout=60)
            check = subprocess.run(["bash", str(CHECK_SERVER_LOG), str(self.log)],
                                   capture_output=True, text=True, timeout=60)
        finally:
            shutil.rmtree(self.base, ignore_errors=True)
        if check.returncode != 0:
            raise AssertionError(check.stderr)

    def dsn(self, role: str, dbname: str = DBNAME) -> str:
        return f"host=127.0.0.1 port={self.port} dbname={dbname} user={role}"

    def su(self) -> psycopg.Connection:
        """A superuser connection (autocommit), for set-up and assertions only."""
        return psycopg.connect(self.dsn("postgres"), autocommit=True)

    def connect(self, role: str, **kwargs) -> psycopg.Connection:
        if role not in ROLES:
            raise ValueError(f"{role!r} is not an application role")
        return psycopg.connect(self.dsn(role), **kwargs)

    def has_release(self) -> bool:
        with self.su() as conn:
            return conn.execute(
                "SELECT count(*) FROM pg_proc WHERE proname = 'queue_release'"
            ).fetchone()[0] > 0


def _started(app: bool):
    if not (PG_BIN / "initdb").exists():
        pytest.exit(f"PostgreSQL 15 binaries not found in {PG_BIN}", returncode=2)
    _reap_stale()
    c = Cluster()
    try:
        c.start(app=app)
    except Exception:
        shutil.rmtree(c.base, ignore_errors=True)
        raise
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="session")
def cluster():
    yield from _started(app=True)


@pytest.fixture
def bare_cluster():
    """A cluster of the test's own with an empty database: no extension, roles or tables (roles are
    cluster-wide, so set-up SQL that creates them cannot run on the shared cluster)."""
    yield from _started(app=False)


@pytest.fixture
def su(cluster):
    with cluster.su() as conn:
        yield conn


_counter = itertools.count(1)


@pytest.fixture
def queue(request) -> str:
    """A queue name of this test's own."""
    name = re.sub(r"[^a-z0-9]+", "_", request.node.name.lower()).strip("_")[:60]
    return f"{name}_{next(_counter)}"


@pytest.fixture
def admin(cluster):
    with cluster.connect("app_admin", autocommit=True) as conn:
        yield conn


@pytest.fixture
def producer(cluster):
    with cluster.connect("app_producer", autocommit=True) as conn:
        yield conn


@pytest.fixture
def needs_release(cluster):
    if not cluster.has_release():
        pytest.fail("aedb_queue.queue_release is not installed (extension 0.7.0 needed)")
