#include "server/bound_metrics.h"

#include "absl/strings/str_cat.h"

namespace kvlearn {
namespace {

void Series(std::string& out, const char* name, const char* type, const char* help,
            uint64_t value) {
  absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n", name, " ",
                  value, "\n");
}

uint64_t Load(const std::atomic<uint64_t>& v) { return v.load(std::memory_order_relaxed); }

}  // namespace

std::string RenderBoundMetrics(const PoolCounters& pools) {
  std::string out;
  Series(out, "kvlearn_removed_descendants_total", "counter",
         "Blocks that left a pool because the node removed one of their ancestors (a block "
         "without its prefix is unreachable), start-up replay included.",
         Load(pools.removed_descendants));
  return out;
}

}  // namespace kvlearn
