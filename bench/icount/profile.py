#!/usr/bin/env python3
"""Per-call inclusive Ir of every function in the measured part of two
callgrind runs (bench/icount.sh --keep), side by side.

    profile.py [--n 50] [--top 80] A.2 A.3 [B.2 B.3]

A.2 is the part holding calls N+1..2N plus one marker statement, A.3 the
marker statement alone (see icount.py); per-call figures are
(Ir(A.2) - Ir(A.3)) / N per function, from `callgrind_annotate
--inclusive=yes`. With B (the baseline), prints both and the difference.
"""

import argparse
import re
import subprocess

LINE = re.compile(r"^\s*([\d,]+) \([ \d.]+%\)\s+(.*)$")


def inclusive(path):
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", path],
                         capture_output=True, text=True, check=True).stdout
    costs = {}
    started = False
    for line in out.splitlines():
        if "file:function" in line:
            started = True
            continue
        m = LINE.match(line) if started else None
        if not m:
            continue
        name = m.group(2)
        # Strip the object file; keep "file:function" (recursion marks too).
        name = re.sub(r" \[[^\]]*\]$", "", name)
        costs[name] = costs.get(name, 0) + int(m.group(1).replace(",", ""))
    return costs


def per_call(part, marker, n):
    a, m = inclusive(part), inclusive(marker)
    return {k: (v - m.get(k, 0)) / n for k, v in a.items()}


def short(name):
    name = name.replace("???:", "")
    name = re.sub(r"^/root/\.cargo/registry/src/[^/]+/", "", name)
    name = re.sub(r"^/work/[^/]+/", "", name)
    return name[:150]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--top", type=int, default=80)
    ap.add_argument("--grep", default=None, help="only functions matching this regex")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    a = per_call(args.files[0], args.files[1], args.n)
    b = per_call(args.files[2], args.files[3], args.n) if len(args.files) == 4 else None
    names = sorted(a, key=lambda k: -a[k])
    if args.grep:
        names = [k for k in names if re.search(args.grep, k)]
    if b is None:
        print(f"{'Ir/call':>10}  function")
        for k in names[: args.top]:
            print(f"{a[k]:>10,.0f}  {short(k)}")
        return
    print(f"{'A Ir/call':>10} {'B Ir/call':>10} {'A - B':>10}  function")
    for k in names[: args.top]:
        print(f"{a[k]:>10,.0f} {b.get(k, 0):>10,.0f} {a[k] - b.get(k, 0):>10,.0f}  {short(k)}")


if __name__ == "__main__":
    main()
