// Fuzzes the trace reader (datasets/mooncake_reader.h: Mooncake's and
// Bailian's JSONL) with arbitrary bytes: it must return a trace or a status,
// never crash, and a trace it returns must be consistent (every request's ids
// inside hash_ids, ceil(input_length / block_size) of them, arrivals in
// order; block size 0 reads at the detected format's default).
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "datasets/mooncake_reader.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

void ParseAndCheck(std::string_view text, uint32_t block_size, bool lenient) {
  kvlearn::TraceReadOptions options;
  options.block_size = block_size;
  options.lenient = lenient;
  auto trace = kvlearn::ParseTrace(text, "fuzz", options);
  if (!trace.ok()) {
    Check(!trace.status().message().empty());
    return;
  }
  if (block_size == 0) block_size = kvlearn::DefaultBlockSize(kvlearn::DetectTraceFormat(text));
  Check(trace->block_size == block_size);
  uint64_t ids = 0;
  int64_t last = 0;
  for (const auto& r : trace->requests) {
    Check(uint64_t{r.first_block} + r.num_blocks <= trace->hash_ids.size());
    Check(r.num_blocks == (uint64_t{r.input_length} + block_size - 1) / block_size);
    Check(r.timestamp_ms >= last);
    last = r.timestamp_ms;
    ids += r.num_blocks;
  }
  Check(ids == trace->hash_ids.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  ParseAndCheck(text, 512, false);
  ParseAndCheck(text, 512, true);
  ParseAndCheck(text, 16, true);
  ParseAndCheck(text, 0, true);
  return 0;
}
