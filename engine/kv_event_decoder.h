// Decodes one msgpack payload of a vLLM / SGLang KV event stream into an
// EngineEventBatch (engine/kv_event.h).
//
// Accepted forms (docs/engine_events.md says which versions send which):
//   batch: [ts, events, data_parallel_rank?, ...]   or   {"ts", "events", ...}
//   event: ["BlockStored", block_hashes, parent_block_hash, token_ids,
//           block_size, lora_id?, medium?, ...]          (tag first)
//          ["BlockRemoved", block_hashes, medium?, ...]
//          ["AllBlocksCleared", ...]
//      or  {"type": "BlockStored", "block_hashes": ..., ...}  (any key order)
// Batch and events may use different forms (current vLLM sends an array batch
// of map events). Unknown map keys and extra trailing array elements are
// ignored (newer versions append fields); events with an unknown tag are
// skipped and counted in EngineEventBatch::unknown_events. Hashes are integers
// or byte strings (see kv_event.h for the mapping).
//
// Anything else fails the whole batch with INVALID_ARGUMENT and a message that
// names the field, e.g. "events[2].block_hashes[0]: expected an integer or
// bytes, got a string"; a structural problem anywhere in the payload
// (truncated, not msgpack, trailing bytes, nesting past max_depth) is reported
// before any field error.
//
// One pass over the bytes (engine/msgpack_reader.h) reads the fields and
// skips everything else in place, token_ids included: nothing is built per
// token, nothing is allocated but the events and their hash lists. No input
// crashes it; a container that declares more elements than bytes are left is
// refused before anything is reserved for it.
//
// Thread-safety: pure functions; call them from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/kv_event.h"

namespace kvlearn {

struct KvEventDecodeOptions {
  size_t max_payload_bytes = size_t{64} << 20;  // larger payloads: RESOURCE_EXHAUSTED
  // Container nesting. A batch of events with extra_keys tuples needs ~6.
  uint32_t max_depth = 32;
};

absl::StatusOr<EngineEventBatch> DecodeKvEventBatch(std::span<const uint8_t> payload,
                                                    const KvEventDecodeOptions& options = {});

// The same into `batch`, reusing its storage: its events' hash lists keep
// their capacity when the next payload has the same kinds of events in the
// same places. On error `batch` holds no events.
absl::Status DecodeKvEventBatch(std::span<const uint8_t> payload,
                                const KvEventDecodeOptions& options, EngineEventBatch* batch);

inline absl::StatusOr<EngineEventBatch> DecodeKvEventBatch(
    std::string_view payload, const KvEventDecodeOptions& options = {}) {
  return DecodeKvEventBatch(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(payload.data()), payload.size()),
      options);
}

}  // namespace kvlearn
