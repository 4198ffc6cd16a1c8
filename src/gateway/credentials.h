// Access keys known to this gateway: the root user (from the environment, or generated on
// first start and kept in the data directory) and the named users of the index's `users`
// table, which the gateway reloads periodically and after each admin change
// (refreshUsers in admin.cc), so every gateway learns of users added through any other.
// Thread safety: the root user is set before serving and immutable after; the named users
// may be replaced while find() runs on any thread.
#pragma once

#include <map>
#include <optional>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "granary/common/log.h"
#include "granary/index_kv/index.h"
#include "sigv4.h"

namespace granary::gateway {

struct UserCredentials {
  // The identity that owns buckets: a named user's name, the root user's access key.
  std::string name;
  std::string access_key;
  std::string secret_key;
  bool is_root = false;
};

class CredentialStore {
 public:
  void setRoot(std::string access_key, std::string secret_key) {
    // Keyed by the secret: a guessable access key ("admin") must not be found from it.
    root_owner_id_ =
        hmacSha256Hex(deriveSigningKey(secret_key, "owner-id", "granary", "s3"), access_key);
    root_ = {access_key, std::move(access_key), std::move(secret_key), /*is_root=*/true};
  }
  const UserCredentials& root() const { return root_; }

  // The ID answers show for the identity `owner` (ListBuckets, listings, uploads, ACLs): a
  // named user's name; for the root user, 64 hex digits of an HMAC of its access key keyed
  // by its secret. S3 shows a 64-hex canonical user ID, never an access key, and anyone may
  // list a public-read bucket: the root's access key must not be what they read.
  std::string ownerId(std::string_view owner) const {
    if (!root_.access_key.empty() && owner == root_.access_key) return root_owner_id_;
    return std::string(owner);
  }

  // Reads the users with `list` and installs them, one reload at a time: two reloads (the
  // periodic one and an admin change's) overlapping must not let the older list land
  // last, bringing back a user just removed.
  template <typename List>
  Status reloadUsers(List&& list) {
    std::lock_guard serial(reload_mu_);
    auto users = list();
    if (!users) return users.error();
    setUsers(*users);
    return Status::ok();
  }

  void setUsers(const std::vector<index_kv::UserInfo>& users) {
    std::map<std::string, UserCredentials, std::less<>> next;
    for (const auto& u : users) {
      // The root user's identity (it owns buckets under it) is its access key: a named
      // user called that (or its owner ID), or holding that key, would own the root's
      // buckets (or pass for their owner). Such a user
      // can only come from a root key changed after it was added: it is left out.
      if (!root_.access_key.empty() && (u.name == root_.access_key || u.name == root_owner_id_ ||
                                        u.access_key == root_.access_key)) {
        log::warn("user {} is left out: its name or access key is the root user's", u.name);
        continue;
      }
      next[u.access_key] = {u.name, u.access_key, u.secret_key, /*is_root=*/false};
    }
    std::unique_lock lock(mu_);
    users_.swap(next);
  }

  // Drops user `name` now (its removal from the index was committed, and the reload that
  // would show it failed): its key must not keep working until the next reload.
  void forget(std::string_view name) {
    std::lock_guard serial(reload_mu_);
    std::unique_lock lock(mu_);
    std::erase_if(users_, [&](const auto& entry) { return entry.second.name == name; });
  }

  std::optional<UserCredentials> find(std::string_view access_key) const {
    if (!root_.access_key.empty() && access_key == root_.access_key) return root_;
    std::shared_lock lock(mu_);
    auto it = users_.find(access_key);
    if (it == users_.end()) return std::nullopt;
    return it->second;
  }

 private:
  UserCredentials root_;
  std::string root_owner_id_;  // ownerId() of the root user
  std::mutex reload_mu_;
  mutable std::shared_mutex mu_;
  std::map<std::string, UserCredentials, std::less<>> users_;
};

}  // namespace granary::gateway
