#include "server/node_snapshot_publisher.h"

#include <iostream>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kvlearn {

NodeSnapshotPublisher::NodeSnapshotPublisher(NodeSnapshotStore* store, std::string id_prefix)
    : store_(store), id_prefix_(std::move(id_prefix)), thread_([this] { Run(); }) {}

NodeSnapshotPublisher::~NodeSnapshotPublisher() { Stop(); }

void NodeSnapshotPublisher::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cancel_.store(true, std::memory_order_release);
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool NodeSnapshotPublisher::HasRoom() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !stop_ && pending_.size() < kMaxPending;
}

void NodeSnapshotPublisher::Submit(std::string node, uint64_t through, PoolsSnapshot pools) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    pending_.push_back({std::move(node), through, std::move(pools)});
  }
  wake_.notify_one();
}

uint64_t NodeSnapshotPublisher::published_through(const std::string& node) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = through_.find(node);
  return it == through_.end() ? 0 : it->second;
}

void NodeSnapshotPublisher::Run() {
  while (true) {
    Pending p;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [this] { return stop_ || !pending_.empty(); });
      if (stop_) return;
      p = std::move(pending_.front());
      pending_.pop_front();
    }
    const std::string bytes = EncodePoolsSnapshot(p.pools);
    p.pools = {};
    // Unique per publisher and snapshot, so a retried chunk is stored once
    // and two publishers' chunks never mix.
    const std::string id = absl::StrCat(id_prefix_, "-", p.through, "-", ++counter_);
    const absl::Status s = store_->Publish(p.node, p.through, id, bytes, &cancel_);
    if (!s.ok()) {
      failures_.fetch_add(1, std::memory_order_relaxed);
      if (!absl::IsCancelled(s)) {
        std::cerr << "kvlearn serve: snapshot of node " << p.node
                  << " not kept in JetStream: " << s.message() << std::endl;
      }
      continue;
    }
    published_.fetch_add(1, std::memory_order_relaxed);
    bytes_.fetch_add(bytes.size(), std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(mu_);
    through_[p.node] = p.through;
  }
}

}  // namespace kvlearn
