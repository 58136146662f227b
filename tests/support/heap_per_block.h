// Heap bytes a sidecar pool spends per tracked block, measured the one way
// both bench/serve_memory (part 1) and tests/server/heap_per_block_test use:
// one NodePools in this process fed a million distinct ids as chains of 16
// (a request_arrival of the chain, a block_stored of its first block, and a
// block_removed of the oldest stored once `resident` are stored), with a
// ghost bound above that so nothing is forgotten; the growth of the heap in
// use divided by the blocks tracked. learned runs the tests' small model.
//
// The heap in use is glibc's (mallinfo2): under a sanitizer's allocator it
// reads nothing meaningful, so callers skip there. Not thread-safe.
#pragma once

#include <malloc.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "kvlearn/v1/retention.pb.h"
#include "server/node_pools.h"
#include "tests/support/test_model.h"

namespace kvlearn {

inline constexpr uint64_t kMemoryChainBlocks = 16;
inline constexpr int64_t kMemoryBlockBytes = 512 * 131072;  // llama3-8b, 512 tokens

// Appends the events for chain `c` (ids c*16+1 .. c*16+16) to `batch`, for
// node "mem" in `tier`.
inline void AddMemoryChain(v1::EventBatch& batch, uint64_t c, uint64_t resident,
                           v1::Tier tier = v1::TIER_POOL) {
  const uint64_t first = c * kMemoryChainBlocks + 1;
  const auto add = [&] {
    v1::Event* e = batch.add_events();
    e->set_node_id("mem");
    e->set_tier(tier);
    e->set_timestamp_us(static_cast<int64_t>(c) * 1000);
    return e;
  };
  v1::Event* a = add();
  for (uint64_t i = 0; i < kMemoryChainBlocks; ++i) {
    a->mutable_request_arrival()->add_block_ids(first + i);
  }
  auto* st = add()->mutable_block_stored();
  st->set_block_id(first);
  st->set_tokens(512);
  st->set_bytes(kMemoryBlockBytes);
  if (c >= resident) {
    add()->mutable_block_removed()->set_block_id((c - resident) * kMemoryChainBlocks + 1);
  }
}

// Bytes malloc has handed out: arena chunks in use plus mmapped blocks (big
// vectors and hash tables are mmapped, which uordblks alone misses).
inline size_t HeapInUse() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

struct HeapPerBlock {
  uint64_t blocks_tracked = 0;
  double bytes_per_block = 0;
};

// The blocks one pool of `policy` in `tier` tracks after `ids` distinct ids,
// nothing forgotten, and the heap's growth per tracked block. Fails if the
// sidecar refuses an event.
inline absl::StatusOr<HeapPerBlock> MeasureHeapPerBlock(const std::string& policy, v1::Tier tier,
                                                        uint64_t ids = 1'000'000) {
  const size_t before = HeapInUse();
  NodePoolsOptions o;
  o.policy = policy;
  o.cost =
      std::make_shared<CostModel>(*FindModelProfile("llama3-8b"), *FindHardwareProfile("a100"));
  o.ghost_blocks = uint64_t{1} << 30;
  if (policy == "learned") o.model = MakeTestModel();
  NodePools pools(o);
  for (uint64_t c = 0; c < ids / kMemoryChainBlocks; ++c) {
    v1::EventBatch batch;
    AddMemoryChain(batch, c, 16'384, tier);
    for (const auto& e : batch.events()) {
      if (absl::Status st = pools.Apply(e); !st.ok()) return st;
    }
  }
  HeapPerBlock out;
  out.blocks_tracked = pools.counters().blocks_tracked.load();
  out.bytes_per_block = static_cast<double>(HeapInUse() - before) /
                        static_cast<double>(std::max<uint64_t>(1, out.blocks_tracked));
  return out;
}

}  // namespace kvlearn
