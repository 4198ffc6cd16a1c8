// Directories whose existence survives a power cut.
//
// A new directory's entry lives in its parent: until the parent is fsynced (fdatasync
// promises nothing about entries), a power cut can take the directory, and everything
// synced inside it, away. Every start-up path that creates the directories data is stored
// under goes through createDirectoriesDurably.
#pragma once

#include <filesystem>
#include <functional>

#include "granary/common/status.h"

namespace granary {

// fsync of a file or directory (opened read-only), retried on EINTR.
Status fsyncPath(const std::filesystem::path& path);

// Creates `dir` and its missing ancestors, and fsyncs the parent of each component of the
// path, top down, so that every entry on the way to `dir` is durable once this returns: a
// failed sync of a directory it made is an error; of one that existed, ignored (a crash
// between an earlier mkdir and its sync is mended here, without a read-only ancestor
// stopping the start). `sync_directory` is the fsync, replaceable in tests.
Status createDirectoriesDurably(
    const std::filesystem::path& dir,
    const std::function<Status(const std::filesystem::path&)>& sync_directory = fsyncPath);

}  // namespace granary
