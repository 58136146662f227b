// Encodes an EngineEventBatch as an engine would put it on the wire, in
// either of the two forms DecodeKvEventBatch reads (docs/engine_events.md):
//
//   kArray: [ts, [["BlockStored", hashes, parent, token_ids, block_size,
//            lora_id, medium], ...], data_parallel_rank?]
//           (SGLang, and vLLM before its events became maps)
//   kMap:   {"ts": ..., "events": [{"type": "BlockStored", ...}, ...],
//            "data_parallel_rank": ...}  (vLLM's map-tagged events)
//
// Hashes go out as integers (kInt: negative for values above INT64_MAX, the
// way Python's signed hashes look) or as 32-byte strings (kBytes: 24 filler
// bytes derived from the hash, then the hash big-endian, so the decoder's
// last-8-bytes rule gives the value back). token_ids carries num_token_ids
// zeros (only its length means anything to a consumer of these events), or,
// with token_vocab set, pseudo-random ids below it: the sizes on the wire of
// a real vocabulary's ids (1, 2, 3 or 5 bytes each), for benchmarks.
//
// Used by the test publisher (engine/engine_publisher.h), tests and the
// decode benchmark. Thread-safety: a pure function.
#pragma once

#include <string>

#include "engine/kv_event.h"

namespace kvlearn {

enum class KvEventEncoding { kArray, kMap };
enum class KvHashEncoding { kInt, kBytes };

struct KvEventEncodeOptions {
  KvEventEncoding encoding = KvEventEncoding::kArray;
  KvHashEncoding hashes = KvHashEncoding::kInt;
  uint32_t token_vocab = 0;  // 0: token ids are zeros; else ids below it (Llama 3: 128256)
};

std::string EncodeKvEventBatch(const EngineEventBatch& batch, const KvEventEncodeOptions& options);

// The 32-byte string kBytes sends for `hash`.
std::string HashToBytes(uint64_t hash);

}  // namespace kvlearn
