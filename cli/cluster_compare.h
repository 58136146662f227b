// `kvlearn compare --cluster`: the cluster path of the compare command
// (sim/cluster_simulator.h). compare_command.cc registers these flags next to
// its own and hands over the flags the two paths share.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "cli/cost_flags.h"
#include "cli/trace_input_flags.h"
#include "sim/router.h"

namespace kvlearn {

struct ClusterCompareFlags {
  bool enabled = false;  // --cluster
  std::string routers = "round-robin,least-load,cache-aware,cache-aware-approx,burst-replicate";
  uint32_t decode_nodes = 1;
  double hbm_gb = -1;                  // per node; negative = the hardware profile's
  double dram_gb = -1;                 // per node; negative = the profile's; 0 = no DRAM tier
  uint32_t burst_arrivals = 2;         // X
  double burst_window_s = 1.0;         // Z
  uint32_t burst_prefix_blocks = 128;  // Y
  uint32_t replicate_targets = 4;      // M
  double cache_threshold = 0.3;
  uint32_t balance_abs_threshold = 64;
  double balance_rel_threshold = 1.5;
  uint64_t router_tree_tokens = CacheAwareOptions{}.max_tree_tokens;
  double router_eviction_interval_s = CacheAwareOptions{}.eviction_interval_s;
  std::string ttft_samples;  // file for per-request TTFTs
};

// What compare's own flags say, for the cluster path.
struct SharedCompareFlags {
  TraceInputFlags input;
  std::string policies;
  double pool_fraction = 0;
  uint64_t pool_bytes = 0;
  CostFlags cost;
  std::string model;
  double eval_from = 0;
  std::string format;
  std::string out;
  double transfer_weight = 1;
};

std::shared_ptr<ClusterCompareFlags> AddClusterCompareFlags(CLI::App* cmd);
int RunClusterCompare(const ClusterCompareFlags& cluster, const SharedCompareFlags& shared);

}  // namespace kvlearn
