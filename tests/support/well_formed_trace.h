// ExpectWellFormed: a generated trace holds what the generator promised
// (`requests` requests, prompts of at most `max_input` tokens) and everything
// the Mooncake reader checks (times non-decreasing from 0, ceil(input /
// block_size) ids per request, no id twice in a request, every id always
// after the same parent), and reads back equal from its JSONL. For the
// generator tests in tests/datasets/.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "datasets/mooncake_reader.h"
#include "datasets/trace.h"
#include "gtest/gtest.h"
#include "tests/support/same_trace.h"

namespace kvlearn {

inline void ExpectWellFormed(const Trace& trace, uint32_t requests, uint32_t max_input) {
  ASSERT_EQ(trace.requests.size(), requests);
  EXPECT_EQ(trace.requests.front().timestamp_ms, 0);
  constexpr uint64_t kRoot = UINT64_MAX;
  std::unordered_map<uint64_t, uint64_t> parent;
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    const TraceRequest& r = trace.requests[i];
    if (i > 0) {
      ASSERT_LE(trace.requests[i - 1].timestamp_ms, r.timestamp_ms) << i;
    }
    ASSERT_GT(r.input_length, 0u);
    ASSERT_LE(r.input_length, max_input);
    ASSERT_GT(r.output_length, 0u);
    ASSERT_EQ(r.num_blocks, BlocksForTokens(r.input_length, trace.block_size));
    const auto ids = trace.BlocksOf(r);
    std::unordered_set<uint64_t> in_request(ids.begin(), ids.end());
    ASSERT_EQ(in_request.size(), ids.size()) << "id repeated in request " << i;
    for (size_t k = 0; k < ids.size(); ++k) {
      const uint64_t p = k == 0 ? kRoot : ids[k - 1];
      const auto [it, inserted] = parent.emplace(ids[k], p);
      ASSERT_EQ(it->second, p) << "id " << ids[k] << " in request " << i;
    }
  }
  const std::filesystem::path path = std::filesystem::path(::testing::TempDir()) /
                                     ("kvlearn_generated_" + std::to_string(getpid()) + ".jsonl");
  ASSERT_TRUE(WriteMooncakeTrace(trace, path.string()).ok());
  TraceReadOptions read_options;
  read_options.block_size = trace.block_size;
  const absl::StatusOr<Trace> read = ReadMooncakeTrace(path.string(), read_options);
  std::filesystem::remove(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(SameTrace(trace, *read));
}

}  // namespace kvlearn
