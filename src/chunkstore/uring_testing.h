// Test seams of the io_uring engine. Private to the chunkstore library and its tests.
#pragma once

namespace granary::chunkstore::testing {

// The next `n` submissions to any shared ring fail as if the kernel refused them for now
// (io_uring_enter returning -EAGAIN): the entries stay in the ring, to be retried.
void refuseSharedRingEnters(int n);
// How many of those refusals are still to come.
int sharedRingRefusalsLeft();

// The next `n` submissions on the calling threads' own rings (synchronous calls) fail as
// if the kernel refused them for now (io_uring_submit returning -EAGAIN): the entry stays
// in the ring and the call tries again, sleeping between tries after the first few.
void refuseThreadRingSubmits(int n);
// How many of those refusals are still to come.
int threadRingRefusalsLeft();
// The next `n` submissions on the calling threads' own rings fail with an error other than
// a refusal for now (io_uring_submit returning -EINVAL): the call fails, and the thread
// gives its ring up (its entry is still in it) and uses plain syscalls from then on.
void failThreadRingSubmits(int n);
// The next `n` waits for a thread ring's completion fail (io_uring_wait_cqe returning
// -EIO) with the request in flight: the call waits again, until its completion.
void failThreadRingWaits(int n);
int threadRingWaitFailuresLeft();
// Whether the calling thread's own ring is in use (made, and not given up).
bool threadRingInUse();

// The next `n` completions of io_uring requests (the shared ring's and the threads' own
// rings') report -EAGAIN in place of their result, as if the kernel asked for the request
// again: the engine submits it again (every request is positional), up to kMaxAgain (1,000)
// times in a row, then fails it.
void askAgainCompletions(int n);
// How many of those results are still to come.
int againCompletionsLeft();

// The next `n` completions of io_uring requests that transferred more than 4 KiB report
// half of it (whole 4 KiB blocks) as if the transfer came back short: the engine submits
// the rest, at its offset, from the right place in the caller's buffers.
void shortenCompletions(int n);
// How many of those results are still to come.
int shortCompletionsLeft();

}  // namespace granary::chunkstore::testing
