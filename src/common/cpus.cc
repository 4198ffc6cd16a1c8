#include "granary/common/cpus.h"

#include <sched.h>

#include <algorithm>
#include <thread>

namespace granary {

size_t usableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return static_cast<size_t>(n);
  }
  // More than CPU_SETSIZE (1,024) CPUs, or no affinity call: count those online.
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace granary
