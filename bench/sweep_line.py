#!/usr/bin/env python3
# sweep_line.py JSON SIZE OP CONNS BUSY STOLEN: one line of bench/s3_bench.sh's concurrency
# sweep, from granary-bench's --json and the CPUs' busy and stolen shares (%) over the
# phase (s3_bench.sh's cpu_share).
import json, sys
path, size, op, conns = sys.argv[1:5]
busy, stolen = map(float, sys.argv[5:7])
o = json.load(open(path))["workloads"][0]["ops"][op]
line = (f"{size:<6} {op:<4} {conns:>6} {o['ops_per_s']:>10.0f} {o['mb_per_s']:>9.1f} "
        f"{o['latency_ms']['p50']:>9.2f} {o['latency_ms']['p99']:>9.2f} {busy:>5.0f}%")
if stolen >= 3:
    line += f" (stolen {stolen:.0f}%)"
if o["errors"]:
    line += f" errors {o['errors']}"
print(line)
