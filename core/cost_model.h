// What a block costs to recompute, to move and to hold, from a model profile
// (KV bytes per token) and a hardware profile (prefill speed, link bandwidths).
//
// Defaults follow the KVLearn paper's calibration (Liu et al., SYSTOR '26):
// A100 + Llama-3-8B, alpha_bw = 0.026 ms/token, alpha_flop = 8e-6 ms/token^2,
// L_cross = 512 tokens, RDMA at 25 GB/s.
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
  double params_billions = 0;  // scales the recompute calibration (see CostModel)

  // K and V for every layer: 2 * layers * kv_heads * head_dim * dtype_bytes.
  uint64_t KvBytesPerToken() const {
    return uint64_t{2} * layers * kv_heads * head_dim * dtype_bytes;
  }
};

struct HardwareProfile {
  std::string name;
  double alpha_bw_ms_per_token = 0;       // short prefixes: memory-bound, linear
  double alpha_flop_ms_per_token2 = 0;    // long prefixes: attention-bound, quadratic
  uint32_t l_cross_tokens = 0;            // where the quadratic regime starts
  double calibrated_params_billions = 0;  // model size the alphas were measured with
  double rdma_gb_per_s = 0;               // pool <-> prefill node (GB = 1e9 bytes)
  double pcie_gb_per_s = 0;
  double nvme_gb_per_s = 0;
  double hbm_gb_per_s = 0;
  uint32_t prefill_nodes = 0;
  // Cluster simulation (sim/cluster_simulator.h); zero = not set.
  double peak_tflops = 0;            // dense BF16 peak of one prefill node
  double mfu = 0;                    // model FLOPs utilisation reached in prefill
  double hbm_kv_gb_per_node = 0;     // HBM left for the KV prefix cache on a prefill node
  double host_dram_gb_per_node = 0;  // host DRAM given to the KV cache (second tier)
};

std::span<const ModelProfile> ModelProfiles();
std::span<const HardwareProfile> HardwareProfiles();
absl::StatusOr<ModelProfile> FindModelProfile(std::string_view name);
absl::StatusOr<HardwareProfile> FindHardwareProfile(std::string_view name);

class CostModel {
 public:
  CostModel(ModelProfile model, HardwareProfile hardware);

  const ModelProfile& model() const { return model_; }
  const HardwareProfile& hardware() const { return hardware_; }
  uint64_t BytesForTokens(uint64_t tokens) const { return tokens * model_.KvBytesPerToken(); }

  // Prefill time of a prefix of L tokens, in ms:
  //   alpha_bw * L                                for L < L_cross
  //   alpha_bw * L + alpha_flop * (L - L_cross)^2  for L >= L_cross
  // The paper writes the second branch as alpha_flop * L^2. Taken literally
  // that drops from 13.3 ms to 2.1 ms at L_cross (default calibration), so a
  // prompt just under L_cross would cost more than one just over it and some
  // blocks would get a negative marginal cost. Our form keeps the same two
  // regimes (a linear term everywhere, attention's quadratic term past
  // L_cross) but is continuous and convex, so a deeper block never costs less
  // than a shallower one; for long prompts the two agree within a few percent
  // (12k tokens: 1.37 s vs 1.15 s; 85k tokens: 59.3 s vs 57.8 s). Both alphas
  // are scaled by the model's size relative to the calibration model.
  double RecomputeMs(uint64_t tokens) const;
  // Marginal cost of tokens [begin, end) given that [0, begin) is already there.
  double RecomputeMs(uint64_t begin, uint64_t end) const {
    return RecomputeMs(end) - RecomputeMs(begin);
  }
  // Prefill time of `tokens` new tokens from FLOPs, in ms: 2 * params * tokens
  // / (peak * MFU). Linear: it leaves out attention's quadratic term, which
  // RecomputeMs keeps. REQUIRES: peak_tflops and mfu > 0.
  double PrefillFlopsMs(uint64_t tokens) const {
    return 2.0 * model_.params_billions * 1e9 * static_cast<double>(tokens) /
           (hardware_.peak_tflops * 1e12 * hardware_.mfu) * 1e3;
  }
  // The pool <-> prefill node link (RDMA), in bytes per ms.
  double LinkBytesPerMs() const { return BytesPerMs(hardware_.rdma_gb_per_s); }
  // Moving `bytes` between the pool and a prefill node over RDMA, in ms.
  double TransferMs(uint64_t bytes) const { return static_cast<double>(bytes) / LinkBytesPerMs(); }

 private:
  ModelProfile model_;
  HardwareProfile hardware_;
  double scale_;  // model params / calibration params
};

}  // namespace kvlearn
