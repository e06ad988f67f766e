#!/usr/bin/env python3
"""Checks docs/grafana/aedb_queue.json.

    python3 docs/grafana/check.py [--dashboard FILE] [--metrics METRICS_TEXT]

Always: the file parses as JSON, panel ids are unique, every panel has a
gridPos and targets, the $queue variable comes from
label_values(aedb_queue_tasks, queue), and every target's expr uses only the
metric names of the agreed interface (KNOWN). With --metrics (the text of a
/metrics scrape, Prometheus exposition format): every metric name the
dashboard uses appears in it. Exits 1 with the problems listed.
Standard library only.
"""

import argparse
import json
import os
import re
import sys

# The agreed /metrics names.
KNOWN = {
    "aedb_queue_tasks",
    "aedb_queue_tasks_estimated",
    "aedb_queue_oldest_ready_age_seconds",
    "aedb_queue_expired_leases",
    "aedb_queue_paused",
    "aedb_queue_up",
    "aedb_queue_counters_up",
    "aedb_queue_scrape_duration_seconds",
    "aedb_queue_enqueued_total",
    "aedb_queue_completed_total",
    "aedb_queue_failed_total",
    "aedb_queue_dead_lettered_total",
    "aedb_queue_reclaimed_total",
    "aedb_queue_cancelled_total",
}

# PromQL words that are not metric names.
KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
    "and", "or", "unless", "offset", "inf", "nan",
}

IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr):
    """The metric names an expression selects."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    s = re.sub(r"\{[^}]*\}", " ", s)  # label matchers
    s = re.sub(r"\[[^\]]*\]", " ", s)  # range / subquery windows
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    s = re.sub(r"\b\d+(\.\d+)?([eE][-+]?\d+)?\b", " ", s)  # numbers
    names = set()
    for m in IDENT.finditer(s):
        word = m.group(0)
        rest = s[m.end():].lstrip()
        if rest.startswith("("):  # a function or aggregation
            continue
        if word.lower() in KEYWORDS:
            continue
        names.add(word)
    return names


def panels_of(dashboard):
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])  # collapsed rows


def check_dashboard(dashboard):
    problems, used = [], set()
    ids = {}
    for panel in panels_of(dashboard):
        pid = panel.get("id")
        title = panel.get("title", "?")
        if pid is None:
            problems.append(f"panel {title!r} has no id")
        elif pid in ids:
            problems.append(f"panel id {pid} is used by {ids[pid]!r} and {title!r}")
        else:
            ids[pid] = title
        if panel.get("type") == "row":
            continue
        if "gridPos" not in panel:
            problems.append(f"panel {title!r} has no gridPos")
        targets = panel.get("targets") or []
        if not targets:
            problems.append(f"panel {title!r} has no targets")
        for target in targets:
            expr = target.get("expr", "")
            if not expr.strip():
                problems.append(f"panel {title!r} target {target.get('refId')} has no expr")
                continue
            names = metric_names(expr)
            if not names:
                problems.append(f"panel {title!r}: {expr!r} selects no metric")
            for name in sorted(names - KNOWN):
                problems.append(f"panel {title!r}: unknown metric {name!r} in {expr!r}")
            used |= names
    variables = {v.get("name"): v for v in dashboard.get("templating", {}).get("list", [])}
    queue = variables.get("queue")
    if queue is None:
        problems.append("no $queue template variable")
    else:
        query = queue.get("query")
        query = query.get("query") if isinstance(query, dict) else query
        if query != "label_values(aedb_queue_tasks, queue)":
            problems.append(f"$queue comes from {query!r}")
    inputs = [i for i in dashboard.get("__inputs", []) if i.get("pluginId") == "prometheus"]
    if not inputs:
        problems.append("no Prometheus datasource input")
    return problems, used


def exposed(metrics_text):
    """Metric names in a /metrics scrape (samples and # TYPE lines)."""
    names = set()
    for line in metrics_text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split()
            if len(parts) >= 3 and parts[1] in ("TYPE", "HELP"):
                names.add(parts[2])
            continue
        m = IDENT.match(line)
        if m:
            names.add(m.group(0))
    return names


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dashboard", default=os.path.join(here, "aedb_queue.json"))
    ap.add_argument("--metrics", help="a /metrics scrape to check the names against")
    args = ap.parse_args()
    try:
        with open(args.dashboard) as f:
            dashboard = json.load(f)
    except (OSError, ValueError) as e:
        print(f"{args.dashboard}: {e}", file=sys.stderr)
        return 1
    problems, used = check_dashboard(dashboard)
    if args.metrics:
        with open(args.metrics) as f:
            have = exposed(f.read())
        for name in sorted(used - have):
            problems.append(f"{args.metrics} has no {name!r}")
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        return 1
    checked = f"; all in {args.metrics}" if args.metrics else ""
    print(f"{args.dashboard}: {len(used)} metric names, all known{checked}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
