#include "server/engine_bridge.h"

#include <nats/nats.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "kvlearn/v1/retention.pb.h"

namespace kvlearn {

absl::StatusOr<std::unique_ptr<EngineBridge>> EngineBridge::Start(EngineBridgeOptions options) {
  if (options.mapping.cost == nullptr) {
    return absl::InvalidArgumentError("bridge: a cost model is required");
  }
  if (options.subscriber.endpoints.empty()) {
    return absl::InvalidArgumentError("--engine-events: at least one engine");
  }
  std::unique_ptr<EngineBridge> b(new EngineBridge(std::move(options)));
  EngineBridgeOptions& o = b->options_;
  auto connected = JetStreamConnection::Connect(o.connection);
  if (!connected.ok()) return connected.status();
  b->connection_ = *std::move(connected);
  if (auto st = b->connection_->EnsureStream(o.stream, o.subject_prefix); !st.ok()) return st;
  // Resume each engine after the last batch its subject holds.
  for (EngineEndpoint& e : o.subscriber.endpoints) {
    const std::string subject = absl::StrCat(o.subject_prefix, ".", e.node_id);
    natsMsg* last = nullptr;
    jsErrCode err = static_cast<jsErrCode>(0);
    const natsStatus s = js_GetLastMsg(&last, b->connection_->js(), o.stream.c_str(),
                                       subject.c_str(), nullptr, &err);
    if (s != NATS_OK) {
      const absl::Status st = NatsStatus(s, err, absl::StrCat("last message of ", subject));
      if (absl::IsNotFound(st)) continue;
      return st;
    }
    const char* value = nullptr;
    uint64_t sequence = 0;
    if (natsMsgHeader_Get(last, kSequenceHeader, &value) == NATS_OK && value != nullptr &&
        absl::SimpleAtoi(value, &sequence)) {
      e.start_sequence = sequence + 1;
    }
    natsMsg_Destroy(last);
  }
  b->id_start_ = absl::StrCat("kvlearn-bridge/",
                              std::chrono::system_clock::now().time_since_epoch().count(), "/");
  EngineBridge* self = b.get();
  auto subscriber = EngineSubscriber::Start(
      o.subscriber, [self](const std::string& node, uint64_t sequence, EngineEventBatch& batch) {
        self->OnBatch(node, sequence, batch);
      });
  if (!subscriber.ok()) return subscriber.status();
  b->subscriber_ = *std::move(subscriber);
  return b;
}

EngineBridge::~EngineBridge() { Stop(); }

void EngineBridge::Stop() {
  stopping_.store(true, std::memory_order_release);
  if (subscriber_) subscriber_->Stop();
}

void EngineBridge::OnBatch(const std::string& node, uint64_t sequence,
                           const EngineEventBatch& batch) {
  events_buffer_.clear();
  ToKvlearnEvents(node, batch, options_.mapping, tiers_seen_[node], events_buffer_);
  if (events_buffer_.empty()) return;  // only other KV cache groups
  const std::string subject = absl::StrCat(options_.subject_prefix, ".", node);
  const std::vector<std::pair<std::string, std::string>> headers = {
      {kSequenceHeader, absl::StrCat(sequence)}};
  const size_t per = std::max<uint32_t>(1, options_.max_events_per_batch);
  v1::EventBatch out;
  for (size_t from = 0, part = 0; from < events_buffer_.size(); from += per, ++part) {
    out.Clear();
    const size_t to = std::min(events_buffer_.size(), from + per);
    for (size_t i = from; i < to; ++i) *out.add_events() = std::move(events_buffer_[i]);
    const auto published = connection_->Publish(
        subject, out.SerializeAsString(), absl::StrCat(id_start_, node, "/", sequence, "/", part),
        /*attempts=*/0, headers, &stopping_);
    if (!published.ok()) {
      failures_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    published_.fetch_add(1, std::memory_order_relaxed);
    events_.fetch_add(to - from, std::memory_order_relaxed);
  }
}

}  // namespace kvlearn
