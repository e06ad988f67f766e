#!/usr/bin/env bash
# The dashboard's real-browser tests: `aedb-queue serve` driven in Debian's
# headless chromium by playwright-core, against throw-away clusters.
#   bash clients/cli/browser/run.sh            (as root; scripts/setup.sh installs chromium, nodejs, npm;
#                                               the extension must be installed: scripts/install.sh)
# Environment:
#   AEDB_QUEUE_BIN=PATH    the aedb-queue binary to serve with (default: cargo build -p aedb_queue_cli)
#   AEDB_SCREENSHOTS=DIR   also save full-page PNGs of the overview, a queue and a task page to DIR
#                          (after a short burst of traffic, so the charts have something to show)
#   AEDB_BROWSER_DIR=DIR   work directory (default /var/tmp/aedb_browser; wiped at each run)
#   AEDB_BROWSER_TESTS=... node --test arguments (default: every tests/*.test.mjs)
#   AEDB_BROWSER_MUTANTS=1 then check that the tests can fail (mutants.mjs: a proxy breaks one thing at a time)
#   AEDB_BROWSER_HOLD=SECONDS  keep clusters and servers up that long after the tests (to look by hand)
# Operators (85-identities): a users file made with `aedb-queue hash-password`, a
# self-signed certificate made with openssl for the HTTPS server.
# Clusters: 127.0.0.1:54346 (aedb_queue preloaded: counters) and 127.0.0.1:54347
# (not preloaded: "counters unavailable"). Both, and every server, stop on exit.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../../../scripts/common.sh"
cd "$ROOT"

WORK=${AEDB_BROWSER_DIR:-/var/tmp/aedb_browser}
PORT=54346
PLAIN_PORT=54347
DB=aedb_browser
DEADLINE=$((SECONDS + ${AEDB_BROWSER_TIMEOUT:-900}))   # the whole run, bounded

for tool in node npm /usr/bin/chromium psql openssl; do
    command -v "$tool" >/dev/null || { echo "run.sh: $tool not found (bash scripts/setup.sh installs it)" >&2; exit 1; }
done
if [ ! -f "$("$PG_CONFIG" --sharedir)/extension/aedb_queue.control" ]; then
    echo "run.sh: the extension is not installed (bash scripts/install.sh)" >&2; exit 1
fi

# node_modules from package-lock.json: npm ci when missing or older than the lock.
stamp="$HERE/node_modules/.lock-sha256"
want=$(sha256sum "$HERE/package-lock.json" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    log "npm ci (playwright-core; no browser download: Debian's chromium is used)"
    (cd "$HERE" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 timeout 300 npm ci --no-audit --no-fund --loglevel=error)
    echo "$want" >"$stamp"
fi

if [ -z "${AEDB_QUEUE_BIN:-}" ]; then
    log "cargo build -p aedb_queue_cli"
    cargo build -q -p aedb_queue_cli --bin aedb-queue
    target=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
    AEDB_QUEUE_BIN=$target/debug/aedb-queue
fi
[ -x "$AEDB_QUEUE_BIN" ] || { echo "run.sh: no binary at $AEDB_QUEUE_BIN" >&2; exit 1; }

# Fails when a server log shows a process that died (scripts/cluster.sh stop).
stop_clusters() {
    local d status=0
    for d in "$WORK/preload" "$WORK/plain"; do
        if [ -f "$d/data/postmaster.pid" ]; then
            AEDB_CLUSTER_DIR=$d bash "$ROOT/scripts/cluster.sh" stop >/dev/null || status=1
        fi
    done
    return $status
}
pids=()
cleanup() {
    local rc=$?
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    stop_clusters || rc=1
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Fresh clusters every run: stop what an earlier run left, wipe, start.
stop_clusters 2>/dev/null || true
rm -rf "$WORK/preload" "$WORK/plain" "$WORK"/*.log "$WORK"/*.json "$WORK"/*.txt
postgres_dir "$WORK"
log "clusters: preloaded on $PORT, plain on $PLAIN_PORT"
AEDB_PRELOAD=aedb_queue AEDB_CLUSTER_DIR="$WORK/preload" AEDB_PORT=$PORT bash scripts/cluster.sh start
AEDB_CLUSTER_DIR="$WORK/plain" AEDB_PORT=$PLAIN_PORT bash scripts/cluster.sh start

psql_as() { # psql_as PORT USER ARGS...
    local port=$1 user=$2; shift 2
    psql -X -q -h 127.0.0.1 -p "$port" -U "$user" -v ON_ERROR_STOP=1 "$@"
}
psql_as $PLAIN_PORT postgres -d postgres -c "CREATE DATABASE $DB"

log "seed (as dash_admin, dash_reader; tasks in every state)"
bash "$HERE/seed.sh" $PORT $DB "$WORK/seed.json"
cat "$WORK/seed.json"
psql_as $PLAIN_PORT postgres -d $DB -At <<'SQL'
CREATE EXTENSION aedb_queue;
CREATE ROLE dash_admin LOGIN;
GRANT aedb_queue_admin TO dash_admin;
SET ROLE dash_admin;
SELECT count(*) AS n FROM aedb_queue.queue_enqueue('plain', '{"n": 1}') \gset
SQL

# One server per role; each prints "listening on http://ADDR" once bound.
serve_opts=(--sample-every 1)
help=$("$AEDB_QUEUE_BIN" serve --help 2>/dev/null || true)
if grep -q -- '--refresh' <<<"$help"; then
    serve_opts+=(--refresh 0)   # no reload of the overview under a test's feet
fi
if grep -q -- '--max-age' <<<"$help"; then
    serve_opts+=(--max-age 0)   # figures read per request: the tests change the data behind the servers
fi
if [ -n "${AEDB_BROWSER_MUTANTS:-}" ] && grep -q -- '--allowed-host' <<<"$help"; then
    # mutants.mjs's proxies pass their own Host (127.0.0.1:THEIR_PORT) through,
    # as a reverse proxy would; their ports are picked later, so any port.
    serve_opts+=(--allowed-host 127.0.0.1)
fi
if grep -q -- '--no-login' <<<"$help"; then
    login_opts=(--no-login)   # the servers of one role each: no login
fi
start_server() { # start_server NAME PORT USER [SERVE ARGS] -> sets URL (without them: --no-login)
    local name=$1 port=$2 user=$3 log="$WORK/serve-$1.log"
    shift 3
    (($#)) || set -- "${login_opts[@]}"
    "$AEDB_QUEUE_BIN" serve --listen 127.0.0.1:0 "${serve_opts[@]}" "$@" \
        --dsn "host=127.0.0.1 port=$port dbname=$DB user=$user" >"$log" 2>&1 &
    pids+=($!)
    local pid=$! i
    URL=
    for i in $(seq 1 300); do
        URL=$(grep -o 'listening on https\?://[0-9.:]*' "$log" | head -1 | sed 's/^listening on //' || true)
        [ -n "$URL" ] && break
        kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; echo "run.sh: the $name server exited" >&2; exit 1; }
        sleep 0.1
    done
    [ -n "$URL" ] || { cat "$log" >&2; echo "run.sh: the $name server did not say where it listens" >&2; exit 1; }
    echo "$name ($user): $URL"
}
log "servers"
start_server admin $PORT dash_admin; AEDB_ADMIN_URL=$URL
start_server reader $PORT dash_reader; AEDB_READER_URL=$URL
start_server tenant $PORT dash_tenant; AEDB_TENANT_URL=$URL
start_server plain $PLAIN_PORT dash_admin; AEDB_PLAIN_URL=$URL
if [ -n "${login_opts[*]:-}" ]; then
    log "servers with operators (users file, proxy header, HTTPS)"
    users=$WORK/users.txt
    { echo "# the browser tests' operators"
      printf 'alice-pw\n' | "$AEDB_QUEUE_BIN" hash-password alice ops_a
      printf 'bob-pw\n' | "$AEDB_QUEUE_BIN" hash-password bob ops_b
      echo "sso_a ops_a -"; } >"$users"
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=127.0.0.1 \
        -addext subjectAltName=IP:127.0.0.1 -keyout "$WORK/tls.key" -out "$WORK/tls.crt" 2>/dev/null
    header=(--trust-user-header X-Forwarded-User)
    # ops trusts the header only from 127.0.0.2 (the browser comes from 127.0.0.1).
    start_server ops $PORT dash_gateway --users "$users" "${header[@]}" --trusted-proxy 127.0.0.2; AEDB_OPS_URL=$URL
    start_server sso $PORT dash_gateway --users "$users" "${header[@]}" --trusted-proxy 127.0.0.1; AEDB_SSO_URL=$URL
    start_server tls $PORT dash_gateway --users "$users" --tls-cert "$WORK/tls.crt" --tls-key "$WORK/tls.key"; AEDB_TLS_URL=$URL
    export AEDB_OPS_URL AEDB_SSO_URL AEDB_TLS_URL
fi

if [ -n "${AEDB_SCREENSHOTS:-}" ]; then
    mkdir -p "$AEDB_SCREENSHOTS"
    AEDB_SCREENSHOTS=$(cd "$AEDB_SCREENSHOTS" && pwd)
    log "traffic for the charts (25 s)"
    PGPORT=$PORT bash "$HERE/traffic.sh" 25
fi

export AEDB_ADMIN_URL AEDB_READER_URL AEDB_TENANT_URL AEDB_PLAIN_URL AEDB_SCREENSHOTS AEDB_QUEUE_BIN
export AEDB_SEED="$WORK/seed.json" PGHOST=127.0.0.1 PGPORT=$PORT PGUSER=postgres PGDATABASE=$DB
export AEDB_PLAIN_PGPORT=$PLAIN_PORT
log "node --test (chromium $(/usr/bin/chromium --version 2>/dev/null | grep -o '[0-9][0-9.]*' | head -1))"
left=$((DEADLINE - SECONDS)); ((left > 60)) || left=60
cd "$HERE"
# shellcheck disable=SC2086
timeout "$left" node --test --test-concurrency=1 --test-timeout=120000 ${AEDB_BROWSER_TESTS:-tests/*.test.mjs}

log "one /metrics scrape of the admin server against docs/grafana"
cd "$ROOT"
curl -fsS --max-time 10 "$AEDB_ADMIN_URL/metrics" >"$WORK/metrics.txt"
python3 docs/grafana/check.py --metrics "$WORK/metrics.txt"

if [ -n "${AEDB_BROWSER_MUTANTS:-}" ]; then
    log "mutants: each breaks the servers' answers one way; the tests must notice"
    cd "$HERE"
    AEDB_RESEED="bash $HERE/seed.sh $PORT $DB $WORK/seed.json" timeout 1200 node mutants.mjs
    cd "$ROOT"
fi

if [ -n "${AEDB_BROWSER_HOLD:-}" ]; then
    echo "holding for ${AEDB_BROWSER_HOLD} s: admin $AEDB_ADMIN_URL reader $AEDB_READER_URL tenant $AEDB_TENANT_URL plain $AEDB_PLAIN_URL"
    sleep "$AEDB_BROWSER_HOLD"
fi
