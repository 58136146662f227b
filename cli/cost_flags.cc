#include "cli/cost_flags.h"

namespace kvlearn {

void CostFlags::Register(CLI::App* cmd) {
  cmd->add_option("--model-profile", model_profile,
                  "model profile (KV bytes per token): llama3-8b, llama3.3-70b, qwen3-8b")
      ->capture_default_str();
  cmd->add_option("--hardware-profile", hardware_profile,
                  "hardware profile (prefill speed, links, nodes): a100, h100")
      ->capture_default_str();
  cmd->add_option("--alpha-bw", alpha_bw, "override: recompute ms per token");
  cmd->add_option("--alpha-flop", alpha_flop, "override: recompute ms per token^2 past L_cross");
  cmd->add_option("--l-cross", l_cross, "override: L_cross in tokens");
  cmd->add_option("--rdma-gbps", rdma_gbps, "override: pool link bandwidth in GB/s (1e9 B)");
  cmd->add_option("--prefill-nodes", prefill_nodes, "override: number of prefill nodes");
  cmd->add_option("--kv-bytes-per-token", kv_bytes_per_token,
                  "override: KV bytes per token (replaces the model profile's)");
}

absl::StatusOr<CostModel> CostFlags::Resolve() const {
  auto model = FindModelProfile(model_profile);
  if (!model.ok()) return model.status();
  auto hw = FindHardwareProfile(hardware_profile);
  if (!hw.ok()) return hw.status();
  if (alpha_bw >= 0) hw->alpha_bw_ms_per_token = alpha_bw;
  if (alpha_flop >= 0) hw->alpha_flop_ms_per_token2 = alpha_flop;
  if (rdma_gbps >= 0) hw->rdma_gb_per_s = rdma_gbps;
  if (l_cross >= 0) hw->l_cross_tokens = static_cast<uint32_t>(l_cross);
  if (prefill_nodes >= 0) hw->prefill_nodes = static_cast<uint32_t>(prefill_nodes);
  if (kv_bytes_per_token >= 0) {
    if (kv_bytes_per_token == 0 || kv_bytes_per_token % 2 != 0) {
      return absl::InvalidArgumentError("--kv-bytes-per-token must be even and > 0 (K and V)");
    }
    // A one-layer, one-head, one-byte model whose head_dim yields the raw figure.
    model->layers = model->kv_heads = model->dtype_bytes = 1;
    model->head_dim = static_cast<uint32_t>(kv_bytes_per_token / 2);
  }
  if (hw->rdma_gb_per_s <= 0) return absl::InvalidArgumentError("--rdma-gbps must be > 0");
  if (hw->prefill_nodes == 0) return absl::InvalidArgumentError("--prefill-nodes must be >= 1");
  return CostModel(*model, *hw);
}

}  // namespace kvlearn
