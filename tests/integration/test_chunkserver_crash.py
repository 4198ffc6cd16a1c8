"""kill -9 a `granary chunkserver` under write load, restart it on the same drives, and check
with granary_chunk_load (tests/tools/chunk_load.cc) that no acknowledged blob is lost or
damaged and that nothing appears that was never written. The rounds accumulate on the same
drives, so later crashes and restarts (orphan reclamation) must also keep earlier blobs."""
import os
import random
import re
import signal
import subprocess
import time

from conftest import ChunkServer

SECRET = "crash-test-secret"
ROUNDS = int(os.environ.get("GRANARY_CRASH_ROUNDS", "20"))
DRIVES = "d0,d1"


def test_kill_9_under_load_loses_no_acknowledged_blob(granary_bin, chunk_load_bin, tmp_path,
                                                      capsys):
    seed = int(os.environ.get("GRANARY_CRASH_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    env = dict(os.environ, GRANARY_CLUSTER_SECRET=SECRET)
    # 4 MiB extents, pre-zeroed as fast as the disk allows: the rounds roll many extents,
    # and most of them start as spares renamed into place, so kill -9 also lands while a
    # spare is zeroed, renamed or half used.
    srv = ChunkServer([str(tmp_path / "d0"), str(tmp_path / "d1")], secret=SECRET,
                      extra_args=["--extent-size", "4", "--spare-zero-rate", "2000"],
                      log_path=str(tmp_path / "chunkserver.log")).start()
    started = time.monotonic()
    logs, report = [], []
    totals = {"acked": 0, "unacked_present": 0, "spares": 0}
    try:
        for rnd in range(ROUNDS):
            log = str(tmp_path / f"load-{rnd}.log")
            with open(log, "wb") as out, open(log + ".err", "wb") as err:
                loader = subprocess.Popen(
                    [chunk_load_bin, "load", "--endpoint", srv.address, "--drives", DRIVES,
                     "--threads", "4", "--max-size", "32768"],
                    stdout=out, stderr=err, env=env)
                delay = rng.uniform(0.2, 1.5)
                time.sleep(delay)
                srv.kill()  # SIGKILL, mid-write
                loader.send_signal(signal.SIGTERM)
                assert loader.wait(30) == 0
            srv.restart()

            last = rnd == ROUNDS - 1
            args = [chunk_load_bin, "verify", "--endpoint", srv.address, "--drives", DRIVES]
            for old in logs:  # earlier rounds: listing checks; all bytes again at the end
                args += ["--read-log" if last else "--log", old]
            args += ["--read-log", log]
            res = subprocess.run(args, env=env, capture_output=True, text=True, timeout=150)
            assert res.returncode == 0, f"round {rnd} (seed {seed}): {res.stdout}{res.stderr}"
            logs.append(log)

            with open(log) as f:
                text = f.read()
            acked = len(re.findall(r"^ack ", text, re.M))
            attempted = len(re.findall(r"^attempt ", text, re.M))
            m = re.search(r"unacked_present=(\d+)", res.stdout)
            totals["acked"] += acked
            report.append(f"round {rnd:2d}: kill after {delay:.2f}s, {attempted} attempted, "
                          f"{acked} acked; {res.stdout.strip()}")
            assert acked > 0, f"round {rnd}: the load never got an ack ({log}.err)"
        totals["unacked_present"] = int(m.group(1))
        with open(tmp_path / "chunkserver.log") as f:
            totals["spares"] = f.read().count("spare extent ready")
        assert totals["spares"] >= 2, "no pre-zeroed spare extents were prepared under the load"
    finally:
        srv.stop()
        with capsys.disabled():
            print()
            print("\n".join(report))
            print(f"chunkserver crash test: {len(report)} rounds, {totals['acked']} acked blobs "
                  f"verified, {totals['unacked_present']} unacked blobs present (allowed), "
                  f"{totals['spares']} spare extents prepared, "
                  f"{time.monotonic() - started:.1f}s, seed {seed}")
