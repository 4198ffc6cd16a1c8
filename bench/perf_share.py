#!/usr/bin/env python3
"""perf_share.py [--callers N] PERF_DATA SYMBOL...: the share of a profile's samples
under each SYMBOL.

For each symbol (a substring of a demangled frame, e.g. `BatchBuilder::retire`): the
inclusive share of all samples whose call chain holds it, and the N (default 5) Granary
frames that most often called its outermost occurrence (the first frame above it whose
name starts with `granary::`), each with its share. Reads `perf script` of a profile
recorded with call graphs, such as the one `bench/perf_get.sh` leaves in
bench-data/perf/perf.data (and prints with this script, `--callers 0`)."""
import collections
import subprocess
import sys


def frames_of(sample):
    """A sample's frames, innermost first: `perf script -F comm,tid,ip,sym` prints a
    header line, then one `ADDRESS SYMBOL` line per frame."""
    out = []
    for line in sample.splitlines()[1:]:
        parts = line.strip().split(None, 1)
        if len(parts) == 2:
            out.append(parts[1])
    return out


def main():
    args = sys.argv[1:]
    callers_shown = 5
    if args[:1] == ["--callers"] and len(args) > 1:
        callers_shown = int(args[1])
        args = args[2:]
    if len(args) < 2:
        sys.exit(__doc__)
    text = subprocess.run(["perf", "script", "-i", args[0], "-F", "comm,tid,ip,sym"],
                          capture_output=True, text=True, check=True).stdout
    samples = [frames_of(s) for s in text.split("\n\n") if s.strip()]
    total = max(len(samples), 1)
    print(f"{len(samples)} samples in {args[0]}")
    for symbol in args[1:]:
        callers = collections.Counter()
        hits = 0
        for frames in samples:
            at = [i for i, f in enumerate(frames) if symbol in f]
            if not at:
                continue
            hits += 1
            above = frames[at[-1] + 1:]
            callers[next((f for f in above if f.startswith("granary::")), "?")] += 1
        print(f"{100 * hits / total:6.2f}%  {symbol}")
        for caller, n in callers.most_common(callers_shown):
            print(f"   {100 * n / total:6.2f}%  called from {caller[:100]}")


if __name__ == "__main__":
    main()
