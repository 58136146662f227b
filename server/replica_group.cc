#include "server/replica_group.h"

#include <nats/nats.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/splitmix64.h"

namespace kvlearn {
namespace {

bool ValidName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
}

}  // namespace

uint64_t ReplicaGroup::Score(std::string_view member, std::string_view node) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64
  const auto mix = [&h](char c) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  };
  for (char c : member) mix(c);
  mix('\0');
  for (char c : node) mix(c);
  return SplitMix64Mix(h);  // FNV's low bits alone spread poorly
}

ReplicaMember ReplicaGroup::Owner(const std::vector<ReplicaMember>& members,
                                  std::string_view node) {
  const ReplicaMember* best = nullptr;
  uint64_t best_score = 0;
  for (const ReplicaMember& m : members) {
    const uint64_t score = Score(m.name, node);
    if (best == nullptr || score > best_score || (score == best_score && m.name < best->name)) {
      best = &m;
      best_score = score;
    }
  }
  return best != nullptr ? *best : ReplicaMember{};
}

absl::StatusOr<std::unique_ptr<ReplicaGroup>> ReplicaGroup::Join(ReplicaGroupOptions options) {
  if (!ValidName(options.name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("replica name '", options.name, "': 1..64 characters of [A-Za-z0-9_-]"));
  }
  if (!(options.heartbeat_seconds > 0 && options.heartbeat_seconds < options.ttl_seconds)) {
    return absl::InvalidArgumentError("replica group: heartbeat must be shorter than the TTL");
  }
  std::unique_ptr<ReplicaGroup> g(new ReplicaGroup(std::move(options)));
  auto connected = JetStreamConnection::Connect(g->options_.connection);
  if (!connected.ok()) return connected.status();
  g->connection_ = *std::move(connected);
  const std::string& bucket = g->options_.bucket;
  // Replicas joining an empty server at once race to create the bucket, and a
  // bucket just created may not answer its first put yet ("no responders"):
  // a few tries, a heartbeat apart, before giving up.
  absl::Status joined;
  for (int attempt = 0; attempt < 5; ++attempt) {
    if (attempt > 0) {
      std::this_thread::sleep_for(
          std::chrono::duration<double>(std::min(g->options_.heartbeat_seconds, 1.0)));
    }
    if (g->kv_ != nullptr) {
      kvStore_Destroy(g->kv_);
      g->kv_ = nullptr;
    }
    natsStatus s = js_KeyValue(&g->kv_, g->connection_->js(), bucket.c_str());
    if (s == NATS_NOT_FOUND) {
      kvConfig config;
      kvConfig_Init(&config);
      config.Bucket = bucket.c_str();
      config.History = 1;
      config.TTL = static_cast<int64_t>(g->options_.ttl_seconds * 1e9);  // nanoseconds
      s = js_CreateKeyValue(&g->kv_, g->connection_->js(), &config);
    }
    if (s != NATS_OK) {
      g->kv_ = nullptr;
      joined = NatsStatus(s, 0, absl::StrCat("key-value bucket ", bucket));
      continue;
    }
    joined = g->Beat();
    if (joined.ok()) break;
  }
  if (!joined.ok()) return joined;
  if (auto st = g->Refresh(); !st.ok()) return st;
  g->thread_ = std::thread([p = g.get()] { p->Run(); });
  return g;
}

ReplicaGroup::~ReplicaGroup() {
  Leave();
  if (kv_ != nullptr) kvStore_Destroy(kv_);
}

absl::Status ReplicaGroup::Beat() {
  uint64_t revision = 0;
  const natsStatus s =
      kvStore_PutString(&revision, kv_, options_.name.c_str(), options_.address.c_str());
  return s == NATS_OK ? absl::OkStatus()
                      : NatsStatus(s, 0, absl::StrCat("heartbeat of ", options_.name));
}

absl::Status ReplicaGroup::Refresh() {
  kvKeysList keys{};
  natsStatus s = kvStore_Keys(&keys, kv_, nullptr);
  std::vector<ReplicaMember> members;
  if (s == NATS_NOT_FOUND) s = NATS_OK;  // an empty bucket
  for (int i = 0; s == NATS_OK && i < keys.Count; ++i) {
    kvEntry* entry = nullptr;
    const natsStatus got = kvStore_Get(&entry, kv_, keys.Keys[i]);
    if (got == NATS_OK) {
      members.push_back({keys.Keys[i], kvEntry_ValueString(entry)});
      kvEntry_Destroy(entry);
    } else if (got != NATS_NOT_FOUND) {  // gone since the listing: skipped
      s = got;
    }
  }
  kvKeysList_Destroy(&keys);
  if (s != NATS_OK) return NatsStatus(s, 0, absl::StrCat("members of ", options_.bucket));
  std::sort(members.begin(), members.end(),
            [](const ReplicaMember& a, const ReplicaMember& b) { return a.name < b.name; });
  std::lock_guard<std::mutex> lock(members_mu_);
  if (members != members_) {
    members_ = std::move(members);
    ++generation_;
  }
  return absl::OkStatus();
}

void ReplicaGroup::Run() {
  const auto beat =
      std::chrono::milliseconds(static_cast<int64_t>(options_.heartbeat_seconds * 1e3));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    wake_.wait_for(lock, beat, [this] { return stop_; });
    if (stop_) break;
    lock.unlock();
    // A failure (NATS unreachable) is retried at the next beat; the view
    // stays the last one read.
    (void)Beat();
    (void)Refresh();
    lock.lock();
  }
}

void ReplicaGroup::StopThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ReplicaGroup::StopHeartbeats() { StopThread(); }

void ReplicaGroup::Leave() {
  StopThread();
  std::lock_guard<std::mutex> lock(mu_);
  if (left_ || kv_ == nullptr) return;
  left_ = true;
  (void)kvStore_Delete(kv_, options_.name.c_str());
}

std::vector<ReplicaMember> ReplicaGroup::Members() const {
  std::lock_guard<std::mutex> lock(members_mu_);
  return members_;
}

uint64_t ReplicaGroup::generation() const {
  std::lock_guard<std::mutex> lock(members_mu_);
  return generation_;
}

ReplicaMember ReplicaGroup::OwnerOf(std::string_view node) const {
  std::lock_guard<std::mutex> lock(members_mu_);
  return Owner(members_, node);
}

}  // namespace kvlearn
