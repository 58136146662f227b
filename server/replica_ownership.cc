#include "server/replica_ownership.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kvlearn {

absl::StatusOr<std::string> AdvertisedAddress(const std::string& advertise, int bound_port) {
  if (advertise.empty()) {
    return absl::InvalidArgumentError("--advertise HOST:PORT is required with --replica-group");
  }
  // The port follows the last ':' unless the host is a bracketed IPv6 one.
  const size_t colon = advertise.rfind(':');
  const bool has_port =
      colon != std::string::npos && advertise.find(']', colon) == std::string::npos;
  const std::string host = has_port ? advertise.substr(0, colon) : advertise;
  const std::string port = has_port ? advertise.substr(colon + 1) : "0";
  if (host.empty() || port.empty() ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return absl::InvalidArgumentError(
        absl::StrCat("--advertise '", advertise, "': HOST:PORT, or HOST for the bound port"));
  }
  return port == "0" ? absl::StrCat(host, ":", bound_port) : advertise;
}

std::string ReplicaNameOf(std::string_view address) {
  std::string name(address);
  for (char& c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) c = '-';
  }
  return name;
}

void ReplicaOwnership::Attach(std::unique_ptr<ReplicaGroup> group) {
  owned_group_ = std::move(group);
  group_.store(owned_group_.get(), std::memory_order_release);
}

void ReplicaOwnership::Leave() {
  if (ReplicaGroup* g = group(); g != nullptr) g->Leave();
}

bool ReplicaOwnership::Owns(std::string_view node) const {
  const ReplicaGroup* g = group();
  return g != nullptr && g->OwnerOf(node).name == g->name();
}

ReplicaOwnership::Route ReplicaOwnership::RouteOf(std::string_view node) const {
  const ReplicaGroup* g = group();
  if (g == nullptr) return {Route::kJoining, {}};
  ReplicaMember owner = g->OwnerOf(node);
  // No member read back yet (NATS lost since the join): serve what is here.
  if (owner.name.empty()) return {};
  if (owner.name != g->name()) return {Route::kRedirect, std::move(owner)};
  absl::MutexLock lock(&mu_);
  const auto it = nodes_.find(std::string(node));
  if (it != nodes_.end() && !it->second) return {Route::kRebuilding, {}};
  return {};
}

absl::Status ReplicaOwnership::CallStatus(const Route& route, std::string_view node_view) const {
  const std::string node(node_view);
  switch (route.kind) {
    case Route::kServe:
      return absl::OkStatus();
    case Route::kJoining:
      return absl::UnavailableError("this replica is still joining its group; try again");
    case Route::kRebuilding:
      return absl::UnavailableError(
          absl::StrCat("node '", node,
                       "' just moved to this replica, which is rebuilding its pools from the "
                       "stream; try again"));
    case Route::kRedirect:
      return absl::FailedPreconditionError(
          absl::StrCat("node '", node, "' is owned by replica ", route.owner.name, " at ",
                       route.owner.address, " (trailing metadata ", kOwnerMetadataKey, ")"));
  }
  return absl::OkStatus();
}

void ReplicaOwnership::NoteKnown(std::string_view node) {
  absl::MutexLock lock(&mu_);
  nodes_.try_emplace(std::string(node), false);
}

void ReplicaOwnership::MarkFollowed(std::string_view node) {
  absl::MutexLock lock(&mu_);
  nodes_[std::string(node)] = true;
}

bool ReplicaOwnership::Followed(std::string_view node) const {
  absl::MutexLock lock(&mu_);
  const auto it = nodes_.find(std::string(node));
  return it != nodes_.end() && it->second;
}

std::vector<std::string> ReplicaOwnership::OwnedNotFollowed() const {
  std::vector<std::string> candidates;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [node, followed] : nodes_) {
      if (!followed) candidates.push_back(node);
    }
  }
  std::vector<std::string> out;
  for (std::string& node : candidates) {
    if (Owns(node)) out.push_back(std::move(node));
  }
  std::sort(out.begin(), out.end());
  return out;
}

uint64_t ReplicaOwnership::known_nodes() const {
  absl::MutexLock lock(&mu_);
  return nodes_.size();
}

uint64_t ReplicaOwnership::followed_nodes() const {
  absl::MutexLock lock(&mu_);
  return std::count_if(nodes_.begin(), nodes_.end(), [](const auto& n) { return n.second; });
}

}  // namespace kvlearn
