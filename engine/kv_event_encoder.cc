#include "engine/kv_event_encoder.h"

#include <cstdint>
#include <cstring>
#include <string_view>
#include <variant>

#ifndef MSGPACK_NO_BOOST
#define MSGPACK_NO_BOOST
#endif
#include <msgpack.hpp>

namespace kvlearn {
namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

void PackStr(Packer& p, std::string_view s) {
  p.pack_str(static_cast<uint32_t>(s.size()));
  p.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

// Always float64 (0xcb), as msgspec writes floats; Packer::pack_double would
// write an integral value as an integer.
void PackFloat64(msgpack::sbuffer& buffer, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  char out[9] = {static_cast<char>(0xcb)};
  for (int i = 0; i < 8; ++i) out[8 - i] = static_cast<char>((bits >> (8 * i)) & 0xff);
  buffer.write(out, sizeof out);
}

// splitmix64: fills the leading bytes of a byte-string hash.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void PackHash(Packer& p, uint64_t hash, KvHashEncoding encoding) {
  if (encoding == KvHashEncoding::kBytes) {
    const std::string bytes = HashToBytes(hash);
    p.pack_bin(static_cast<uint32_t>(bytes.size()));
    p.pack_bin_body(bytes.data(), static_cast<uint32_t>(bytes.size()));
  } else if (hash > static_cast<uint64_t>(INT64_MAX)) {
    p.pack_int64(static_cast<int64_t>(hash));
  } else {
    p.pack_uint64(hash);
  }
}

void PackHashes(Packer& p, const std::vector<uint64_t>& hashes, KvHashEncoding encoding) {
  p.pack_array(static_cast<uint32_t>(hashes.size()));
  for (const uint64_t h : hashes) PackHash(p, h, encoding);
}

void PackMedium(Packer& p, KvMedium medium, const std::string& name) {
  switch (medium) {
    case KvMedium::kUnspecified:
      p.pack_nil();
      return;
    case KvMedium::kGpu:
      PackStr(p, "GPU");
      return;
    case KvMedium::kCpu:
      PackStr(p, "CPU");
      return;
    case KvMedium::kDisk:
      PackStr(p, "DISK");
      return;
    case KvMedium::kOther:
      PackStr(p, name);
      return;
  }
}

void PackOptionalInt(Packer& p, const std::optional<int64_t>& v) {
  if (v.has_value()) {
    p.pack_int64(*v);
  } else {
    p.pack_nil();
  }
}

// Zeros, or ids below `vocab` drawn from the hash of the first block, so
// that they take the widths a real vocabulary's ids take on the wire.
void PackTokenIds(Packer& p, uint32_t n, uint32_t vocab, uint64_t seed) {
  p.pack_array(n);
  if (vocab == 0) {
    for (uint32_t i = 0; i < n; ++i) p.pack_fix_uint8(0);
    return;
  }
  for (uint32_t i = 0; i < n; ++i) p.pack_uint32(static_cast<uint32_t>(Mix(seed + i) % vocab));
}

void PackStored(Packer& p, const BlockStoredEvent& e, const KvEventEncodeOptions& o) {
  if (o.encoding == KvEventEncoding::kArray) {
    p.pack_array(7);
    PackStr(p, "BlockStored");
  } else {
    p.pack_map(e.group_idx.has_value() ? 9 : 8);
    PackStr(p, "type");
    PackStr(p, "BlockStored");
  }
  const bool map = o.encoding == KvEventEncoding::kMap;
  if (map) PackStr(p, "block_hashes");
  PackHashes(p, e.block_hashes, o.hashes);
  if (map) PackStr(p, "parent_block_hash");
  if (e.parent_block_hash.has_value()) {
    PackHash(p, *e.parent_block_hash, o.hashes);
  } else {
    p.pack_nil();
  }
  if (map) PackStr(p, "token_ids");
  PackTokenIds(p, e.num_token_ids, o.token_vocab,
               e.block_hashes.empty() ? 0 : e.block_hashes.front());
  if (map) PackStr(p, "block_size");
  p.pack_uint32(e.block_size);
  if (map) PackStr(p, "lora_id");
  PackOptionalInt(p, e.lora_id);
  if (map) PackStr(p, "medium");
  PackMedium(p, e.medium, e.medium_name);
  if (map) {
    PackStr(p, "lora_name");
    p.pack_nil();
    if (e.group_idx.has_value()) {
      PackStr(p, "group_idx");
      p.pack_int64(*e.group_idx);
    }
  }
}

void PackRemoved(Packer& p, const BlockRemovedEvent& e, const KvEventEncodeOptions& o) {
  if (o.encoding == KvEventEncoding::kArray) {
    p.pack_array(3);
    PackStr(p, "BlockRemoved");
    PackHashes(p, e.block_hashes, o.hashes);
    PackMedium(p, e.medium, e.medium_name);
    return;
  }
  p.pack_map(e.group_idx.has_value() ? 4 : 3);
  PackStr(p, "type");
  PackStr(p, "BlockRemoved");
  PackStr(p, "block_hashes");
  PackHashes(p, e.block_hashes, o.hashes);
  PackStr(p, "medium");
  PackMedium(p, e.medium, e.medium_name);
  if (e.group_idx.has_value()) {
    PackStr(p, "group_idx");
    p.pack_int64(*e.group_idx);
  }
}

void PackCleared(Packer& p, const KvEventEncodeOptions& o) {
  if (o.encoding == KvEventEncoding::kArray) {
    p.pack_array(1);
  } else {
    p.pack_map(1);
    PackStr(p, "type");
  }
  PackStr(p, "AllBlocksCleared");
}

}  // namespace

std::string HashToBytes(uint64_t hash) {
  std::string bytes(32, '\0');
  for (int word = 0; word < 3; ++word) {
    uint64_t filler = Mix(hash + static_cast<uint64_t>(word));
    for (int i = 0; i < 8; ++i, filler >>= 8) bytes[word * 8 + i] = static_cast<char>(filler);
  }
  for (int i = 0; i < 8; ++i) bytes[31 - i] = static_cast<char>((hash >> (8 * i)) & 0xff);
  return bytes;
}

std::string EncodeKvEventBatch(const EngineEventBatch& batch, const KvEventEncodeOptions& options) {
  msgpack::sbuffer buffer;
  Packer p(buffer);
  const bool map = options.encoding == KvEventEncoding::kMap;
  const uint32_t fields = batch.data_parallel_rank.has_value() ? 3 : 2;
  if (map) {
    p.pack_map(fields);
    PackStr(p, "ts");
  } else {
    p.pack_array(fields);
  }
  PackFloat64(buffer, batch.ts);
  if (map) PackStr(p, "events");
  p.pack_array(static_cast<uint32_t>(batch.events.size()));
  for (const EngineEvent& event : batch.events) {
    if (const auto* stored = std::get_if<BlockStoredEvent>(&event)) {
      PackStored(p, *stored, options);
    } else if (const auto* removed = std::get_if<BlockRemovedEvent>(&event)) {
      PackRemoved(p, *removed, options);
    } else {
      PackCleared(p, options);
    }
  }
  if (batch.data_parallel_rank.has_value()) {
    if (map) PackStr(p, "data_parallel_rank");
    p.pack_int64(*batch.data_parallel_rank);
  }
  return std::string(buffer.data(), buffer.size());
}

}  // namespace kvlearn
