#!/usr/bin/env bash
# A production deployment made as docs/deployment.md tells a newcomer, end to
# end, on a fresh cluster of PostgreSQL 15 that accepts TLS connections only:
#   1. the doc shows tests/deployment/'s files verbatim; the .deb installed
#      with dpkg -i; a private CA and the server's certificate (certs.sh);
#      postgresql.conf and pg_hba.conf as shown (hostssl only); roles.sql.
#   2. the Rust worker (clients/rust/examples/quickstart.rs) as tenant a's
#      application over sslmode=verify-full: enqueues three tasks in its own
#      transaction and completes them.
#   3. the CLI over verify-full from PG* variables: tenant b's application
#      enqueues into its queue and is refused tenant a's; alice (tenant a's
#      operator) sees only tenant a's queues and cannot pause tenant b's; the
#      wrong host name, an untrusted CA and a plain connection are refused.
#   4. the dashboard over HTTPS, its database connection over verify-full:
#      alice and bob log in, each sees only their tenant's queues; alice's
#      forged pause of tenant b's queue is refused and changes nothing; a
#      logged-out client sees nothing; the cookie is Secure, HttpOnly,
#      SameSite=Strict; every connection of the dashboard is TLS.
# The package is removed and the development install put back at the end.
#   flock /tmp/aedb-pg.lock bash scripts/deployment_test.sh   (scripts/test.sh, step 5)
# AEDB_DEPLOYMENT_TEST_PORT (54363) for PostgreSQL, +1 for the dashboard.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$ROOT"

[ "$PG_MAJOR" = 15 ] || { echo "deployment test: Debian's PostgreSQL 15 only" >&2; exit 2; }
WORK=$TEST_DIR/deployment
CLUSTER=$WORK/cluster
CERTS=$WORK/certs
PORT=${AEDB_DEPLOYMENT_TEST_PORT:-54363}
WEB_PORT=$((PORT + 1))
WEB=https://localhost:$WEB_PORT
PACKAGE=postgresql-$PG_MAJOR-aedb-queue
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
fail() { printf '\ndeployment test FAILED: %s\n' "$*" >&2; exit 1; }
status() { dpkg-query -W -f='${db:Status-Status}' "$PACKAGE" 2>/dev/null || true; }
[ "$(status)" != installed ] || fail "$PACKAGE is installed already: dpkg -r $PACKAGE first"

log "1. the doc's files, the package, certificates, a TLS-only cluster, the roles"
python3 - <<'PY' || fail "docs/deployment.md does not show tests/deployment/'s files verbatim"
import pathlib, re, sys
doc = pathlib.Path("docs/deployment.md").read_text()
shown = dict(re.findall(r"<!-- file: (tests/deployment/\S+) -->\n```\w*\n(.*?)```", doc, re.S))
files = {str(p): p.read_text() for p in sorted(pathlib.Path("tests/deployment").iterdir())}
bad = [f for f in files if shown.get(f) != files[f]] + [f for f in shown if f not in files]
if bad:
    print("not shown as they are:", ", ".join(bad), file=sys.stderr)
    sys.exit(1)
print("   docs/deployment.md shows", ", ".join(files))
PY
postgres_dir "$TEST_DIR"
postgres_dir "$WORK"
deb=$(bash scripts/package.sh --debug --out "$WORK/debs" 2>"$WORK/package.log") ||
    { cat "$WORK/package.log" >&2; fail "scripts/package.sh"; }
# Two builds: a target flag (--example) would leave the CLI's binary out.
cargo build -q -p aedb_queue_cli
cargo build -q -p aedb_queue_client --example quickstart
CLI=$TARGET/debug/aedb-queue
WORKER=$TARGET/debug/examples/quickstart

if AEDB_CLUSTER_DIR=$CLUSTER bash scripts/cluster.sh status >/dev/null 2>&1; then
    AEDB_CLUSTER_DIR=$CLUSTER bash scripts/cluster.sh stop >/dev/null
fi
rm -rf "$CLUSTER" "$CERTS"
serve_pid=
cleanup() {
    local rc=0
    [ -z "$serve_pid" ] || kill "$serve_pid" 2>/dev/null || true
    AEDB_CLUSTER_DIR=$CLUSTER bash scripts/cluster.sh stop >/dev/null || rc=1
    if [ "$(status)" = installed ]; then dpkg -r "$PACKAGE" >"$WORK/dpkg.log" 2>&1 || rc=1; fi
    echo "deployment test: putting the development install back (scripts/install.sh)"
    bash scripts/install.sh >"$WORK/install.log" 2>&1 || { cat "$WORK/install.log" >&2; rc=1; }
    return $rc
}
stop_at_exit cleanup

dpkg -i "$deb" >"$WORK/dpkg.log" 2>&1 || { cat "$WORK/dpkg.log" >&2; fail "dpkg -i $deb"; }
mkdir -p "$CERTS" "$WORK/other-ca"
(cd "$CERTS" && bash "$ROOT/tests/deployment/certs.sh" localhost) >"$WORK/certs.log" 2>&1 ||
    { cat "$WORK/certs.log" >&2; fail "tests/deployment/certs.sh"; }
# A second CA, which signed nothing of this server's.
(cd "$WORK/other-ca" && bash "$ROOT/tests/deployment/certs.sh" localhost) >>"$WORK/certs.log" 2>&1

AEDB_CLUSTER_DIR=$CLUSTER AEDB_PORT=$PORT bash scripts/cluster.sh start >/dev/null
DATA=$CLUSTER/data
install -o postgres -g postgres -m 600 "$CERTS/server.crt" "$CERTS/server.key" "$DATA/"
cat tests/deployment/postgresql.conf >>"$DATA/postgresql.conf"
install -o postgres -g postgres -m 600 tests/deployment/pg_hba.conf "$DATA/pg_hba.conf"
AEDB_CLUSTER_DIR=$CLUSTER AEDB_PORT=$PORT bash scripts/cluster.sh restart >/dev/null
su_sql() { as_postgres "$PG_BIN/psql" -h "$CLUSTER" -p "$PORT" -X -q -At -v ON_ERROR_STOP=1 "$@"; }
[ "$(su_sql -d postgres -c 'SHOW ssl')" = on ] || fail "ssl is not on"
su_sql -d postgres -c "CREATE DATABASE app"
paused() { su_sql -d app -c "SELECT paused FROM aedb_queue.queue_overview(queue_name => '$1')"; }
A_APP=a-app-$RANDOM$RANDOM B_APP=b-app-$RANDOM$RANDOM ALICE=alice-$RANDOM$RANDOM DASH=dash-$RANDOM$RANDOM
su_sql -d app -v a_app_password="$A_APP" -v b_app_password="$B_APP" -v alice_password="$ALICE" \
    -v dashboard_password="$DASH" -f tests/deployment/roles.sql >/dev/null
echo "   $(dpkg-query -W -f='${Package} ${Version}' "$PACKAGE") installed; CREATE EXTENSION aedb_queue $(su_sql -d app -c "SELECT extversion FROM pg_extension WHERE extname = 'aedb_queue'"); roles.sql"

# A client's environment over verify-full: as ROLE with PASSWORD, then the command.
tls() { # ROLE PASSWORD command...
    env PGHOST=localhost PGPORT="$PORT" PGDATABASE=app PGUSER="$1" PGPASSWORD="$2" \
        PGSSLMODE=verify-full PGSSLROOTCERT="$CERTS/ca.crt" "${@:3}"
}
plain=$(PGPASSWORD=$ALICE "$PG_BIN/psql" "host=127.0.0.1 port=$PORT dbname=app user=alice sslmode=disable" -c 'SELECT 1' 2>&1) &&
    fail "a connection without TLS was accepted: $plain"
[[ $plain == *"no pg_hba.conf entry"*"no encryption"* ]] || fail "a connection without TLS: $plain"
echo "   a connection without TLS is refused: no pg_hba.conf entry"

log "2. the Rust worker, tenant a's application, over verify-full"
dsn="host=localhost port=$PORT dbname=app user=tenant_a_app password=$A_APP sslmode=verify-full sslrootcert=$CERTS/ca.crt"
out=$(AEDB_QUEUE_DSN=$dsn AEDB_QUEUE_NAME=tenant_a.emails timeout 120 "$WORKER" 2>&1) ||
    fail "the Rust worker: $out"
[[ $out == *"sent 3" ]] || fail "the Rust worker did not send its three emails: $out"
left=$(su_sql -d app -c "SELECT count(*) FROM aedb_queue.task WHERE queue = 'tenant_a.emails'")
[ "$left" = 0 ] || fail "tenant_a.emails: $left tasks not completed (a completed task is not kept by default)"
echo "   the worker enqueued three tasks in one transaction and completed them: $(echo "$out" | tail -1)"

log "3. the CLI over verify-full, from PG* variables"
tls tenant_b_app "$B_APP" "$CLI" enqueue tenant_b.jobs '{"n": 1}' >/dev/null || fail "tenant b's enqueue into tenant_b.jobs"
out=$(tls tenant_b_app "$B_APP" "$CLI" enqueue tenant_a.emails '{"n": 1}' 2>&1) && fail "tenant b enqueued into tenant_a.emails: $out"
[[ $out == *"permission denied"*"tenant_a.emails"* ]] || fail "tenant b's enqueue into tenant_a.emails: $out"
echo "   tenant b's application enqueues into tenant_b.jobs; into tenant_a.emails: $(echo "$out" | head -1)"
tls alice "$ALICE" "$CLI" enqueue tenant_a.reports '{"n": 2}' >/dev/null || fail "alice's enqueue into tenant_a.reports"
queues=$(tls alice "$ALICE" "$CLI" stats --json | python3 -c 'import json,sys; print(" ".join(sorted(q["queue"] for q in json.load(sys.stdin))))') ||
    fail "alice's stats"
[ "$queues" = "tenant_a.emails tenant_a.reports" ] || fail "alice's stats show the queues '$queues'"
out=$(tls alice "$ALICE" "$CLI" pause tenant_b.jobs 2>&1) && fail "alice paused tenant_b.jobs: $out"
echo "   alice: stats show $queues only; pause tenant_b.jobs: $(echo "$out" | head -1)"
out=$(tls alice "$ALICE" "$CLI" pause tenant_b.jobs --create 2>&1) && fail "alice paused tenant_b.jobs with --create: $out"
[[ $out == *42501*"tenant_b.jobs"* ]] || fail "alice's pause tenant_b.jobs --create: $out"
[ "$(paused tenant_b.jobs)" = f ] || fail "tenant_b.jobs was paused"
echo "   alice: pause tenant_b.jobs --create: $(echo "$out" | head -1)"
refused() { # WHAT EXPECTED env-assignments...
    local what=$1 expected=$2 out
    shift 2
    out=$(tls alice "$ALICE" env "$@" "$CLI" stats 2>&1) && fail "$what was accepted: $out"
    [[ ${out,,} == *"$expected"* ]] || fail "$what: '$out' does not say '$expected'"
    echo "   $what is refused: $(echo "$out" | tail -1)"
}
refused "verify-full to 127.0.0.1 (the certificate names localhost)" "127.0.0.1" PGHOST=127.0.0.1
refused "verify-full with another CA's root certificate" "certificate" PGSSLROOTCERT="$WORK/other-ca/ca.crt"
refused "sslmode=disable" "no pg_hba.conf entry" PGSSLMODE=disable

log "4. the dashboard over HTTPS, its connection over verify-full"
ALICE_WEB=alice-web-$RANDOM$RANDOM BOB_WEB=bob-web-$RANDOM$RANDOM
{ printf '%s\n' "$ALICE_WEB" | "$CLI" hash-password alice tenant_a_ops
  printf '%s\n' "$BOB_WEB" | "$CLI" hash-password bob tenant_b_ops; } >"$WORK/users.txt"
PGPASSWORD=$DASH "$CLI" serve \
    --dsn "host=localhost port=$PORT dbname=app user=dashboard sslmode=verify-full sslrootcert=$CERTS/ca.crt" \
    --users "$WORK/users.txt" --listen "127.0.0.1:$WEB_PORT" \
    --tls-cert "$CERTS/server.crt" --tls-key "$CERTS/server.key" >"$WORK/serve.log" 2>&1 &
serve_pid=$!
web() { curl -sS --cacert "$CERTS/ca.crt" --max-time 30 "$@"; }
for _ in $(seq 300); do
    web -o /dev/null "$WEB/healthz" 2>/dev/null && break
    kill -0 "$serve_pid" 2>/dev/null || { cat "$WORK/serve.log" >&2; fail "the dashboard exited"; }
    sleep 0.1
done
web -o /dev/null "$WEB/healthz" || { cat "$WORK/serve.log" >&2; fail "the dashboard does not answer over HTTPS"; }
[ "$(web -o /dev/null -w '%{http_code} %{redirect_url}' "$WEB/")" = "303 $WEB/login" ] ||
    fail "a logged-out client is not sent to the login form"
[ "$(curl -sS -o /dev/null -w '%{http_code}' "http://localhost:$WEB_PORT/login" 2>/dev/null)" != 200 ] ||
    fail "the dashboard answered plain HTTP"
echo "   a logged-out client is sent to /login; plain HTTP gets no page"
login() { # JAR NAME PASSWORD: the status and the session cookie's attributes
    local csrf
    csrf=$(web -c "$1" -b "$1" "$WEB/login" | sed -n 's/.*name="csrf" value="\([^"]*\)".*/\1/p')
    [ -n "$csrf" ] || fail "no CSRF token on the login form"
    web -c "$1" -b "$1" -D "$1.headers" -o /dev/null -w '%{http_code}' \
        --data-urlencode "csrf=$csrf" --data-urlencode "name=$2" --data-urlencode "password=$3" "$WEB/login"
}
queues_of() { web -b "$1" "$WEB/" | grep -o 'data-queue="[^"]*"' | sed 's/data-queue="\(.*\)"/\1/' | sort -u | tr '\n' ' '; }
[ "$(login "$WORK/alice.jar" alice "$ALICE_WEB")" = 303 ] || fail "alice's login"
cookie=$(grep -i '^set-cookie: aedb_queue_session=' "$WORK/alice.jar.headers" | tr -d '\r')
for attribute in Secure HttpOnly SameSite=Strict; do
    [[ ";${cookie// /}" == *";$attribute"* ]] || fail "the session cookie lacks $attribute: $cookie"
done
[ "$(login "$WORK/bob.jar" bob "$BOB_WEB")" = 303 ] || fail "bob's login"
[ "$(login "$WORK/mallory.jar" bob "$ALICE_WEB")" = 401 ] || fail "bob's name with alice's password was not refused"
[ "$(queues_of "$WORK/alice.jar")" = "tenant_a.emails tenant_a.reports " ] || fail "alice sees: $(queues_of "$WORK/alice.jar")"
[ "$(queues_of "$WORK/bob.jar")" = "tenant_b.jobs " ] || fail "bob sees: $(queues_of "$WORK/bob.jar")"
echo "   alice sees $(queues_of "$WORK/alice.jar")and bob $(queues_of "$WORK/bob.jar")(the cookie: Secure, HttpOnly, SameSite=Strict)"
[ "$(web -b "$WORK/alice.jar" -o /dev/null -w '%{http_code}' "$WEB/queues/tenant_b.jobs")" = 404 ] ||
    fail "alice reads tenant_b.jobs' page"
csrf=$(web -b "$WORK/alice.jar" "$WEB/queues/tenant_a.reports" | sed -n 's/.*name="csrf-token" content="\([^"]*\)".*/\1/p')
[ -n "$csrf" ] || fail "no CSRF token on alice's page"
code=$(web -b "$WORK/alice.jar" -o /dev/null -w '%{http_code}' --data-urlencode "csrf=$csrf" "$WEB/queues/tenant_b.jobs/pause")
[ "$code" = 403 ] || fail "alice's forged pause of tenant_b.jobs answered $code"
[ "$(paused tenant_b.jobs)" = f ] || fail "tenant_b.jobs is paused"
code=$(web -b "$WORK/alice.jar" -o /dev/null -w '%{http_code}' --data-urlencode "csrf=$csrf" "$WEB/queues/tenant_a.reports/pause")
[ "$code" = 303 ] && [ "$(paused tenant_a.reports)" = t ] ||
    fail "alice's pause of her own tenant_a.reports: $code"
echo "   alice: tenant_b.jobs' page 404, a forged pause of it 403 and not paused; her own tenant_a.reports paused"
ssl=$(su_sql -d app -c "SELECT count(*) FILTER (WHERE s.ssl), count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) WHERE a.usename = 'dashboard'")
[[ $ssl =~ ^([1-9][0-9]*)\|\1$ ]] || fail "the dashboard's connections over TLS|all: $ssl"
echo "   the dashboard's database connections, over TLS|all: $ssl"
kill "$serve_pid"; wait "$serve_pid" 2>/dev/null || true; serve_pid=
echo "deployment test passed"
