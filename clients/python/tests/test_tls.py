"""TLS with libpq's settings: the package connects through psycopg (libpq),
so ``sslmode=verify-full`` and ``sslrootcert`` in the connection string are
libpq's. A cluster of its own takes TLS only (hostssl lines), with a server
certificate for "localhost" from a CA made here (trustme); the runtime and
the producer work over verify-full, and a wrong host name or an untrusted CA
is refused."""

from __future__ import annotations

import os
import shutil

import psycopg
import pytest

from aedb_queue import App, enqueue
from conftest import DBNAME, Cluster
from helpers import completed, configure, running, wait_until

trustme = pytest.importorskip("trustme")

HBA = """\
local all postgres trust
hostssl all all 127.0.0.1/32 trust
"""


@pytest.fixture(scope="module")
def tls_cluster():
    c = Cluster()
    try:
        c.start()
        ca = trustme.CA()
        server = ca.issue_cert("localhost")  # only this name: 127.0.0.1 is not in it
        tls = c.base / "tls"
        tls.mkdir()
        ca.cert_pem.write_to_path(str(tls / "ca.crt"))
        trustme.CA().cert_pem.write_to_path(str(tls / "other_ca.crt"))
        server.cert_chain_pems[0].write_to_path(str(tls / "server.crt"))
        server.private_key_pem.write_to_path(str(tls / "server.key"))
        os.chmod(tls / "server.key", 0o600)
        if os.geteuid() == 0:
            shutil.chown(tls / "server.key", "postgres", "postgres")
        with open(c.data / "postgresql.conf", "a") as conf:
            conf.write(f"ssl = on\nssl_cert_file = '{tls}/server.crt'\nssl_key_file = '{tls}/server.key'\n")
        (c.data / "pg_hba.conf").write_text(HBA)
        c.restart()
    except Exception:
        shutil.rmtree(c.base, ignore_errors=True)
        raise
    try:
        yield c
    finally:
        c.stop()


def dsn(c: Cluster, role: str, host: str = "host=localhost hostaddr=127.0.0.1", root: str = "ca.crt") -> str:
    return (f"{host} port={c.port} dbname={DBNAME} user={role} "
            f"sslmode=verify-full sslrootcert={c.base / 'tls' / root}")


def test_the_runtime_and_the_producer_work_over_verify_full(tls_cluster):
    queue = "tls_py"
    with psycopg.connect(dsn(tls_cluster, "app_admin"), autocommit=True) as admin:
        configure(admin, queue, keep_completed="1 hour")
    with psycopg.connect(dsn(tls_cluster, "app_producer"), autocommit=True) as producer:
        assert producer.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone()[0]
        task = enqueue(producer, queue, {"n": 1})
    app = App(dsn(tls_cluster, "app_worker"))

    @app.task(queue, poll_interval=0.2)
    def handle(t):
        return {"ssl": True}

    with psycopg.connect(dsn(tls_cluster, "postgres"), autocommit=True) as su:
        with running(app):
            wait_until(lambda: completed(su, task.task_id), 60, "the task done over TLS")
            plain = su.execute(
                "SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) "
                "WHERE a.usename = 'app_worker' AND NOT s.ssl").fetchone()[0]
            assert plain == 0


def test_a_plain_session_is_refused(tls_cluster):
    with pytest.raises(psycopg.OperationalError, match="no encryption"):
        psycopg.connect(f"host=127.0.0.1 port={tls_cluster.port} dbname={DBNAME} user=app_worker sslmode=disable")


def test_a_wrong_host_name_is_refused(tls_cluster):
    with pytest.raises(psycopg.OperationalError, match="does not match host name"):
        psycopg.connect(dsn(tls_cluster, "app_worker", host="host=127.0.0.1"))


def test_an_untrusted_ca_is_refused(tls_cluster):
    with pytest.raises(psycopg.OperationalError, match="certificate verify failed"):
        psycopg.connect(dsn(tls_cluster, "app_worker", root="other_ca.crt"))
