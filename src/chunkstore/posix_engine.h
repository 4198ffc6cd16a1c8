// The POSIX IoEngine (pread/pwrite/fdatasync/fallocate/ftruncate), and the plain syscall helpers
// the io_uring engine shares with it. Private to the chunkstore library.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstdint>
#include <span>
#include <string>

#include "granary/common/status.h"

namespace granary::chunkstore::posix_io {

Result<int> openFile(const std::string& path, int flags, mode_t mode);
Status closeFile(int fd);
// Writes `head` then `tail` as consecutive bytes at `offset`, in one pwritev (resumed
// where a transfer ends short); writeAll is the same with no tail.
Status writeAll(int fd, std::span<const uint8_t> head, std::span<const uint8_t> tail,
                uint64_t offset);
Status writeAll(int fd, std::span<const uint8_t> data, uint64_t offset);
// After a vectored transfer of `bytes`: drops the buffers of iov[first..] it covered and
// the part of the next one, moving `first` past every buffer now empty.
void consumeIovecs(std::span<iovec> iov, size_t& first, size_t bytes);
Status readAll(int fd, std::span<uint8_t> out, uint64_t offset);
// IoEngine::preadNoWait, with preadv2(RWF_NOWAIT).
bool readNoWait(int fd, std::span<const std::span<uint8_t>> parts, uint64_t offset);
Status dataSync(int fd);
Status fullSync(int fd);  // fsync(2)
Status punchHole(int fd, uint64_t offset, uint64_t len);
Status resize(int fd, uint64_t size);
Status renameFile(const std::string& from, const std::string& to);
Status removeFile(const std::string& path);

}  // namespace granary::chunkstore::posix_io
