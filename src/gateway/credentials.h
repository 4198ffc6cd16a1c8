// Access keys known to this gateway. In this step: the root user only (from the
// environment, or generated on first start and kept in the data directory).
// Thread safety: immutable after construction.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace granary::gateway {

struct UserCredentials {
  std::string access_key;
  std::string secret_key;
  bool is_root = false;
};

class CredentialStore {
 public:
  void add(UserCredentials user) { users_[user.access_key] = std::move(user); }
  std::optional<UserCredentials> find(std::string_view access_key) const {
    auto it = users_.find(access_key);
    if (it == users_.end()) return std::nullopt;
    return it->second;
  }

 private:
  std::map<std::string, UserCredentials, std::less<>> users_;
};

}  // namespace granary::gateway
