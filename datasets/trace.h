// A request trace held in memory: arrival time, prompt and output lengths, and
// each prompt's chain of block ids (Mooncake "hash_ids"). Block i's id stands
// for the whole prefix 0..i, so two requests share a prefix exactly when their
// leading ids match.
//
// Ids of all requests are stored back to back in one vector so replay loops
// walk contiguous memory. A Trace is immutable once built; share it freely
// between threads.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/fnv1a.h"
#include "core/request_type.h"

namespace kvlearn {

struct TraceRequest {
  int64_t timestamp_ms = 0;    // arrival, milliseconds from trace start
  uint32_t input_length = 0;   // prompt tokens
  uint32_t output_length = 0;  // generated tokens
  uint32_t first_block = 0;    // offset of this request's ids in Trace::hash_ids
  uint32_t num_blocks = 0;
  uint32_t line = 0;  // 1-based line in the source file (0 when generated)
  RequestType type = RequestType::kUnknown;
  uint16_t turn = 0;  // conversation turn, 1 for the first (0: not known)
  // Bailian's conversation ids (-1: none, as in Mooncake's format): a later
  // turn names the request it follows as its parent.
  int64_t chat_id = -1;
  int64_t parent_chat_id = -1;
};

struct Trace {
  std::string source;         // file name or generator description
  uint32_t block_size = 512;  // tokens per block
  std::vector<TraceRequest> requests;
  std::vector<uint64_t> hash_ids;
  uint64_t skipped_lines = 0;  // bad lines skipped in lenient mode

  std::span<const uint64_t> BlocksOf(const TraceRequest& r) const {
    return {hash_ids.data() + r.first_block, r.num_blocks};
  }
  // Tokens held by block `i` of request `r`: full blocks hold block_size,
  // the last one holds the remainder.
  uint32_t TokensOfBlock(const TraceRequest& r, uint32_t i) const {
    const uint64_t start = uint64_t{i} * block_size;
    if (start >= r.input_length) return 0;
    const uint64_t left = r.input_length - start;
    return left < block_size ? static_cast<uint32_t>(left) : block_size;
  }
  // FNV-1a over arrival times, lengths and ids: names the traffic a model was
  // trained on.
  uint64_t Fingerprint() const {
    Fnv1a h;
    for (const TraceRequest& r : requests) {
      h.Word(static_cast<uint64_t>(r.timestamp_ms));
      h.Word(r.input_length);
      for (const uint64_t id : BlocksOf(r)) h.Word(id);
    }
    return h.value();
  }
  // Appends a request; `ids` are copied.
  void Add(int64_t timestamp_ms, uint32_t input_length, uint32_t output_length,
           std::span<const uint64_t> ids, uint32_t line = 0) {
    TraceRequest r;
    r.timestamp_ms = timestamp_ms;
    r.input_length = input_length;
    r.output_length = output_length;
    r.first_block = static_cast<uint32_t>(hash_ids.size());
    r.num_blocks = static_cast<uint32_t>(ids.size());
    r.line = line;
    hash_ids.insert(hash_ids.end(), ids.begin(), ids.end());
    requests.push_back(r);
  }
};

// Number of blocks a prompt of `input_length` tokens occupies.
inline uint32_t BlocksForTokens(uint32_t input_length, uint32_t block_size) {
  return static_cast<uint32_t>((uint64_t{input_length} + block_size - 1) / block_size);
}

}  // namespace kvlearn
