// Reads and writes request traces in the two JSONL shapes people hold, one
// request per line:
//   Mooncake  {"timestamp": <ms>, "input_length": <tokens>,
//              "output_length": <tokens>, "hash_ids": [<block id>, ...]}
//   Bailian   {"chat_id": <id>, "parent_chat_id": <id or -1>,
//              "timestamp": <seconds, a float>, "input_length": <tokens>,
//              "output_length": <tokens>, "type": "text|search|image|file",
//              "turn": <n>, "hash_ids": [...]}   (Qwen's Bailian trace, ATC '25)
// The format is named or detected from the first line that is not blank (a
// "chat_id" key means Bailian). Every line is validated; the first bad line is
// reported as "<file>:<line>: field '<name>': <what is wrong>". With
// `lenient`, bad lines are skipped and counted in Trace::skipped_lines instead.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "datasets/trace.h"

namespace kvlearn {

enum class TraceFormat { kAuto, kMooncake, kBailian };

// "auto", "mooncake", "bailian".
const char* TraceFormatName(TraceFormat format);
std::optional<TraceFormat> TraceFormatFromName(std::string_view name);
// Tokens per block when the user names none: 512 (Mooncake), 16 (Bailian).
uint32_t DefaultBlockSize(TraceFormat format);

struct TraceReadOptions {
  TraceFormat format = TraceFormat::kAuto;
  // Tokens per block; hash_ids must hold ceil(input_length / block_size).
  // 0: the format's default.
  uint32_t block_size = 0;
  bool lenient = false;  // skip and count bad lines instead of failing
};

absl::StatusOr<Trace> ReadTrace(const std::string& path, const TraceReadOptions& options);

// Parses JSONL held in memory; `source` names it in error messages.
absl::StatusOr<Trace> ParseTrace(std::string_view jsonl, std::string_view source,
                                 const TraceReadOptions& options);

// The format of a trace's first line that is not blank (Mooncake when there
// is none).
TraceFormat DetectTraceFormat(std::string_view jsonl);

// The format of the trace file at `path`, from its first line that is not
// blank, read before the whole file is: what a command needs to know the
// block size before it reads minutes of trace. kAuto for a stream (a pipe
// cannot be read twice: the reader detects its format as it reads). Fails
// when `path` cannot be opened or read.
absl::StatusOr<TraceFormat> PeekTraceFormat(const std::string& path);

// Writes `trace` as `format` (kAuto writes Mooncake). Bailian lines carry the
// requests' own chat ids, or their index when a request has none.
absl::Status WriteTrace(const Trace& trace, const std::string& path,
                        TraceFormat format = TraceFormat::kMooncake);

// The names the callers used before Bailian was read.
inline absl::StatusOr<Trace> ReadMooncakeTrace(const std::string& path,
                                               const TraceReadOptions& options) {
  return ReadTrace(path, options);
}
inline absl::StatusOr<Trace> ParseMooncakeTrace(std::string_view jsonl, std::string_view source,
                                                const TraceReadOptions& options) {
  return ParseTrace(jsonl, source, options);
}
inline absl::Status WriteMooncakeTrace(const Trace& trace, const std::string& path) {
  return WriteTrace(trace, path, TraceFormat::kMooncake);
}

}  // namespace kvlearn
