#!/usr/bin/env bash
# The test suite's guard against backend deaths (docs/testing.md, "The guard against backend deaths"): fails when
# a server log shows a process that died by a signal, a PANIC, or a Rust panic
# on a thread of its own, and names each such line.
#   scripts/check_server_log.sh [--sigkill-expected] [--since BYTES] LOG...
# --since BYTES   check only what the next LOG got after its first BYTES bytes
#                 (a log reused across runs: scripts/cluster.sh keeps the mark)
# --sigkill-expected
#                 tolerate deaths by SIGKILL (signal 9), for tests that kill a
#                 backend on purpose; any other signal, PANIC or panic still fails
# Every cluster the tests start is checked with this script when it is torn
# down: the shell scripts through scripts/cluster.sh stop, the Rust harness
# (itests/src/server_log.rs) and the Python client's conftest by calling it.
set -uo pipefail

# One ERE per line: the lines PostgreSQL (and a Rust panic hook) writes when a
# process of the cluster dies. "server process (PID n) was terminated by ...";
# "background worker \"x\" (PID n) was terminated by signal n: ..."; a PANIC
# (which aborts the process); "thread '...' panicked at src/...".
PATTERNS='terminated by signal
server process .* was terminated
PANIC:  
panicked at'
SIGKILL='by signal 9: Killed'

sigkill_ok=
since=0
found=0
checked=0
while [ $# -gt 0 ]; do
    case "$1" in
    --sigkill-expected) sigkill_ok=1; shift; continue ;;
    --since) since=$2; shift 2; continue ;;
    -*) echo "usage: $0 [--sigkill-expected] [--since BYTES] LOG..." >&2; exit 2 ;;
    esac
    log=$1; shift
    if [ ! -f "$log" ]; then
        echo "check_server_log: no server log at $log" >&2
        found=1; since=0; continue
    fi
    # Line numbers count from the top of the file, skipped part included.
    skipped=$(head -c "$since" "$log" | wc -l)
    hits=$(tail -c +"$((since + 1))" "$log" | grep -a -n -E -e "$PATTERNS" |
        { if [ -n "$sigkill_ok" ]; then grep -v -F -e "$SIGKILL"; else cat; fi; } |
        awk -F: -v off="$skipped" -v file="$log" '{ n = $1 + off; sub(/^[0-9]+:/, ""); print file ":" n ": " $0 }')
    if [ -n "$hits" ]; then
        echo "check_server_log: a process of the cluster died (scripts/check_server_log.sh):" >&2
        printf '%s\n' "$hits" | head -20 >&2
        found=1
    fi
    checked=$((checked + 1)); since=0
done
[ "$checked" -gt 0 ] || [ "$found" -ne 0 ] || { echo "usage: $0 [--sigkill-expected] [--since BYTES] LOG..." >&2; exit 2; }
exit $found
