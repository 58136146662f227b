#include "cli/cost_flags.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cli/flag_checks.h"

namespace kvlearn {

void CostFlags::Register(CLI::App* cmd) {
  cmd->add_option("--cost-model", cost_model,
                  "recompute cost: flops (dense + causal attention FLOPs / (peak * MFU)) or "
                  "kvlearn-paper (the KVLearn paper's alpha calibration); docs/cost_model.md")
      ->capture_default_str()
      ->check(CLI::IsMember({"flops", "kvlearn-paper"}));
  cmd->add_option("--model-profile", model_profile,
                  "model profile (architecture, params, KV bytes per token, GPUs per prefill "
                  "instance): llama3-8b, llama3.3-70b, qwen3-8b")
      ->capture_default_str();
  cmd->add_option("--hardware-profile", hardware_profile,
                  "hardware profile (peak FLOP/s, MFU, links, HBM): a100, h100, h200")
      ->capture_default_str();
  cmd->add_option("--prefill-nodes", prefill_nodes,
                  "prefill instances: a number, or auto (compare, plan and loadgen: the fewest at "
                  "which LRU keeps them busy at most 80% of the evaluated window on one pool, "
                  "plan's at --pool-fraction; other commands: the hardware profile's count)")
      ->capture_default_str();
  // Unset overrides hold -1 ("the profile's"), so an explicit negative is
  // refused here rather than read as unset.
  cmd->add_option("--mfu", mfu, "override: model FLOPs utilisation of prefill (flops form)")
      ->check(FiniteRange(0, 1));
  cmd->add_option("--transfer-latency-ms", transfer_latency_ms,
                  "override: fixed ms per pool transfer on top of bytes / link (flops form)")
      ->check(FiniteRange(0, 1e6));
  cmd->add_option("--alpha-bw", alpha_bw, "override: recompute ms per token (kvlearn-paper form)")
      ->check(FiniteRange(0, 1e6));
  cmd->add_option("--alpha-flop", alpha_flop,
                  "override: recompute ms per token^2 past L_cross (kvlearn-paper form)")
      ->check(FiniteRange(0, 1e6));
  cmd->add_option("--l-cross", l_cross, "override: L_cross in tokens (kvlearn-paper form)")
      ->check(CLI::Range(int64_t{0}, int64_t{UINT32_MAX}));
  cmd->add_option("--rdma-gbps", rdma_gbps, "override: pool link bandwidth in GB/s (1e9 B)")
      ->check(FiniteRange(0, 1e6));
  cmd->add_option("--kv-bytes-per-token", kv_bytes_per_token,
                  "override: KV bytes per token (replaces the model profile's)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
}

absl::StatusOr<std::optional<uint32_t>> CostFlags::PrefillNodes() const {
  if (prefill_nodes == "auto") return std::nullopt;
  uint32_t n = 0;
  if (!absl::SimpleAtoi(prefill_nodes, &n) || n == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--prefill-nodes must be 'auto' or a number >= 1, got '", prefill_nodes, "'"));
  }
  return n;
}

absl::StatusOr<CostModel> CostFlags::Resolve() const {
  auto form = ParseRecomputeForm(cost_model);
  if (!form.ok()) return form.status();
  auto model = FindModelProfile(model_profile);
  if (!model.ok()) return model.status();
  auto hw = FindHardwareProfile(hardware_profile);
  if (!hw.ok()) return hw.status();
  auto nodes = PrefillNodes();
  if (!nodes.ok()) return nodes.status();
  if (nodes->has_value()) hw->prefill_nodes = **nodes;
  if (alpha_bw >= 0) hw->alpha_bw_ms_per_token = alpha_bw;
  if (alpha_flop >= 0) hw->alpha_flop_ms_per_token2 = alpha_flop;
  if (rdma_gbps >= 0) hw->rdma_gb_per_s = rdma_gbps;
  if (l_cross >= 0) hw->l_cross_tokens = static_cast<uint32_t>(l_cross);
  if (transfer_latency_ms >= 0) hw->transfer_latency_ms = transfer_latency_ms;
  if (mfu >= 0) {
    if (mfu == 0 || mfu > 1) return absl::InvalidArgumentError("--mfu must be in (0, 1]");
    hw->mfu = mfu;
  }
  if (kv_bytes_per_token >= 0) {
    if (kv_bytes_per_token == 0 || kv_bytes_per_token % 2 != 0) {
      return absl::InvalidArgumentError("--kv-bytes-per-token must be even and > 0 (K and V)");
    }
    model->kv_bytes_per_token_override = static_cast<uint64_t>(kv_bytes_per_token);
  }
  if (hw->rdma_gb_per_s <= 0) return absl::InvalidArgumentError("--rdma-gbps must be > 0");
  if (hw->prefill_nodes == 0) return absl::InvalidArgumentError("--prefill-nodes must be >= 1");
  return CostModel(*model, *hw, *form);
}

}  // namespace kvlearn
