// The KV cache events a serving engine (vLLM, SGLang) publishes about its
// prefix cache, as plain C++ values: a block chain was stored, blocks were
// removed, everything was cleared. One EngineEventBatch is one ZMQ message of
// the engine's event stream (docs/engine_events.md has the wire format).
//
// Block hashes are uint64: integer hashes are taken as they are (negative
// ones as their two's-complement bit pattern), byte-string hashes by their
// last 8 bytes read big-endian, which is the integer vLLM itself sends for the
// same block when VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES is set
// (int.from_bytes(hash, "big") & (2**64 - 1)). See HashFromBytes.
//
// These are values: copy and share them freely between threads.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace kvlearn {

// Where the engine holds the blocks of an event (vLLM's `medium` string).
enum class KvMedium : uint8_t {
  kUnspecified,  // null or absent; every version read sends it for its GPU prefix cache
  kGpu,          // "GPU" (also "HBM")
  kCpu,          // "CPU" (also "DRAM"): vLLM's CPU offloading
  kDisk,         // "DISK", "STORAGE", "SSD": a storage tier behind the engine
  kOther,        // any other string; kept in the event's medium_name
};

// "unspecified", "gpu", "cpu", "disk", "other".
std::string_view KvMediumName(KvMedium medium);

// Case-insensitive: GPU/HBM, CPU/DRAM, DISK/STORAGE/SSD; anything else is kOther.
KvMedium ParseKvMedium(std::string_view name);

// The engine now holds `block_hashes`, a chain root to leaf: block i's parent
// is block i-1, and block 0's parent is `parent_block_hash` (none for the
// first block of a prompt).
struct BlockStoredEvent {
  std::vector<uint64_t> block_hashes;
  std::optional<uint64_t> parent_block_hash;
  uint32_t block_size = 0;        // tokens per full block, as sent (0 if the engine sent 0)
  uint32_t num_token_ids = 0;     // length of token_ids (the tokens of all the blocks)
  uint32_t tokens_per_block = 0;  // block_size, or num_token_ids / blocks when block_size is 0
  KvMedium medium = KvMedium::kUnspecified;
  std::string medium_name;           // the string sent, only for kOther
  std::optional<int64_t> group_idx;  // KV cache group (hybrid models); absent = the only one
  std::optional<int64_t> lora_id;    // deprecated in vLLM but still sent

  bool operator==(const BlockStoredEvent&) const = default;
};

// The engine dropped `block_hashes` (leaves: their descendants went first).
struct BlockRemovedEvent {
  std::vector<uint64_t> block_hashes;
  KvMedium medium = KvMedium::kUnspecified;
  std::string medium_name;  // only for kOther
  std::optional<int64_t> group_idx;

  bool operator==(const BlockRemovedEvent&) const = default;
};

// The engine dropped every block (prefix cache reset). No version read sends a
// medium with it: kUnspecified means "every medium of this engine".
struct AllBlocksClearedEvent {
  KvMedium medium = KvMedium::kUnspecified;

  bool operator==(const AllBlocksClearedEvent&) const = default;
};

using EngineEvent = std::variant<BlockStoredEvent, BlockRemovedEvent, AllBlocksClearedEvent>;

// One message of the stream: the events of one engine step, in order.
struct EngineEventBatch {
  double ts = 0;                              // engine wall clock, seconds since the epoch
  std::optional<int64_t> data_parallel_rank;  // vLLM data_parallel_rank / SGLang attn_dp_rank
  std::vector<EngineEvent> events;
  // Events whose tag this decoder does not know (a newer engine): skipped.
  uint32_t unknown_events = 0;
  // Not on the wire: set by EngineSubscriber on the first batch after the
  // engine's sequence numbers started over at 0 (it restarted, so its cache
  // is empty: drop what it held before applying this batch).
  bool engine_restarted = false;

  bool operator==(const EngineEventBatch&) const = default;
};

// A byte-string block hash as uint64: its last 8 bytes, big-endian (all of
// them when shorter). vLLM's own int conversion of the same hash.
inline uint64_t HashFromBytes(std::span<const uint8_t> bytes) {
  uint64_t h = 0;
  const size_t start = bytes.size() > 8 ? bytes.size() - 8 : 0;
  for (size_t i = start; i < bytes.size(); ++i) h = (h << 8) | bytes[i];
  return h;
}

}  // namespace kvlearn
