"""A PgBouncer (Debian's 1.18) in transaction mode in front of the test
cluster: 2 server connections per role, handed out round robin, so each
transaction of a client may run on another backend. Its own ini and auth
file in a directory of its own, as the postgres OS user, on a free port of
127.0.0.1; stopped when the fixture ends."""

from __future__ import annotations

import os
import pathlib
import shutil
import socket
import subprocess
import tempfile
import time

from conftest import DBNAME, ROLES

PORTS = range(55500, 55600)


def _free_port() -> int:
    for port in PORTS:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port in 55500-55599")


class PgBouncer:
    def __init__(self, cluster, pool_size: int = 2) -> None:
        self.base = pathlib.Path(tempfile.mkdtemp(prefix="aedb-pytest-pgbouncer-", dir="/var/tmp"))
        self.port = _free_port()
        (self.base / "users.txt").write_text("".join(f'"{role}" ""\n' for role in ROLES))
        (self.base / "pgbouncer.ini").write_text(
            f"[databases]\n{DBNAME} = host=127.0.0.1 port={cluster.port} dbname={DBNAME}\n"
            "[pgbouncer]\nlisten_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\nunix_socket_dir =\nauth_type = trust\n"
            f"auth_file = {self.base}/users.txt\npool_mode = transaction\n"
            f"default_pool_size = {pool_size}\nmin_pool_size = {pool_size}\nreserve_pool_size = 0\n"
            "server_round_robin = 1\nserver_reset_query =\nmax_client_conn = 200\n"
            f"logfile = {self.base}/pgbouncer.log\npidfile = {self.base}/pgbouncer.pid\n")
        if os.geteuid() == 0:
            shutil.chown(self.base, "postgres", "postgres")
        user = ["-u", "postgres"] if os.geteuid() == 0 else []
        binary = "/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else "pgbouncer"
        self.process = subprocess.Popen([binary, *user, "-q", str(self.base / "pgbouncer.ini")],
                                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while True:
            if self.process.poll() is not None or time.monotonic() > deadline:
                log = self.log()
                self.stop()
                raise RuntimeError(f"pgbouncer did not start:\n{log}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)

    def dsn(self, role: str) -> str:
        return f"host=127.0.0.1 port={self.port} dbname={DBNAME} user={role}"

    def log(self) -> str:
        try:
            return (self.base / "pgbouncer.log").read_text()
        except OSError:
            return ""

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(10)
        shutil.rmtree(self.base, ignore_errors=True)
