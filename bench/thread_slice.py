#!/usr/bin/env python3
"""thread_slice.py NAME=SLICE_NS... -- COMMAND...: runs COMMAND (exec: same pid) and, 1 s
after it starts, asks the kernel for an EEVDF time slice of SLICE_NS for each of its
threads whose name starts with NAME (or is exactly NAME, written `NAME$`): `sched_setattr`
with `sched_runtime` for SCHED_OTHER (Linux 6.12; 100,000 to 100,000,000 ns). The
experiment of docs/benchmarks.md, "Scheduler slices for the loops or the uploads", run as
a `granary` for bench/compare_builds.sh through a two-line wrapper script."""
import ctypes
import os
import struct
import sys
import time

SYS_SCHED_SETATTR, SYS_SCHED_GETATTR = 314, 315  # x86_64
ATTR = "<IIQiIQQQII"  # struct sched_attr: size, policy, flags, nice, priority, runtime, ...


def set_slice(tid, slice_ns):
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(struct.calcsize(ATTR))
    if libc.syscall(SYS_SCHED_GETATTR, tid, buf, len(buf), 0) != 0:
        return False
    fields = list(struct.unpack(ATTR, buf.raw))
    fields[0], fields[5] = len(buf), slice_ns
    buf = ctypes.create_string_buffer(struct.pack(ATTR, *fields))
    return libc.syscall(SYS_SCHED_SETATTR, tid, buf, 0) == 0


def apply(pid, wanted):
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        for name, slice_ns in wanted:
            exact = name.endswith("$")
            if (comm == name[:-1]) if exact else comm.startswith(name):
                set_slice(int(tid), slice_ns)
                break


def main():
    if "--" not in sys.argv:
        sys.exit(__doc__)
    cut = sys.argv.index("--")
    wanted = [(a.split("=")[0], int(a.split("=")[1])) for a in sys.argv[1:cut]]
    command = sys.argv[cut + 1:]
    pid = os.getpid()
    if os.fork() == 0:
        time.sleep(1)
        apply(pid, wanted)
        os._exit(0)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main()
