// The CPUs this process may run on.
#pragma once

#include <cstddef>

namespace granary {

// How many CPUs the calling thread may run on: its affinity mask (taskset, `docker run
// --cpuset-cpus`, a cgroup cpuset), where std::thread::hardware_concurrency() counts every
// CPU online. At least 1. Thread pools and event loops are sized by it, so that a server
// pinned to 4 of 64 cores runs 4 event loops, not 64. (A CFS quota such as `docker run
// --cpus=2` is not an affinity and is not counted: pass --event-loops for that.)
size_t usableCores();

}  // namespace granary
