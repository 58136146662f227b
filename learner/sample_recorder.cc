#include "learner/sample_recorder.h"

#include <algorithm>
#include <array>
#include <limits>
#include <numeric>
#include <random>

#include "features/access_history.h"
#include "features/feature_extractor.h"
#include "policies/policy_factory.h"
#include "policies/retention_policy.h"
#include "sim/pool_simulator.h"

namespace kvlearn {
namespace {

// Labels read the trace up to the last recorded request only, so a model
// trained on a prefix learns nothing from the requests it is judged on.
int64_t LabelEndMs(const Trace& trace, uint32_t end_request) {
  return trace.requests[std::min<size_t>(end_request, trace.requests.size()) - 1].timestamp_ms;
}

// Whether a trace read up to end_ms tells if a block used at t_ms is used
// again within h seconds.
bool LabelKnown(int64_t end_ms, int64_t t_ms, double h) {
  return static_cast<double>(end_ms - t_ms) / 1000.0 >= h;
}

// Forwards every call to the policy that runs the pool and, at each request,
// records the chain's samples at the point the learned policy scores them:
// after the chain is added to the history, before anything is evicted.
class RecordingPolicy final : public RetentionPolicy {
 public:
  RecordingPolicy(std::unique_ptr<RetentionPolicy> inner, const PolicyEnv& env,
                  const ReplayTrace& replay, const RecordOptions& options, SampleSet* out)
      : inner_(std::move(inner)),
        pool_(*env.pool),
        history_(env.catalog),
        extractor_(env.features),
        replay_(replay),
        options_(options),
        label_end_ms_(LabelEndMs(*replay.trace, options.end_request)),
        out_(out) {}

  std::string_view name() const override { return inner_->name(); }

  void OnRequest(std::span<const BlockIndex> chain, const AccessInfo& access) override {
    history_.Record(chain, access.time_ms);
    history_.RecordEvictions(pool_.evictions());
    if (access.request < options_.end_request) {
      for (size_t i = 0; i < chain.size(); ++i) Record(chain[i], access, access.access_pos + i);
    }
    inner_->OnRequest(chain, access);
  }
  void OnHit(BlockIndex b, const AccessInfo& a) override { inner_->OnHit(b, a); }
  bool ShouldAdmit(BlockIndex b, const AccessInfo& a) override { return inner_->ShouldAdmit(b, a); }
  void OnInsert(BlockIndex b, const AccessInfo& a) override { inner_->OnInsert(b, a); }
  BlockIndex SelectVictim() override { return inner_->SelectVictim(); }
  void OnEvict(BlockIndex b) override { inner_->OnEvict(b); }
  double EvictionPriority(BlockIndex b) const override { return inner_->EvictionPriority(b); }
  std::vector<BlockIndex> RankVictims(std::span<const BlockIndex> c) const override {
    return inner_->RankVictims(c);
  }
  std::vector<BlockIndex> FirstVictims(std::span<const BlockIndex> c,
                                       uint64_t bytes_wanted) const override {
    return inner_->FirstVictims(c, bytes_wanted);
  }

 private:
  void Record(BlockIndex b, const AccessInfo& access, size_t pos) {
    std::array<float, kNumFeatures> x;
    extractor_.Extract(b, access.time_ms, replay_.catalog, history_, pool_, x);
    out_->features.insert(out_->features.end(), x.begin(), x.end());

    const Trace& trace = *replay_.trace;
    const uint32_t next = replay_.next_use[pos];
    const double next_s =
        next == kNeverUsedAgain
            ? std::numeric_limits<double>::infinity()
            : static_cast<double>(trace.requests[next].timestamp_ms - access.time_ms) / 1000.0;
    for (const double h : options_.horizons_seconds) {
      out_->reused.push_back(next_s <= h ? 1.0f : 0.0f);
      // Whether the next use falls within h is only known when the trace runs
      // on for h; dropping just the unknown negatives would bias towards reuse.
      out_->known.push_back(LabelKnown(label_end_ms_, access.time_ms, h) ? 1 : 0);
    }
    out_->request.push_back(access.request);
    out_->block.push_back(b);
    out_->next_use_seconds.push_back(next_s);
    out_->requests_to_next_use.push_back(next == kNeverUsedAgain ? 0 : next - access.request);
    const BlockMeta& m = replay_.catalog[b];
    const double saving = std::max(m.recompute_gpu_ms - extractor_.TransferMs(m), 0.0);
    out_->saved_ms.push_back(next_s <= options_.horizons_seconds.back() ? saving : 0.0f);
  }

  std::unique_ptr<RetentionPolicy> inner_;
  const PoolState& pool_;
  AccessHistory history_;
  FeatureExtractor extractor_;
  const ReplayTrace& replay_;
  const RecordOptions& options_;
  const int64_t label_end_ms_;
  SampleSet* out_;
};

}  // namespace

SampleSet SampleSet::Slice(uint32_t begin_request, uint32_t end_request) const {
  SampleSet s;
  s.num_horizons = num_horizons;
  for (size_t i = 0; i < size(); ++i) {
    if (request[i] < begin_request || request[i] >= end_request) continue;
    s.features.insert(s.features.end(), features.begin() + i * kNumFeatures,
                      features.begin() + (i + 1) * kNumFeatures);
    s.reused.insert(s.reused.end(), reused.begin() + i * num_horizons,
                    reused.begin() + (i + 1) * num_horizons);
    s.known.insert(s.known.end(), known.begin() + i * num_horizons,
                   known.begin() + (i + 1) * num_horizons);
    s.request.push_back(request[i]);
    s.block.push_back(block[i]);
    s.next_use_seconds.push_back(next_use_seconds[i]);
    s.requests_to_next_use.push_back(requests_to_next_use[i]);
    s.saved_ms.push_back(saved_ms[i]);
  }
  return s;
}

void ShuffleLabels(SampleSet& s, uint64_t seed) {
  const size_t n = s.size(), k = s.num_horizons;
  std::vector<size_t> from(n);
  std::iota(from.begin(), from.end(), size_t{0});
  std::mt19937_64 rng(seed);
  for (size_t i = n; i > 1; --i) std::swap(from[i - 1], from[rng() % i]);
  const SampleSet original = s;
  for (size_t i = 0; i < n; ++i) {
    const size_t j = from[i];
    std::copy_n(original.reused.begin() + j * k, k, s.reused.begin() + i * k);
    std::copy_n(original.known.begin() + j * k, k, s.known.begin() + i * k);
    s.next_use_seconds[i] = original.next_use_seconds[j];
    s.requests_to_next_use[i] = original.requests_to_next_use[j];
    s.saved_ms[i] = original.saved_ms[j];
  }
}

absl::StatusOr<SampleSet> RecordSamples(const ReplayTrace& replay, const CostModel& cost,
                                        const RecordOptions& options) {
  if (options.horizons_seconds.empty() ||
      !std::is_sorted(options.horizons_seconds.begin(), options.horizons_seconds.end()) ||
      options.horizons_seconds.front() <= 0) {
    return absl::InvalidArgumentError("horizons must be positive and increasing");
  }
  if (replay.trace->requests.empty()) return absl::InvalidArgumentError("trace has no requests");
  SampleSet samples;
  samples.num_horizons = options.horizons_seconds.size();
  PoolReplayOptions replay_options;
  replay_options.pool_bytes = options.pool_bytes;
  replay_options.model = options.model;
  replay_options.feature_sink = options.policy_feature_sink;
  replay_options.requests_done = options.requests_done;
  replay_options.make_policy =
      [&](const PolicyEnv& env) -> absl::StatusOr<std::unique_ptr<RetentionPolicy>> {
    auto inner = CreatePolicy(options.policy, env);
    if (!inner.ok()) return inner.status();
    return std::unique_ptr<RetentionPolicy>(
        new RecordingPolicy(std::move(*inner), env, replay, options, &samples));
  };
  auto result = ReplayPool(replay, cost, options.policy, replay_options);
  if (!result.ok()) return result.status();
  return samples;
}

std::vector<double> LearnableHorizons(const Trace& trace, uint32_t train_end, uint32_t label_end,
                                      std::span<const double> horizons_seconds) {
  std::vector<double> learnable;
  const size_t n = std::min<size_t>(train_end, trace.requests.size());
  if (n == 0 || label_end == 0) return learnable;
  const int64_t end_ms = LabelEndMs(trace, label_end);
  for (const double h : horizons_seconds) {
    size_t known = 0;
    for (size_t i = 0; i < n; ++i) known += LabelKnown(end_ms, trace.requests[i].timestamp_ms, h);
    if (2 * known >= n) learnable.push_back(h);
  }
  return learnable;
}

}  // namespace kvlearn
