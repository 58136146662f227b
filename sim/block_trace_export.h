// Writes a replay's block accesses in libCacheSim's oracleGeneral binary
// format, so its `cachesim` can replay the same stream a kvlearn pool replay
// serves (scripts/compare_cachesim.sh, docs/performance.md): one record per
// block of each request, root first, requests in trace order.
//
// A record is 24 little-endian bytes, packed: uint32 time in seconds (the
// request's arrival, truncated), uint64 object id (the block's dense index in
// the replay's catalog), uint32 size (the block's KV bytes), int64 the
// position of the block's next access in the stream (-1: none), which
// libCacheSim's offline policies read.
#pragma once

#include <ostream>

#include "absl/status/status.h"
#include "sim/replay_trace.h"

namespace kvlearn {

inline constexpr size_t kOracleGeneralRecordBytes = 24;

// Fails when a block's bytes do not fit the format's 32-bit size.
absl::Status WriteOracleGeneral(const ReplayTrace& replay, std::ostream& out);

}  // namespace kvlearn
