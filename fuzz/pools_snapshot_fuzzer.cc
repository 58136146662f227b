// Fuzzes a restart from a snapshot: the input is a policy selector and the
// bytes the event log would hold as the latest snapshot.
//
//   byte 0     policy the sidecar runs: lru, learned, lfu, fifo, gdsf,
//              s3fifo, sieve, arc, kvlearn-cars, learned-model
//              (mod 10)
//   the rest   a snapshot (server/pools_snapshot.h), decoded, and if it
//              decodes, restored into fresh NodePools (RestoreAll: every
//              pool's image, then each policy loads its saved state or
//              restarts from the residents)
//
// Then every restored pool is asked to free a MiB. Whatever the bytes,
// nothing may crash; a decode or restore error must say what is wrong; the
// counters /metrics reads must equal the pools' own totals; and a victim
// list must add up to the bytes it says it frees. The seeds (seed_writer)
// are real snapshots of a few requests under each policy.
#include <google/protobuf/stubs/logging.h>

#include <cstdint>
#include <iterator>
#include <string_view>

#include "fuzz_support.h"
#include "server/node_pools.h"
#include "server/pools_snapshot.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using kvlearn::fuzz::Check;
  if (size < 1) return 0;
  const auto snapshot = kvlearn::DecodePoolsSnapshot(
      std::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
  if (!snapshot.ok()) {
    Check(!snapshot.status().message().empty());
    return 0;
  }
  kvlearn::NodePools pools(kvlearn::fuzz::Options(
      kvlearn::fuzz::kOnlinePolicies[data[0] % std::size(kvlearn::fuzz::kOnlinePolicies)]));
  const absl::Status restored = pools.RestoreAll(*snapshot);
  if (!restored.ok()) {
    Check(!restored.message().empty());
    return 0;
  }
  kvlearn::fuzz::CheckCounters(pools);
  for (const auto& pool : snapshot->pools) {
    kvlearn::v1::RankRequest request;
    request.set_node_id(pool.node);
    request.set_tier(pool.tier);
    request.set_bytes_to_free(1 << 20);
    auto response = pools.RankEviction(request);
    if (response.ok()) kvlearn::fuzz::CheckVictimsAddUp(*response);
  }
  kvlearn::fuzz::CheckCounters(pools);
  return 0;
}
