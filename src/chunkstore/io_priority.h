// The I/O priority of the chunk store's background threads (scrubber, spare zeroer).
// Private to the chunkstore library.
#pragma once

#include <linux/ioprio.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace granary::chunkstore {

// The lowest best-effort I/O priority for the calling thread (BFQ weighs it), not the idle
// class: mq-deadline (this machine's scheduler) serves idle-class I/O only when the disk
// has nothing else to do, for up to 10 s (prio_aging_expire), which starved the scrub to
// 2.9 of 50 MB/s under 32 reader threads. Foreground protection comes from the rate
// limiters and the small pieces; CPU priority is left alone for the same reason (at nice 19
// a busy 2-core machine starved the scrub to 7.6 MB/s).
inline void lowerIoPriority() {
  const pid_t tid = static_cast<pid_t>(::syscall(SYS_gettid));
  ::syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, tid, IOPRIO_PRIO_VALUE(IOPRIO_CLASS_BE, 7));
}

}  // namespace granary::chunkstore
