#!/usr/bin/env python3
# wait_stacks.py PID SECONDS [INTERVAL_MS]: where the threads of process PID wait in the
# kernel. Samples every thread's state and kernel stack (/proc/PID/task/*/stack, needs
# root) every INTERVAL_MS (default 10) for SECONDS, then prints the most frequent
# (thread name, state, innermost six frames), leaving out threads idle in their usual
# waits (futex, epoll, io_uring completion waits, idle io-wq workers). A poor man's
# off-CPU profile: "threads" is a row's samples over the number of sampling rounds, the
# average number of threads found there at once. Used for docs/benchmarks.md ("Where a
# 1 MiB PUT waits").
import collections, os, sys, time

pid, secs = sys.argv[1], float(sys.argv[2])
interval = float(sys.argv[3]) / 1000 if len(sys.argv) > 3 else 0.01
idle = ("futex_do_wait", "do_epoll_wait", "io_cqring_wait", "do_sigtimedwait")
rows, samples = collections.Counter(), 0
end = time.monotonic() + secs
while time.monotonic() < end:
    samples += 1
    for tid in os.listdir(f"/proc/{pid}/task"):
        base = f"/proc/{pid}/task/{tid}"
        try:
            name = open(f"{base}/comm").read().strip().rstrip("0123456789-")
            state = open(f"{base}/stat").read().rsplit(")", 1)[1].split()[0]
            stack = open(f"{base}/stack").read().splitlines()
        except OSError:
            continue  # the thread ended
        frames = [line.split(" ", 1)[1].split("+")[0] for line in stack if " " in line]
        if state == "S" and (not frames or frames[0].startswith(idle) or
                             (name == "iou-wrk" and frames[0] == "io_wq_worker")):
            continue
        rows[(name, state, " < ".join(frames[:6]))] += 1
    time.sleep(interval)
print(f"{samples} samples of every thread of {pid} over {secs:g} s")
print(f"{'samples':>8} {'threads':>7}  thread state  stack (innermost first)")
for (name, state, stack), n in rows.most_common(25):
    print(f"{n:>8} {n / samples:>7.2f}  {name} {state}  {stack or '(user space)'}")
