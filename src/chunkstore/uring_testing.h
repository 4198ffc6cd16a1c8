// Test seams of the io_uring engine. Private to the chunkstore library and its tests.
#pragma once

namespace granary::chunkstore::testing {

// The next `n` submissions to any shared ring fail as if the kernel refused them for now
// (io_uring_enter returning -EAGAIN): the entries stay in the ring, to be retried.
void refuseSharedRingEnters(int n);
// How many of those refusals are still to come.
int sharedRingRefusalsLeft();

}  // namespace granary::chunkstore::testing
