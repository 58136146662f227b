// Reads and writes traces in Mooncake's JSONL format: one request per line,
//   {"timestamp": <ms>, "input_length": <tokens>, "output_length": <tokens>,
//    "hash_ids": [<block id>, ...]}
// Every line is validated; the first bad line is reported as
// "<file>:<line>: field '<name>': <what is wrong>". With `lenient`, bad lines
// are skipped and counted in Trace::skipped_lines instead.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "datasets/trace.h"

namespace kvlearn {

struct TraceReadOptions {
  uint32_t block_size =
      512;               // tokens per block; hash_ids must hold ceil(input_length / block_size)
  bool lenient = false;  // skip and count bad lines instead of failing
};

absl::StatusOr<Trace> ReadMooncakeTrace(const std::string& path, const TraceReadOptions& options);

// Parses JSONL held in memory; `source` names it in error messages.
absl::StatusOr<Trace> ParseMooncakeTrace(std::string_view jsonl, std::string_view source,
                                         const TraceReadOptions& options);

absl::Status WriteMooncakeTrace(const Trace& trace, const std::string& path);

}  // namespace kvlearn
