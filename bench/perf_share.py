#!/usr/bin/env python3
"""perf_share.py PERF_DATA SYMBOL...: the share of a profile's samples under each SYMBOL.

For each symbol (a substring of a demangled frame, e.g. `BatchBuilder::retire`): the
inclusive share of all samples whose call chain holds it, and the Granary frames that
called its outermost occurrence (the first `granary::` frame above it), each with its
share. Reads `perf script` of a profile recorded with call graphs, such as the one
`bench/perf_get.sh` leaves in bench-data/perf/perf.data (docs/benchmarks.md cites it:
"The RocksDB work of a 4 KiB PUT")."""
import collections
import re
import subprocess
import sys


def frames_of(sample):
    out = []
    for line in sample.splitlines()[1:]:
        parts = line.strip().split(None, 1)
        if len(parts) == 2:
            out.append(re.sub(r"\(.*", "", parts[1]).strip())
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    text = subprocess.run(["perf", "script", "-i", sys.argv[1], "-F", "comm,tid,ip,sym"],
                          capture_output=True, text=True, check=True).stdout
    samples = [frames_of(s) for s in text.split("\n\n") if s.strip()]
    total = len(samples)
    print(f"{total} samples in {sys.argv[1]}")
    for symbol in sys.argv[2:]:
        callers = collections.Counter()
        hits = 0
        for frames in samples:
            at = [i for i, f in enumerate(frames) if symbol in f]
            if not at:
                continue
            hits += 1
            callers[next((f for f in frames[at[-1] + 1:] if "granary::" in f), "?")] += 1
        print(f"{100 * hits / max(total, 1):6.2f}%  {symbol}")
        for caller, n in callers.most_common(5):
            print(f"   {100 * n / max(total, 1):6.2f}%  called from {caller[:100]}")


if __name__ == "__main__":
    main()
