// The decisions an EventLog holds, read through ForEachDecision, for tests
// that compare them with what was journaled.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "server/event_log.h"

namespace kvlearn {

using JournaledDecision =
    std::tuple<uint64_t, uint64_t, std::string>;  // number, event sequence, record

inline std::vector<JournaledDecision> JournaledDecisions(const EventLog& log) {
  std::vector<JournaledDecision> out;
  EXPECT_TRUE(log.ForEachDecision([&](uint64_t n, uint64_t seq, std::string_view r) {
                   out.emplace_back(n, seq, std::string(r));
                   return absl::OkStatus();
                 })
                  .ok());
  return out;
}

}  // namespace kvlearn
