#!/usr/bin/env bash
# Firing precision of the background-worker reaper, target: p99
# lateness of timers and schedule fires <= 1.5 s with 10,000 schedules and
# aedb_queue.reaper_interval = 1s.
#   bench/schedules.sh [seconds per workload]      (default 120)
# Two workloads, each with 10,000 schedules, while timers (delays of 1-5 s)
# are enqueued into a queue nobody claims from:
#   spread: schedule i fires every minute at second i % 60 (167 fires a second)
#   burst:  every schedule fires at second 0 of each minute (10,000 at once)
# Lateness is measured twice for fires: by the task's created_at (the
# reaper's call clock: when the pass that made it began) and by when it
# became visible (an observer counts committed fires every 50 ms; the k-th
# fire time is matched with the first sample that counts k). Timers: their
# promotion time (updated_at) minus their due time.
# Starts its own cluster (port 54342, /var/tmp/aedb_queue_bench_sched)
# preloading aedb_queue; needs the build installed (scripts/install.sh
# --release). Writes bench/results/schedules.md.
set -euo pipefail
source "$(dirname "$0")/../scripts/common.sh"
cd "$ROOT"
secs=${1:-120}
DIR=/var/tmp/aedb_queue_bench_sched
PORT=54342
OUT=bench/results/schedules.md
work=$(mktemp -d)
trap 'rm -rf "$work"; as_postgres "$PG_BIN/pg_ctl" -D "$DIR/data" -m fast stop >/dev/null 2>&1 || true' EXIT

as_postgres "$PG_BIN/pg_ctl" -D "$DIR/data" -m fast stop >/dev/null 2>&1 || true
rm -rf "$DIR"
postgres_dir "$DIR"
as_postgres "$PG_BIN/initdb" -D "$DIR/data" -U postgres --auth=trust >/dev/null
as_postgres "$PG_BIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w start -o \
    "-p $PORT -c listen_addresses=127.0.0.1 -c unix_socket_directories=$DIR \
     -c shared_preload_libraries=aedb_queue -c aedb_queue.reaper_interval=1s \
     -c synchronous_commit=on" >/dev/null
sql() { "$PG_BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -X -q -v ON_ERROR_STOP=1 -d sched "$@"; }
"$PG_BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -X -q -c "CREATE DATABASE sched"
sql -c "CREATE EXTENSION aedb_queue"

# One workload: $1 name, $2 the schedules' pattern as a SQL expression of i.
run() {
    local name=$1 pattern=$2
    sql -c "DELETE FROM aedb_queue.schedule" -c "DELETE FROM aedb_queue.task"
    sql -c "SELECT count(*) FROM generate_series(0, 9999) i,
                LATERAL aedb_queue.queue_schedule_upsert('sched.q' || (i % 100), 's' || i, $pattern,
                    fire_time_key => 'at', missed => 'catch_up', catch_up_limit => 1000)" >/dev/null
    local start end
    start=$(date +%s)
    end=$((start + secs))
    # Timers: 20 a second, due 1-5 s later.
    (while [ "$(date +%s)" -lt "$end" ]; do
        sql -c "SELECT count(*) FROM aedb_queue.queue_enqueue_batch('timers.q',
                    ARRAY(SELECT jsonb_build_object('timer', true) FROM generate_series(1, 20)),
                    delay => ((extract(epoch FROM clock_timestamp())::int % 5) + 1) * interval '1 second')" >/dev/null
        sleep 1
    done) &
    local timers=$!
    # The observer: committed fires, every 50 ms.
    (while [ "$(date +%s)" -lt "$end" ]; do
        sql -At -c "SELECT extract(epoch FROM clock_timestamp()), count(*)
                    FROM aedb_queue.task WHERE queue LIKE 'sched.%'"
        sleep 0.05
    done) >"$work/$name.samples" &
    local observer=$!
    wait "$timers" "$observer"
    sql -c "SELECT aedb_queue.queue_schedule_pause(queue, name) FROM aedb_queue.schedule" >/dev/null
    sql -At -c "SELECT extract(epoch FROM (payload->>'at')::timestamptz),
                       extract(epoch FROM created_at - (payload->>'at')::timestamptz)
                FROM aedb_queue.task WHERE queue LIKE 'sched.%' ORDER BY 1" >"$work/$name.fires"
    sql -At -c "SELECT extract(epoch FROM updated_at - not_before) FROM aedb_queue.task
                WHERE queue = 'timers.q' AND state = 'ready'" >"$work/$name.timers"
    sql -At -c "SELECT count(*) FROM aedb_queue.task WHERE queue = 'timers.q' AND state = 'scheduled'
                AND not_before < now() - interval '2 seconds'" >"$work/$name.overdue"
}

run spread "pg_catalog.format('%s * * * * *', i % 60)"
run burst "'0 * * * * *'"

python3 - "$work" "$secs" "$OUT" <<'PY'
import sys, bisect, datetime, subprocess
work, secs, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float('nan')
rows = []
for name in ("spread", "burst"):
    fires = [tuple(map(float, l.split('|'))) for l in open(f"{work}/{name}.fires") if l.strip()]
    samples = [tuple(map(float, l.split('|'))) for l in open(f"{work}/{name}.samples") if l.strip()]
    counts = [c for _, c in samples]
    visible = []
    for k, (at, _) in enumerate(fires, start=1):
        i = bisect.bisect_left(counts, k)
        if i < len(samples):
            visible.append(samples[i][0] - at)
    by_clock = [late for _, late in fires]
    timers = [float(l) for l in open(f"{work}/{name}.timers") if l.strip()]
    overdue = open(f"{work}/{name}.overdue").read().strip()
    rows.append((name, len(fires), by_clock, visible, timers, overdue))
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
now = datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC")
with open(out, "w") as f:
    f.write(f"# Firing precision of the background-worker reaper\n\n")
    f.write(f"`bash bench/schedules.sh {secs}`, {now}, commit `{commit}`: 10,000 schedules, "
            f"`aedb_queue.reaper_interval = 1s`, {secs} s per workload, timers (20 a second, due "
            f"1-5 s later) in a queue nobody claims from. Target: p99 lateness <= 1.5 s.\n\n")
    f.write("| workload | fires | fire lateness p50 / p99 / max, by created_at (s) | "
            "fire lateness p50 / p99 / max, until visible (s) | timer lateness p50 / p99 / max (s) | "
            "timers overdue > 2 s at the end |\n|---|---|---|---|---|---|\n")
    for name, n, clock, vis, timers, overdue in rows:
        fmt = lambda xs: " / ".join(f"{v:.3f}" for v in (pct(xs, .5), pct(xs, .99), max(xs) if xs else float('nan')))
        f.write(f"| {name} | {n} | {fmt(clock)} | {fmt(vis)} | {fmt(timers)} | {overdue} |\n")
    f.write("\nspread: schedule i fires every minute at second i % 60; burst: all at second 0. "
            "'by created_at' is the reaper pass's clock (when the pass began); 'until visible' is when "
            "an observer polling every 50 ms first counted the fire committed (its resolution adds up "
            "to about 0.1 s).\n")
print(open(out).read())
PY
