#!/usr/bin/env python3
"""record_get_bench: reading records over HTTP (docs/benchmarks.md, "Record index").

For each record size it uploads one indexed tar of N records, then reads random records
for --seconds each way, from --threads client threads:
  record     GET /b?record&key=K            (granary_records.RecordClient, one per record)
  batch      POST /b?records-batch, --batch records per request (streamed framing)
  ranged     boto3 get_object(Range=bytes=offset-end) of the container, the offsets
             taken from the index: what a loader does without a record API
and prints records/s, MB/s and each mode's ratio to boto3 ranged GETs.

    python3 bench/record_get_bench.py [--granary build/src/granary] [--sizes 1,16,64]
        [--threads 4] [--seconds 5] [--batch 256]
It starts its own `granary serve` on loopback with a temporary data directory (under
--data-root, default /tmp), or uses --endpoint/--access-key/--secret-key.
"""
import argparse
import io
import os
import random
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time

import boto3
from botocore.config import Config

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients",
                                "python"))
from granary_records import RecordClient  # noqa: E402


def start_server(granary, root):
    data = tempfile.mkdtemp(prefix="record-bench-", dir=root)
    # No scrubbing: its reads would share the disk with the measured ones.
    proc = subprocess.Popen([granary, "serve", "--data", data, "--listen", "127.0.0.1:0",
                             "--scrub-rate", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    banner = {}
    for line in proc.stdout:
        for key, pat in (("endpoint", r"serving S3 at (http://\S+)"),
                         ("access", r"access key:\s+(\S+)"), ("secret", r"secret key:\s+(\S+)")):
            m = re.search(pat, line)
            if m:
                banner[key] = m.group(1)
        if line.startswith("Try:"):
            break
    if len(banner) != 3:
        proc.kill()
        sys.exit("granary serve did not start (no banner)")
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
    return proc, data, banner


def run_for(seconds, threads, fn):
    """Calls fn(rng) from `threads` threads for `seconds`; fn returns (records, bytes)."""
    stop = time.monotonic() + seconds
    totals = [[0, 0] for _ in range(threads)]
    errors = []

    def worker(i):
        rng = random.Random(i)
        try:
            while time.monotonic() < stop:
                n, b = fn(rng)
                totals[i][0] += n
                totals[i][1] += b
        except Exception as e:  # noqa: BLE001: any failure fails the run, not its figure
            errors.append(e)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    elapsed = time.monotonic() - t0
    if errors:
        # A worker that stopped early would only have made the figure lower.
        raise SystemExit(f"{len(errors)} of {threads} workers failed; first: {errors[0]!r}")
    return sum(t[0] for t in totals) / elapsed, sum(t[1] for t in totals) / elapsed / 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--granary", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                      "src", "granary"))
    ap.add_argument("--endpoint")
    ap.add_argument("--access-key")
    ap.add_argument("--secret-key")
    ap.add_argument("--data-root", default="/tmp")
    ap.add_argument("--sizes", default="1,16,64", help="record sizes in KiB")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--batch", type=int, default=256)
    args = ap.parse_args()

    proc = data = None
    if args.endpoint:
        endpoint, access, secret = args.endpoint, args.access_key, args.secret_key
    else:
        proc, data, b = start_server(args.granary, args.data_root)
        endpoint, access, secret = b["endpoint"], b["access"], b["secret"]
    try:
        s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=access,
                          aws_secret_access_key=secret, region_name="us-east-1",
                          config=Config(s3={"addressing_style": "path"},
                                        max_pool_connections=64, retries={"max_attempts": 1}))
        rc = RecordClient(endpoint, access, secret)
        bucket = "record-bench"
        try:
            s3.create_bucket(Bucket=bucket)
        except s3.exceptions.BucketAlreadyOwnedByYou:
            pass
        print(f"record_get_bench: {endpoint}, {args.threads} client threads, "
              f"{args.seconds:g} s per mode, batches of {args.batch}")
        print(f"{'size':>6} {'mode':>8} {'records/s':>10} {'MB/s':>8} {'vs ranged':>9}")
        for kib in [int(s) for s in args.sizes.split(",")]:
            size = kib * 1024
            n = max(1000, min(20000, (64 << 20) // size))
            buf = io.BytesIO()
            rng = random.Random(kib)
            with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
                for i in range(n):
                    info = tarfile.TarInfo(f"s{kib}/{i:07d}.bin")
                    info.size = size
                    tf.addfile(info, io.BytesIO(rng.randbytes(size)))
            container = f"bench-{kib}k.tar"
            hdrs = rc.put_container(bucket, container, buf.getvalue(), index="tar")
            assert int(hdrs["x-granary-record-count"]) == n, hdrs
            rows = list(rc.container_records(bucket, container, page_size=10000))
            keys = [r["key"] for r in rows]

            def single(r):
                body = rc.get_record(bucket, r.choice(keys))
                return 1, len(body)

            def batch(r):
                got = 0
                for header, body in rc.batch_get(bucket, [{"key": k, "container": container}
                                                          for k in r.sample(keys, args.batch)]):
                    assert header["status"] == 200
                    got += len(body)
                return args.batch, got

            def ranged(r):
                row = r.choice(rows)
                rg = f"bytes={row['offset']}-{row['offset'] + row['length'] - 1}"
                body = s3.get_object(Bucket=bucket, Key=container, Range=rg)["Body"].read()
                return 1, len(body)

            results = {}
            for mode, fn in (("ranged", ranged), ("record", single), ("batch", batch)):
                results[mode] = run_for(args.seconds, args.threads, fn)
            for mode in ("ranged", "record", "batch"):
                rps, mbs = results[mode]
                print(f"{kib:>4}Ki {mode:>8} {rps:>10.0f} {mbs:>8.1f} "
                      f"{rps / results['ranged'][0]:>8.2f}x")
            s3.delete_object(Bucket=bucket, Key=container)
    finally:
        if proc:
            proc.terminate()
            proc.wait(timeout=30)
            shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
