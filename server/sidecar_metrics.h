// The sidecar's counters and gauges, rendered in the Prometheus text format
// (version 0.0.4) for /metrics. Names are prefixed kvlearn_, use base units
// (seconds, bytes) and counters end in _total (docs/sidecar.md).
//
// It also keeps the live traffic summary (models/traffic_summary.h: request
// rate, prompt blocks, block reuse over every request arrival accepted since
// start, in bounded memory) and, when the serving model records its training
// traffic, the drift ratios between the two.
//
// Thread-safety: every method may be called concurrently; counters are
// relaxed atomics, the model info is guarded by a mutex, the traffic summary
// by another.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "absl/synchronization/mutex.h"
#include "models/learned_model.h"
#include "models/traffic_summary.h"

namespace kvlearn {

// The RPCs with their own latency and outcome series.
enum class Rpc { kReportEvents, kAdmit, kRankEviction, kGetStatus, kReloadModel, kDecide, kCount };
const char* RpcName(Rpc rpc);

// Event kinds, in kvlearn.v1.Event's oneof order (1-based field offsets).
inline constexpr int kEventKinds = 9;
const char* EventKindName(int kind);  // 0 .. kEventKinds-1

// Gauges read from their owners when /metrics is scraped.
struct MetricsGauges {
  uint64_t pools = 0;
  uint64_t blocks_tracked = 0;
  uint64_t resident_blocks = 0;
  uint64_t resident_bytes = 0;
  uint64_t policy_states_refused = 0;
  uint64_t log_bytes = 0;
  uint64_t log_trimmed_bytes = 0;
  uint64_t log_decision_waits = 0;
  uint64_t log_next_sequence = 0;
};

class SidecarMetrics {
 public:
  static constexpr int kCodes = 17;  // gRPC status codes 0..16
  // Decision latency histogram bounds, seconds.
  static constexpr std::array<double, 12> kLatencyBounds = {2e-6,   5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4,
                                                            2.5e-4, 5e-4, 1e-3, 2.5e-3, 1e-2, 1e-1};

  // `block_size_tokens`: the sidecar's --block-size, the live summary's.
  explicit SidecarMetrics(uint32_t block_size_tokens = 512);

  void CountRpc(Rpc rpc, int code) { rpcs_[Index(rpc)][Clamp(code)].fetch_add(1, kRelaxed); }
  // Latency of one Admit or RankEviction decision.
  void ObserveDecision(Rpc rpc, double seconds);
  void CountAdmit(bool keep) { (keep ? admit_keep_ : admit_discard_).fetch_add(1, kRelaxed); }
  void CountEvictionAdvice(uint64_t blocks) { evict_.fetch_add(blocks, kRelaxed); }
  void CountIngested(int kind) { ingested_[kind].fetch_add(1, kRelaxed); }
  void CountRejected(int code) { rejected_[Clamp(code)].fetch_add(1, kRelaxed); }
  void CountReload(bool ok) { (ok ? reload_ok_ : reload_error_).fetch_add(1, kRelaxed); }
  void SetModelInfo(const std::string& policy, const std::string& model_version);
  // The serving model's verdict and training traffic (kvlearn_model_fit, the
  // drift ratios); nullptr when no model serves.
  void SetModelMetadata(const ModelMetadata* metadata);
  // A request arrival accepted from any node, at the node's clock.
  void ObserveArrival(int64_t timestamp_us, std::span<const uint64_t> block_ids);

  uint64_t ingested_total() const;

  std::string Render(const MetricsGauges& gauges) const;

 private:
  static constexpr auto kRelaxed = std::memory_order_relaxed;
  static int Index(Rpc rpc) { return static_cast<int>(rpc); }
  static int Clamp(int code) { return code < 0 || code >= kCodes ? 2 /*UNKNOWN*/ : code; }
  static constexpr int kRpcs = static_cast<int>(Rpc::kCount);

  struct Histogram {
    std::array<std::atomic<uint64_t>, kLatencyBounds.size() + 1> buckets{};
    std::atomic<uint64_t> count{0};
    std::atomic<uint64_t> sum_ns{0};
  };

  std::array<std::array<std::atomic<uint64_t>, kCodes>, kRpcs> rpcs_{};
  std::array<Histogram, kRpcs> latency_{};
  std::atomic<uint64_t> admit_keep_{0}, admit_discard_{0}, evict_{0};
  std::array<std::atomic<uint64_t>, kEventKinds> ingested_{};
  std::array<std::atomic<uint64_t>, kCodes> rejected_{};
  std::atomic<uint64_t> reload_ok_{0}, reload_error_{0};
  double start_time_seconds_ = 0;
  mutable absl::Mutex mu_;
  std::string policy_ ABSL_GUARDED_BY(mu_);
  std::string model_version_ ABSL_GUARDED_BY(mu_);
  struct ServingModel {
    bool judged = false;
    bool fit = false;
    std::optional<TrafficSummary> training;
  };
  std::optional<ServingModel> model_ ABSL_GUARDED_BY(mu_);
  mutable absl::Mutex traffic_mu_;
  TrafficSummarizer traffic_ ABSL_GUARDED_BY(traffic_mu_);
};

}  // namespace kvlearn
