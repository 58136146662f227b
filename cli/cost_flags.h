// The cost-model flags shared by every command that replays a trace
// (compare, train, serve, loadgen): the cost model's form, profile names and
// per-field overrides.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "core/cost_model.h"

namespace kvlearn {

struct CostFlags {
  std::string cost_model = "flops";
  std::string model_profile = "llama3-8b";
  std::string hardware_profile = "a100";
  // "auto" or a count. compare sizes the cluster on "auto" (cli/compare_command.cc);
  // other commands then use the hardware profile's count.
  std::string prefill_nodes = "auto";
  // Overrides of profile fields; negative = keep the profile's value.
  double alpha_bw = -1, alpha_flop = -1, rdma_gbps = -1, mfu = -1, transfer_latency_ms = -1;
  int64_t l_cross = -1, kv_bytes_per_token = -1;

  void Register(CLI::App* cmd);
  // The cost model; with --prefill-nodes auto its hardware's prefill_nodes is
  // the profile's count.
  absl::StatusOr<CostModel> Resolve() const;
  // The --prefill-nodes count, or nullopt for "auto". Fails on anything else.
  absl::StatusOr<std::optional<uint32_t>> PrefillNodes() const;
};

}  // namespace kvlearn
