#!/usr/bin/env python3
# sweep_line.py JSON SIZE OP CONNS BUSY0 TOTAL0 STOLEN0 BUSY1 TOTAL1 STOLEN1: one line of
# bench/s3_bench.sh's concurrency sweep, from granary-bench's --json and /proc/stat ticks
# taken before and after the phase.
import json, sys
path, size, op, conns = sys.argv[1:5]
b0, t0, s0, b1, t1, s1 = map(int, sys.argv[5:11])
o = json.load(open(path))["workloads"][0]["ops"][op]
busy, stolen = 100 * (b1 - b0) / (t1 - t0), 100 * (s1 - s0) / (t1 - t0)
line = (f"{size:<6} {op:<4} {conns:>6} {o['ops_per_s']:>10.0f} {o['mb_per_s']:>9.1f} "
        f"{o['latency_ms']['p50']:>9.2f} {o['latency_ms']['p99']:>9.2f} {busy:>5.0f}%")
if stolen >= 3:
    line += f" (stolen {stolen:.0f}%)"
if o["errors"]:
    line += f" errors {o['errors']}"
print(line)
