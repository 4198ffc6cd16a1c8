#!/usr/bin/env python3
# thread_cpu.py PID SECONDS: the CPU share (user + system, % of one CPU) of each thread of
# process PID over SECONDS, and of every other task on the machine above 2%, with its
# niceness, the CPU it last ran on and its name ("process": PID's, "other": the rest).
# Used for docs/benchmarks.md, "Where the paced loader's time goes".
import os, sys, time
pid, secs = sys.argv[1], float(sys.argv[2])
hz = os.sysconf("SC_CLK_TCK")
def snap():
    out = {}
    for p in os.listdir("/proc"):
        if not p.isdigit(): continue
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                s = open(f"/proc/{p}/task/{t}/stat").read()
                name = s[s.index("(")+1:s.rindex(")")]
                f = s[s.rindex(")")+2:].split()
                out[(p, t)] = (name, int(f[11]) + int(f[12]), int(f[16]), int(f[36]))
        except (FileNotFoundError, ProcessLookupError, ValueError):
            pass
    return out
a = snap(); time.sleep(secs); b = snap()
rows = []
for k, (name, ticks, nice, cpu) in b.items():
    d = ticks - a.get(k, (name, ticks))[1]
    share = d / hz / secs * 100
    if k[0] == pid or share > 2:
        rows.append((share, k, name, nice, cpu))
rows.sort(reverse=True)
for share, k, name, nice, cpu in rows[:40]:
    if share < 0.5: continue
    tag = "process" if k[0] == pid else "other"
    print(f"{share:6.1f}%  nice {nice:3d}  cpu {cpu}  {tag:8s} {name}")
