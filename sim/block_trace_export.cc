#include "sim/block_trace_export.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kvlearn {

absl::Status WriteOracleGeneral(const ReplayTrace& replay, std::ostream& out) {
  const std::vector<BlockIndex>& blocks = replay.blocks;
  // Next access of the same block, by a backward pass over the stream.
  std::vector<int64_t> next_access(blocks.size(), -1);
  std::vector<int64_t> seen_at(replay.catalog.size(), -1);
  for (size_t i = blocks.size(); i-- > 0;) {
    next_access[i] = seen_at[blocks[i]];
    seen_at[blocks[i]] = static_cast<int64_t>(i);
  }
  std::vector<char> buffer;
  buffer.reserve(kOracleGeneralRecordBytes * 4096);
  const auto append = [&buffer](const auto& field) {
    const char* p = reinterpret_cast<const char*>(&field);
    buffer.insert(buffer.end(), p, p + sizeof(field));
  };
  for (const TraceRequest& r : replay.trace->requests) {
    const auto seconds = static_cast<uint32_t>(
        std::min<int64_t>(std::max<int64_t>(r.timestamp_ms / 1000, 0), UINT32_MAX));
    for (uint32_t i = r.first_block; i < r.first_block + r.num_blocks; ++i) {
      const BlockMeta& meta = replay.catalog[blocks[i]];
      if (meta.bytes > std::numeric_limits<uint32_t>::max()) {
        return absl::InvalidArgumentError(
            absl::StrCat("block ", meta.hash_id, " holds ", meta.bytes,
                         " bytes: more than oracleGeneral's 32-bit size"));
      }
      append(seconds);
      append(static_cast<uint64_t>(blocks[i]));
      append(static_cast<uint32_t>(meta.bytes));
      append(next_access[i]);
    }
    if (buffer.size() >= kOracleGeneralRecordBytes * 4000) {
      out.write(buffer.data(), static_cast<std::streamsize>(buffer.size()));
      buffer.clear();
    }
  }
  out.write(buffer.data(), static_cast<std::streamsize>(buffer.size()));
  return out ? absl::OkStatus() : absl::UnavailableError("cannot write the block trace");
}

}  // namespace kvlearn
