// Reading a whole (small) file: a configuration, a credentials file, a CLI's input.
#pragma once

#include <filesystem>
#include <string>

#include "granary/common/status.h"

namespace granary {

// The file's bytes, or why they could not all be read: a missing file is kNotFound, a
// directory or a read error mid-file an I/O error (never a short or empty success).
Result<std::string> readWholeFile(const std::filesystem::path& path);

}  // namespace granary
