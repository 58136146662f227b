#include "core/policy_state.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/varint.h"

namespace kvlearn {

void PolicyStateWriter::Varint(uint64_t n) { PutVarint(out_, n); }

// Writes v's bits little-endian, whatever the host's byte order.
template <typename Bits, typename Value>
void PolicyStateWriter::Fixed(Value v) {
  static_assert(sizeof(Value) == sizeof(Bits));
  Bits bits;
  std::memcpy(&bits, &v, sizeof bits);
  for (size_t i = 0; i < sizeof(Bits); ++i) out_.push_back(static_cast<char>(bits >> (8 * i)));
}

void PolicyStateWriter::Double(double d) { Fixed<uint64_t>(d); }
void PolicyStateWriter::Float(float f) { Fixed<uint32_t>(f); }

absl::Status PolicyStateReader::status() const {
  if (ok()) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat("policy state: ", error_));
}

absl::Status PolicyStateReader::Finish() {
  if (ok() && !in_.empty()) Fail(absl::StrCat(in_.size(), " trailing bytes"));
  return status();
}

void PolicyStateReader::Fail(std::string_view what) {
  if (ok()) error_ = std::string(what);
}

uint64_t PolicyStateReader::Varint(std::string_view what) {
  if (!ok()) return 0;
  uint64_t n = 0;
  if (GetVarint(in_, n)) return n;
  Fail(absl::StrCat(std::string(what), ": truncated or malformed varint"));
  return 0;
}

bool PolicyStateReader::Bool(std::string_view what) { return Bounded(what, 1) != 0; }

// Reads a Value from its bits, little-endian (what Fixed wrote); 0 and
// Fail when fewer bytes are left.
template <typename Value, typename Bits>
Value PolicyStateReader::Fixed(std::string_view what, std::string_view kind) {
  static_assert(sizeof(Value) == sizeof(Bits));
  if (!ok()) return 0;
  if (in_.size() < sizeof(Bits)) {
    Fail(absl::StrCat(std::string(what), ": truncated ", std::string(kind)));
    return 0;
  }
  Bits bits = 0;
  for (size_t i = 0; i < sizeof(Bits); ++i) {
    bits |= Bits{static_cast<unsigned char>(in_[i])} << (8 * i);
  }
  in_.remove_prefix(sizeof(Bits));
  Value v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

double PolicyStateReader::Double(std::string_view what) {
  return Fixed<double, uint64_t>(what, "double");
}

float PolicyStateReader::Float(std::string_view what) {
  return Fixed<float, uint32_t>(what, "float");
}

std::string PolicyStateReader::Bytes(std::string_view what) {
  const uint64_t n = Count(what);
  if (!ok()) return {};
  std::string s(in_.substr(0, n));
  in_.remove_prefix(n);
  return s;
}

uint64_t PolicyStateReader::Bounded(std::string_view what, uint64_t max) {
  const uint64_t n = Varint(what);
  if (ok() && n > max) Fail(absl::StrCat(std::string(what), ": ", n, " is above ", max));
  return ok() ? n : 0;
}

BlockIndex PolicyStateReader::Block(std::string_view what) {
  const uint64_t b = Varint(what);
  if (ok() && b >= blocks_) Fail(absl::StrCat(std::string(what), ": block ", b, " of ", blocks_));
  return ok() ? static_cast<BlockIndex>(b) : 0;
}

uint64_t PolicyStateReader::Count(std::string_view what, size_t min_item_bytes) {
  const uint64_t n = Varint(what);
  if (ok() && n > in_.size() / std::max<size_t>(min_item_bytes, 1)) {
    Fail(absl::StrCat(std::string(what), ": ", n, " items in ", in_.size(), " bytes"));
  }
  return ok() ? n : 0;
}

BlockIndex ReadResident(PolicyStateReader& in, const PoolState& pool, std::vector<uint8_t>& seen,
                        std::string_view what) {
  const BlockIndex b = in.Block(what);
  if (!in.ok()) return 0;
  if (b >= seen.size() || !pool.IsResident(b) || seen[b]) {
    in.Fail(absl::StrCat(std::string(what), ": block ", b, " is not resident or repeats"));
    return 0;
  }
  seen[b] = 1;
  return b;
}

uint64_t ReadResidentCount(PolicyStateReader& in, const PoolState& pool, std::string_view what,
                           size_t min_item_bytes) {
  const uint64_t n = in.Count(what, min_item_bytes);
  if (in.ok() && n != pool.resident_blocks()) {
    in.Fail(absl::StrCat(std::string(what), ": ", n, " blocks for ", pool.resident_blocks(),
                         " resident"));
  }
  return in.ok() ? n : 0;
}

}  // namespace kvlearn
