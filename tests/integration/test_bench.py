"""granary-bench (bench/granary_bench) against the real `granary serve`: every operation and
a two-class run with separate accounting, the JSON report, cleanup, and, the point of a
verifying load generator, that wrong bytes and wrong credentials are reported, not timed."""
import glob
import json
import os
import subprocess
import time

import pytest

import conftest

BENCH = os.environ.get("GRANARY_BENCH_BIN",
                       os.path.join(conftest.REPO, "build", "bench", "granary-bench"))


@pytest.fixture(scope="module")
def bench_bin():
    if not os.access(BENCH, os.X_OK):
        raise RuntimeError(f"granary-bench not found at {BENCH}; build first")
    return BENCH


def bench_env(server, secret=None):
    """This environment with the server's credentials (and no other AWS_ setting)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["AWS_ACCESS_KEY_ID"] = server.access_key
    env["AWS_SECRET_ACCESS_KEY"] = secret or server.secret_key
    return env


def run_bench(server, tmp_path, *args, secret=None, endpoint=None):
    """Runs granary-bench with the server's credentials; returns (exit code, report JSON or
    None, stdout + stderr)."""
    out = tmp_path / "bench.json"
    if out.exists():
        out.unlink()
    env = bench_env(server, secret)
    res = subprocess.run([BENCH, "--endpoint", endpoint or server.endpoint, "--quiet", "--json", str(out),
                          "--threads", "2", *args],
                         env=env, capture_output=True, text=True, timeout=300)
    report = json.loads(out.read_text()) if out.exists() else None
    return res.returncode, report, res.stdout + res.stderr


def op_figures(report, workload, op):
    w = next(w for w in report["workloads"] if w["name"] == workload)
    return w["ops"][op]


def keys_under(s3, bucket, prefix):
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def test_every_operation_counts_and_cleans_up(server, s3, bench_bin, tmp_path, bucket):
    rc, report, log = run_bench(
        server, tmp_path, "--bucket", bucket, "--run-id", "ops", "--duration", "60s",
        "--workload", "name=puts,op=put,size=100KiB,count=150,concurrency=4",
        "--workload", "name=gets,op=get,size=300KiB,objects=20,count=200,concurrency=4",
        "--workload", "name=ranges,op=range,size=1MiB,range=1KiB-200KiB,objects=5,count=200",
        "--workload", "name=heads,op=head,size=10KiB,objects=10,count=100",
        "--workload", "name=lists,op=list,objects=2500,page=1000,count=9,concurrency=1",
        "--workload", "name=deletes,op=delete,objects=300,concurrency=4")
    assert rc == 0, log
    assert op_figures(report, "puts", "put")["ops"] == 150
    assert op_figures(report, "puts", "put")["bytes"] == 150 * 100 * 1024
    gets = op_figures(report, "gets", "get")
    assert gets["ops"] == 200 and gets["bytes"] == 200 * 300 * 1024 and gets["errors"] == 0
    ranges = op_figures(report, "ranges", "range")
    assert ranges["ops"] == 200
    assert 200 * 1024 <= ranges["bytes"] <= 200 * 200 * 1024
    assert op_figures(report, "heads", "head")["ops"] == 100
    # Nine pages of a 2,500-key prefix: three full passes (1000 + 1000 + 500 keys each).
    lists = op_figures(report, "lists", "list")
    assert lists["ops"] == 9 and lists["keys"] == 7500
    assert lists["keys_per_s"] * next(
        w["seconds"] for w in report["workloads"] if w["name"] == "lists") == pytest.approx(7500)
    # op=delete removes each prepared object once, then stops.
    assert op_figures(report, "deletes", "delete")["ops"] == 300
    for w in report["workloads"]:
        for figures in w["ops"].values():
            lat = figures["latency_ms"]
            assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["p99.9"] <= lat["max"]
            # Each operation's phases add up to its latency: their means add up (to the
            # microsecond rounding of each), and no phase's percentile passes the whole's.
            phases = figures["phases_ms"]
            assert sum(phases[p]["mean"] for p in ("wait", "to_head", "body")) == \
                pytest.approx(lat["mean"], abs=0.01)
            for p in ("wait", "to_head", "body"):
                for q in ("p50", "p99", "max"):
                    assert 0 <= phases[p][q] <= lat[q]
    assert "puts" in log and "p99 ms" in log  # the table
    assert "to head p50/p99" in log  # the phases
    # Everything the run created is gone (and it did create objects under ops/: the same
    # PUT workload with cleanup=no leaves exactly its keys).
    assert keys_under(s3, bucket, "ops/") == []
    rc, _, log = run_bench(server, tmp_path, "--bucket", bucket, "--run-id", "ops",
                           "--duration", "60s",
                           "--workload", "name=puts,op=put,size=1KiB,count=7,cleanup=no")
    assert rc == 0, log
    assert len(keys_under(s3, bucket, "ops/puts/")) == 7


def test_two_classes_are_accounted_apart(server, s3, bench_bin, tmp_path, bucket):
    rc, report, log = run_bench(
        server, tmp_path, "--bucket", bucket, "--run-id", "two", "--duration", "3s",
        "--workload", "name=loader,op=range,size=8MiB,range=64KiB-1MiB,objects=4,concurrency=4",
        "--workload", "name=checkpoint,op=put,size=16MiB,objects=2,concurrency=2")
    assert rc == 0, log
    names = [w["name"] for w in report["workloads"]]
    assert names == ["loader", "checkpoint"]
    assert op_figures(report, "loader", "range")["ops"] > 0
    assert "put" not in report["workloads"][0]["ops"]
    assert op_figures(report, "checkpoint", "put")["ops"] > 0
    assert "range" not in report["workloads"][1]["ops"]
    # objects=2 for PUT: the checkpoint class overwrites two keys, and cleanup removes them.
    assert op_figures(report, "checkpoint", "put")["ops"] > 2  # so keys were overwritten
    assert "prefix=two/checkpoint/" in report["workloads"][1]["spec"]
    assert keys_under(s3, bucket, "two/") == []


def test_each_class_runs_on_threads_of_its_own(server, s3, bench_bin, tmp_path, bucket):
    # Separate clients in use: one class's large bodies must not hold up another's
    # connections in the load generator. Its threads are named after their workload.
    proc = subprocess.Popen(
        [BENCH, "--endpoint", server.endpoint, "--quiet", "--threads", "2", "--bucket", bucket,
         "--run-id", "threads", "--duration", "4s",
         "--workload", "name=reader,op=get,size=4KiB,objects=4,concurrency=2",
         "--workload", "name=writer,op=put,size=1MiB,objects=2,concurrency=2"],
        env=bench_env(server), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = {}
    try:
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            names = []
            for task in glob.glob(f"/proc/{proc.pid}/task/*/comm"):
                try:
                    names.append(open(task).read().strip())
                except OSError:
                    pass  # the thread ended
            seen = {n: names.count(n) for n in ("gb-reader", "gb-writer")}
            if seen == {"gb-reader": 2, "gb-writer": 2}:
                break
            time.sleep(0.05)
    finally:
        out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert seen == {"gb-reader": 2, "gb-writer": 2}, out


def test_a_paced_workload_sends_at_its_rate(server, s3, bench_bin, tmp_path, bucket):
    # 50 operations a second for 2 s: the 100 due before the end, however fast the server
    # is; the closed loop beside it sends as fast as it can.
    rc, report, log = run_bench(
        server, tmp_path, "--bucket", bucket, "--run-id", "paced", "--duration", "2s",
        "--workload", "name=paced,op=get,size=4KiB,objects=4,concurrency=4,rate=50",
        "--workload", "name=flat,op=get,size=4KiB,objects=4,concurrency=4")
    assert rc == 0, log
    paced = op_figures(report, "paced", "get")
    assert 95 <= paced["ops"] <= 100, paced
    assert paced["errors"] == 0
    assert "rate=50" in report["workloads"][0]["spec"]
    assert op_figures(report, "flat", "get")["ops"] > 2 * paced["ops"]
    assert keys_under(s3, bucket, "paced/") == []


def test_a_mix_deletes_only_what_it_put(server, s3, bench_bin, tmp_path, bucket):
    rc, report, log = run_bench(
        server, tmp_path, "--bucket", bucket, "--run-id", "mix", "--duration", "2s",
        "--workload", "name=m,mix=get:40+put:30+delete:20+head:10,size=8KiB,objects=20,"
                      "concurrency=8")
    assert rc == 0, log  # a GET or HEAD of a deleted key would be an error
    ops = report["workloads"][0]["ops"]
    assert all(ops[op]["ops"] > 0 for op in ("get", "put", "delete", "head")), ops
    assert "prefix=mix/m/" in report["workloads"][0]["spec"]
    assert keys_under(s3, bucket, "mix/") == []


def test_wrong_bytes_are_errors(server, s3, bench_bin, tmp_path, bucket):
    rc, report, log = run_bench(
        server, tmp_path, "--bucket", bucket, "--duration", "30s",
        "--workload", "name=seed,op=put,size=64KiB,objects=3,count=3,prefix=v/,cleanup=no")
    assert rc == 0, log
    assert sorted(keys_under(s3, bucket, "v/")) == ["v/obj-00000000", "v/obj-00000001",
                                                    "v/obj-00000002"]
    # The right bytes read back clean from a second run that did not write them...
    rc, report, log = run_bench(
        server, tmp_path, "--bucket", bucket, "--duration", "30s",
        "--workload", "name=check,op=get,size=64KiB,objects=3,count=30,prefix=v/,prepare=skip,"
                      "cleanup=no")
    assert rc == 0, log
    # ...one flipped byte in one object does not.
    body = bytearray(s3.get_object(Bucket=bucket, Key="v/obj-00000001")["Body"].read())
    body[40000] ^= 0xFF
    s3.put_object(Bucket=bucket, Key="v/obj-00000001", Body=bytes(body))
    rc, report, log = run_bench(
        server, tmp_path, "--bucket", bucket, "--duration", "30s",
        "--workload", "name=check,op=get,size=64KiB,objects=3,count=60,prefix=v/,prepare=skip,"
                      "cleanup=no")
    assert rc == 3, log
    gets = op_figures(report, "check", "get")
    assert gets["errors"] > 0 and gets["ops"] > 0 and gets["ops"] + gets["errors"] == 60
    assert "wrong bytes in the chunk at offset 0" in " ".join(report["workloads"][0]["errors"])
    # A short object is an error too.
    s3.put_object(Bucket=bucket, Key="v/obj-00000002", Body=b"short")
    rc, report, log = run_bench(
        server, tmp_path, "--bucket", bucket, "--duration", "30s",
        "--workload", "name=check,op=head,size=64KiB,objects=3,count=30,prefix=v/,prepare=skip,"
                      "cleanup=no")
    assert rc == 3 and "wrong Content-Length" in log, log


def test_refusals_are_clear(server, bench_bin, tmp_path, bucket):
    rc, report, log = run_bench(server, tmp_path, "--bucket", bucket, "--op", "get",
                                "--duration", "1s", secret="not-the-secret")
    assert rc == 1 and report is None
    assert "SignatureDoesNotMatch" in log, log
    rc, _, log = run_bench(server, tmp_path, "--workload", "op=get,size=lots")
    assert rc == 1 and "bad size 'lots'" in log, log
    rc, _, log = run_bench(server, tmp_path, "--bucket", bucket, "--op", "get",
                           "--duration", "1s", endpoint="http://127.0.0.1:1")
    assert rc == 1 and "connect" in log, log
