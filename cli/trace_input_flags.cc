#include "cli/trace_input_flags.h"

namespace kvlearn {

CLI::Option* TraceInputFlags::Register(CLI::App* cmd, const std::string& trace_help) {
  CLI::Option* trace_option = cmd->add_option("--trace", trace, trace_help);
  cmd->add_option("--trace-format", format,
                  "the trace's shape: mooncake (timestamp in ms), bailian (chat_id, timestamp in "
                  "seconds, type, turn) or auto (a chat_id key on the first line that is not "
                  "blank means bailian)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "mooncake", "bailian"}));
  cmd->add_option("--block-size", block_size,
                  "tokens per block in the trace (default: the format's, 512 for Mooncake's, 16 "
                  "for Bailian's)")
      ->check(CLI::Range(1u, 1u << 20));
  cmd->add_flag("--lenient", lenient, "skip and count bad trace lines instead of failing");
  return trace_option;
}

absl::StatusOr<TraceReadOptions> TraceInputFlags::Resolve() const {
  TraceReadOptions options;
  options.format = TraceFormatFromName(format).value_or(TraceFormat::kAuto);
  options.lenient = lenient;
  if (options.format == TraceFormat::kAuto) {
    auto peeked = PeekTraceFormat(trace);
    if (!peeked.ok()) return peeked.status();
    options.format = *peeked;
  }
  options.block_size = block_size;
  if (block_size == 0 && options.format != TraceFormat::kAuto) {
    options.block_size = DefaultBlockSize(options.format);
  }
  return options;
}

}  // namespace kvlearn
