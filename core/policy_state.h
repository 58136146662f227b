// The bytes a policy saves of its own state (RetentionPolicy::SaveState) and
// reads back (LoadState): what it learned beyond the pool's resident set, so
// that a sidecar restarted from a snapshot, or a pool rebuilt by a compaction,
// decides exactly as one that never stopped (server/shard_image.h). In core
// because the parts policies are built from save into it too (features'
// AccessHistory).
//
// Encoding: base-128 varints for counts, block numbers and integers (zigzag
// for signed ones), IEEE-754 bit patterns for doubles and floats (exact, so a
// reloaded score compares equal). A policy writes and reads its fields in the
// same order; the format has no tags, its version is the snapshot's.
//
// Reading never trusts the bytes: every read checks there is enough left,
// every block number is checked against the catalog, and a count is refused
// when the bytes left could not hold that many items, so a damaged length
// never allocates more than the input's size. The first failure is kept and
// every later read returns 0; status() is DATA_LOSS naming what was being
// read. Not thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/block_catalog.h"
#include "core/pool_state.h"

namespace kvlearn {

class PolicyStateWriter {
 public:
  void Varint(uint64_t n);
  void Signed(int64_t n) {
    Varint((static_cast<uint64_t>(n) << 1) ^ static_cast<uint64_t>(n >> 63));
  }
  void Bool(bool b) { Varint(b ? 1 : 0); }
  void Double(double d);
  void Float(float f);
  // Each value as Float, no length (the reader knows how many).
  void Floats(std::span<const float> v) {
    for (float f : v) Float(f);
  }
  void Bytes(std::string_view s) {
    Varint(s.size());
    out_.append(s);
  }
  const std::string& bytes() const { return out_; }
  std::string Take() { return std::move(out_); }

 private:
  template <typename Bits, typename Value>
  void Fixed(Value v);

  std::string out_;
};

class PolicyStateReader {
 public:
  // `blocks`: the catalog's size; Block() refuses numbers at or above it.
  // Keeps a view of `in`: the bytes must outlive the reader.
  PolicyStateReader(std::string_view in, size_t blocks) : in_(in), blocks_(blocks) {}

  bool ok() const { return error_.empty(); }
  size_t blocks() const { return blocks_; }
  // OK, or DATA_LOSS "policy state: <what went wrong>".
  absl::Status status() const;
  // status(), and DATA_LOSS if bytes are left over.
  absl::Status Finish();
  // Records a failure found by the policy itself (a value out of range).
  void Fail(std::string_view what);

  uint64_t Varint(std::string_view what);
  int64_t Signed(std::string_view what) {
    const uint64_t z = Varint(what);
    return static_cast<int64_t>(z >> 1) ^ -static_cast<int64_t>(z & 1);
  }
  bool Bool(std::string_view what);
  double Double(std::string_view what);
  float Float(std::string_view what);
  // out.size() floats written by PolicyStateWriter::Floats.
  void Floats(std::string_view what, std::span<float> out) {
    for (float& f : out) f = Float(what);
  }
  std::string Bytes(std::string_view what);
  // A varint no larger than `max`.
  uint64_t Bounded(std::string_view what, uint64_t max);
  // A block number below blocks().
  BlockIndex Block(std::string_view what);
  // How many items follow, each at least `min_item_bytes` long: refused if
  // the bytes left cannot hold them.
  uint64_t Count(std::string_view what, size_t min_item_bytes = 1);

 private:
  template <typename Value, typename Bits>
  Value Fixed(std::string_view what, std::string_view kind);

  std::string_view in_;
  size_t blocks_;
  std::string error_;
};

// The new number of old block b under `renumber` (server/shard_image.h:
// kNoBlock when a compaction forgets b, or b is past the table).
inline BlockIndex Renumbered(std::span<const BlockIndex> renumber, BlockIndex b) {
  return b < renumber.size() ? renumber[b] : kNoBlock;
}

// A request's chain (root first) as a count and its blocks, renumbered, up
// to its first block a compaction forgets: a compaction keeps every kept
// block's ancestors, so that prefix is what is left of the chain, and it
// still runs from a root.
inline void SaveKeptChain(std::span<const BlockIndex> renumber, std::span<const BlockIndex> chain,
                          PolicyStateWriter& out) {
  size_t n = 0;
  while (n < chain.size() && Renumbered(renumber, chain[n]) != kNoBlock) ++n;
  out.Varint(n);
  for (size_t i = 0; i < n; ++i) out.Varint(Renumbered(renumber, chain[i]));
}

// A block that may be none (kNoBlock) or forgotten, as a varint: 0 for
// either, else its new number + 1; OptionalBlock reads it back.
inline uint64_t OptionalBlock(std::span<const BlockIndex> renumber, BlockIndex b) {
  const BlockIndex to = Renumbered(renumber, b);
  return to == kNoBlock ? 0 : uint64_t{to} + 1;
}
inline BlockIndex OptionalBlock(PolicyStateReader& in, std::string_view what) {
  const uint64_t v = in.Bounded(what, in.blocks());
  return v == 0 ? kNoBlock : static_cast<BlockIndex>(v - 1);
}

// Reads a block that must be resident in `pool` and not read before (marked
// in `seen`, sized to the catalog); fails the reader otherwise.
BlockIndex ReadResident(PolicyStateReader& in, const PoolState& pool, std::vector<uint8_t>& seen,
                        std::string_view what);
// Reads the count of a list that must hold each resident block once.
uint64_t ReadResidentCount(PolicyStateReader& in, const PoolState& pool, std::string_view what,
                           size_t min_item_bytes = 1);

}  // namespace kvlearn
