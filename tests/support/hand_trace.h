// Traces written by hand for policy tests: every block full (512 tokens of
// Llama-3-8B KV = 64 MiB, so a pool of k blocks is k * HandBlockBytes()),
// block ids are letters and a prompt "ab" is the chain a -> b; request i
// arrives at i seconds.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/pool_state.h"
#include "datasets/trace.h"
#include "gtest/gtest.h"
#include "sim/replay_trace.h"
#include "tests/support/default_cost.h"

namespace kvlearn {

inline constexpr uint32_t kHandBlockSize = 512;

inline uint64_t HandBlockBytes() { return DefaultCost().BytesForTokens(kHandBlockSize); }

struct HandTrace {
  Trace trace;
  ReplayTrace replay;

  BlockIndex Block(char id) const { return replay.catalog.Find(static_cast<uint64_t>(id)); }
  // The letters of the blocks `pool` holds, in alphabetical order.
  std::string Resident(const PoolState& pool) const {
    std::set<char> ids;
    for (BlockIndex b = 0; b < replay.catalog.size(); ++b) {
      if (pool.IsResident(b)) ids.insert(static_cast<char>(replay.catalog[b].hash_id));
    }
    return std::string(ids.begin(), ids.end());
  }
};

inline std::unique_ptr<HandTrace> MakeHandTrace(std::initializer_list<std::string_view> prompts) {
  auto h = std::make_unique<HandTrace>();
  h->trace.source = "hand-worked";
  h->trace.block_size = kHandBlockSize;
  int64_t time_ms = 0;
  for (const std::string_view prompt : prompts) {
    const std::vector<uint64_t> ids(prompt.begin(), prompt.end());
    h->trace.Add(time_ms, static_cast<uint32_t>(ids.size()) * kHandBlockSize, 16, ids);
    time_ms += 1000;
  }
  auto replay = BuildReplayTrace(h->trace, DefaultCost());
  EXPECT_TRUE(replay.ok()) << replay.status();
  if (replay.ok()) h->replay = *std::move(replay);
  return h;
}

}  // namespace kvlearn
