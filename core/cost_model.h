// What a block costs to recompute, to move and to hold, from a model profile
// (architecture, parameter count, KV bytes per token) and a hardware profile
// (peak FLOP/s, MFU, link bandwidths and latency). Immutable once built; share
// freely between threads.
//
// Two recompute forms (docs/cost_model.md):
// - kFlops, the default: prefill of an L-token prefix from FLOPs on one
//   prefill instance (tensor parallel over the model's GPUs per instance),
//   dense 2 * params * L plus causal attention 2 * layers * d * L^2
//   (d = query heads * head dim), divided by instance peak * MFU.
// - kKvlearnPaper: the KVLearn paper's calibration (Liu et al., SYSTOR '26):
//   A100 + Llama-3-8B, alpha_bw = 0.026 ms/token, alpha_flop = 8e-6
//   ms/token^2, L_cross = 512 tokens, scaled by model size; transfers have no
//   per-transfer latency and an instance is one GPU. Kept for comparison with
//   the paper: it makes attention dominate from a few thousand tokens on.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/units.h"

namespace kvlearn {

struct ModelProfile {
  std::string name;
  uint32_t layers = 0;
  uint32_t kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t dtype_bytes = 2;
  double params_billions = 0;  // dense FLOPs per token = 2 * params
  uint32_t query_heads = 0;    // attention FLOPs scale with query heads * head dim
  // GPUs one prefill instance spans (tensor parallel): the weights must fit
  // with room for KV. A prefill instance is what a "prefill node" means.
  uint32_t gpus_per_instance = 1;

  // Replaces the architecture's KV bytes per token when > 0
  // (--kv-bytes-per-token); FLOPs still come from the architecture.
  uint64_t kv_bytes_per_token_override = 0;

  // K and V for every layer: 2 * layers * kv_heads * head_dim * dtype_bytes.
  uint64_t KvBytesPerToken() const {
    if (kv_bytes_per_token_override > 0) return kv_bytes_per_token_override;
    return uint64_t{2} * layers * kv_heads * head_dim * dtype_bytes;
  }
  double WeightBytes() const { return params_billions * 1e9 * dtype_bytes; }
};

struct HardwareProfile {
  std::string name;
  // kKvlearnPaper form only.
  double alpha_bw_ms_per_token = 0;       // short prefixes: memory-bound, linear
  double alpha_flop_ms_per_token2 = 0;    // long prefixes: attention-bound, quadratic
  uint32_t l_cross_tokens = 0;            // where the quadratic regime starts
  double calibrated_params_billions = 0;  // model size the alphas were measured with
  double rdma_gb_per_s = 0;               // pool <-> prefill node (GB = 1e9 bytes)
  double pcie_gb_per_s = 0;
  double nvme_gb_per_s = 0;
  double hbm_gb_per_s = 0;
  // Prefill instances when --prefill-nodes is given no number and nothing
  // sizes the cluster (sidecar, train, loadgen); compare sizes it itself.
  uint32_t prefill_nodes = 0;
  double peak_tflops = 0;            // dense BF16 peak of one GPU
  double mfu = 0;                    // model FLOPs utilisation reached in prefill
  double hbm_gb_per_gpu = 0;         // HBM capacity of one GPU
  double host_dram_gb_per_node = 0;  // host DRAM given to the KV cache (second tier)
  // Fixed cost of one transfer (pool load or admission) on top of bytes / link:
  // kFlops form only.
  double transfer_latency_ms = 0;
};

std::span<const ModelProfile> ModelProfiles();
std::span<const HardwareProfile> HardwareProfiles();
absl::StatusOr<ModelProfile> FindModelProfile(std::string_view name);
absl::StatusOr<HardwareProfile> FindHardwareProfile(std::string_view name);

enum class RecomputeForm { kFlops, kKvlearnPaper };
// "flops" or "kvlearn-paper".
std::string_view RecomputeFormName(RecomputeForm form);
absl::StatusOr<RecomputeForm> ParseRecomputeForm(std::string_view name);

// Share of a GPU's HBM a serving engine gives to weights + KV (SGLang's
// default static memory fraction); the rest is activations and workspace.
inline constexpr double kServingMemoryFraction = 0.88;

class CostModel {
 public:
  CostModel(ModelProfile model, HardwareProfile hardware,
            RecomputeForm form = RecomputeForm::kFlops);

  const ModelProfile& model() const { return model_; }
  const HardwareProfile& hardware() const { return hardware_; }
  RecomputeForm form() const { return form_; }
  uint64_t BytesForTokens(uint64_t tokens) const { return tokens * model_.KvBytesPerToken(); }

  // Prefill time of a prefix of L tokens on one prefill instance, in ms.
  // kFlops: PrefillFlops(L) / InstanceFlopsPerMs().
  // kKvlearnPaper, scaled by model params / calibration params:
  //   alpha_bw * L                                for L < L_cross
  //   alpha_bw * L + alpha_flop * (L - L_cross)^2  for L >= L_cross
  // The paper writes the second branch as alpha_flop * L^2; taken literally
  // it drops at L_cross, so a prompt just under L_cross would cost more than
  // one just over it. This form keeps both regimes and is continuous and
  // convex (12k tokens: 1.37 s vs the literal 1.15 s).
  double RecomputeMs(uint64_t tokens) const;
  // Marginal cost of tokens [begin, end) given that [0, begin) is already
  // there: a hit on [0, begin) still pays for [begin, end) attending to it.
  double RecomputeMs(uint64_t begin, uint64_t end) const {
    return RecomputeMs(end) - RecomputeMs(begin);
  }

  // What recomputing tokens [begin, end) costs in cost_seconds' units: the
  // marginal prefill time times the GPUs the instance holds, GPU-ms. This,
  // not the wall time, is what a hit saves against a transfer's link-ms.
  double RecomputeGpuMs(uint64_t begin, uint64_t end) const {
    return RecomputeMs(begin, end) * GpusPerInstance();
  }
  // The same for a chain's block at `depth` holding `tokens`, every block
  // before it holding `block_size`.
  double BlockRecomputeGpuMs(uint32_t depth, uint64_t tokens, uint32_t block_size) const {
    const uint64_t begin = uint64_t{depth} * block_size;
    return RecomputeGpuMs(begin, begin + tokens);
  }

  // FLOPs of a causal prefill over L tokens (forward pass, multiply-add = 2).
  double DenseFlops(uint64_t tokens) const {
    return 2.0 * model_.params_billions * 1e9 * static_cast<double>(tokens);
  }
  double AttentionFlops(uint64_t tokens) const {
    const double l = static_cast<double>(tokens);
    return 2.0 * model_.layers * static_cast<double>(model_.query_heads) * model_.head_dim * l * l;
  }
  double PrefillFlops(uint64_t tokens) const { return DenseFlops(tokens) + AttentionFlops(tokens); }
  // Sustained FLOPs per ms of `gpus` GPUs at the profile's peak and MFU.
  double FlopsPerMs(uint32_t gpus) const {
    return gpus * hardware_.peak_tflops * 1e9 * hardware_.mfu;
  }

  // GPUs one prefill instance occupies (1 in the paper's form).
  uint32_t GpusPerInstance() const {
    return form_ == RecomputeForm::kFlops ? model_.gpus_per_instance : 1;
  }
  // HBM left for the KV prefix cache on one instance: its GPUs' HBM times
  // kServingMemoryFraction, minus the weights.
  double KvHbmBytesPerInstance() const;

  // The pool <-> prefill node link (RDMA), in bytes per ms.
  double LinkBytesPerMs() const { return BytesPerMs(hardware_.rdma_gb_per_s); }
  // Per-transfer latency in ms (0 in the paper's form).
  double TransferLatencyMs() const {
    return form_ == RecomputeForm::kFlops ? hardware_.transfer_latency_ms : 0.0;
  }
  // One transfer of `bytes` between the pool and a prefill node over RDMA,
  // in ms: bytes / link + latency; no bytes, no transfer, 0 ms.
  double TransferMs(uint64_t bytes) const {
    if (bytes == 0) return 0;
    return static_cast<double>(bytes) / LinkBytesPerMs() + TransferLatencyMs();
  }

 private:
  ModelProfile model_;
  HardwareProfile hardware_;
  RecomputeForm form_;
  double paper_scale_;  // model params / calibration params
};

// A published prefill latency the FLOPs form is checked against
// (docs/cost_model.md, "Against published figures").
struct PublishedPrefill {
  std::string_view source;    // short citation
  std::string_view model;     // a model profile name
  std::string_view hardware;  // a hardware profile name (same GPU class)
  uint32_t gpus = 1;          // GPUs the published run used
  uint64_t tokens = 0;        // prompt length
  double published_ms = 0;
};
std::span<const PublishedPrefill> PublishedPrefills();
// The FLOPs form's prefill time for a published run: its FLOPs over `gpus`
// GPUs of its hardware at the profile's MFU. Fails on unknown profile names.
absl::StatusOr<double> ModelledPrefillMs(const PublishedPrefill& p);

}  // namespace kvlearn
