// Fuzzes the engine-event decoder (engine/kv_event_decoder.h) with arbitrary
// bytes as one msgpack payload of a vLLM / SGLang KV event stream. It must
// return a batch or a status (INVALID_ARGUMENT or RESOURCE_EXHAUSTED, with a
// message), never crash, and:
//  - tighter limits (max_depth, max_payload_bytes) only ever refuse: what
//    still decodes under them is the same batch;
//  - a batch it returns survives re-encoding: EncodeKvEventBatch in both
//    forms and both hash types decodes back to it, but for what a form
//    cannot carry (group_idx in the array form; unknown events are dropped).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <variant>

#include "engine/kv_event_decoder.h"
#include "engine/kv_event_encoder.h"

namespace {

using kvlearn::EngineEventBatch;

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "kv_event_decoder_fuzzer: %s\n", what);
    std::abort();
  }
}

// operator== on batches, with NaN timestamps equal to each other.
bool SameBatch(EngineEventBatch a, EngineEventBatch b) {
  if (std::isnan(a.ts) && std::isnan(b.ts)) a.ts = b.ts = 0;
  return a == b;
}

// What `batch` decodes to after encoding in `encoding`.
EngineEventBatch AfterRoundTrip(EngineEventBatch batch, kvlearn::KvEventEncoding encoding) {
  batch.unknown_events = 0;
  if (encoding == kvlearn::KvEventEncoding::kArray) {
    for (auto& event : batch.events) {
      std::visit(
          [](auto& e) {
            if constexpr (requires { e.group_idx; }) e.group_idx.reset();
          },
          event);
    }
  }
  return batch;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> payload(data, size);
  const auto decoded = kvlearn::DecodeKvEventBatch(payload);

  // A depth limit from the input itself (0..7), the payload exactly at the
  // size limit.
  kvlearn::KvEventDecodeOptions tight;
  tight.max_depth = size > 0 ? data[size - 1] % 8 : 0;
  tight.max_payload_bytes = size;
  const auto under_tight = kvlearn::DecodeKvEventBatch(payload, tight);

  if (!decoded.ok()) {
    Check(decoded.status().code() == absl::StatusCode::kInvalidArgument ||
              decoded.status().code() == absl::StatusCode::kResourceExhausted,
          "a refusal that is neither INVALID_ARGUMENT nor RESOURCE_EXHAUSTED");
    Check(!decoded.status().message().empty(), "a refusal without a message");
    Check(!under_tight.ok(), "tighter limits accepted what the defaults refused");
    return 0;
  }
  if (under_tight.ok()) {
    Check(SameBatch(*under_tight, *decoded), "tighter limits changed the decoded batch");
  }

  for (const auto encoding : {kvlearn::KvEventEncoding::kArray, kvlearn::KvEventEncoding::kMap}) {
    for (const auto hashes : {kvlearn::KvHashEncoding::kInt, kvlearn::KvHashEncoding::kBytes}) {
      const std::string bytes = kvlearn::EncodeKvEventBatch(*decoded, {encoding, hashes});
      const auto again = kvlearn::DecodeKvEventBatch(bytes);
      Check(again.ok(), "the encoder wrote a batch the decoder refuses");
      Check(SameBatch(*again, AfterRoundTrip(*decoded, encoding)),
            "encode then decode changed the batch");
    }
  }
  return 0;
}
