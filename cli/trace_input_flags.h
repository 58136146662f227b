// The trace-input flags shared by every command that reads a trace (compare,
// plan, train, loadgen): the file, its format, its block size and whether bad
// lines are skipped. The format is named or detected from the file's first
// line, and the block size is --block-size's or the format's (512 tokens for
// Mooncake's, 16 for Bailian's), before the trace is read, so a model trained
// on other blocks is refused at once (cli/replay_input.h).
#pragma once

#include <cstdint>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "datasets/mooncake_reader.h"

namespace kvlearn {

struct TraceInputFlags {
  std::string trace;
  std::string format = "auto";
  uint32_t block_size = 0;  // 0: the format's
  bool lenient = false;

  // Registers --trace (described by `trace_help`; returned, so a command can
  // make it required), --trace-format, --block-size and --lenient.
  CLI::Option* Register(CLI::App* cmd, const std::string& trace_help);
  // The read options with the format and block size resolved, the format
  // peeked from the file when it is "auto". A stream cannot be peeked: its
  // format stays auto and its block size 0, and the reader resolves both.
  // Fails when the file cannot be opened.
  absl::StatusOr<TraceReadOptions> Resolve() const;
};

}  // namespace kvlearn
