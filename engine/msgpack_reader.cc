#include "engine/msgpack_reader.h"

#include <array>
#include <cstring>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"

namespace kvlearn {
namespace {

template <typename T>
T LoadBigEndian(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  if constexpr (sizeof(T) == 2) return static_cast<T>(__builtin_bswap16(v));
  if constexpr (sizeof(T) == 4) return static_cast<T>(__builtin_bswap32(v));
  if constexpr (sizeof(T) == 8) return static_cast<T>(__builtin_bswap64(v));
  return v;
}

// Bytes a value takes when its first byte alone says so (integers, floats,
// nil, booleans, fixstr, fixext); 0 for containers, sized strings, byte
// strings and extensions, and 0xC1. The skip loop's fast path.
constexpr std::array<uint8_t, 256> MakeFixedSizes() {
  std::array<uint8_t, 256> t{};
  for (int b = 0x00; b <= 0x7f; ++b) t[b] = 1;  // positive fixint
  for (int b = 0xe0; b <= 0xff; ++b) t[b] = 1;  // negative fixint
  for (int b = 0xa0; b <= 0xbf; ++b) t[b] = static_cast<uint8_t>(1 + (b & 0x1f));  // fixstr
  t[0xc0] = t[0xc2] = t[0xc3] = 1;                                                 // nil, bool
  t[0xca] = 5;                                                                     // float32
  t[0xcb] = 9;                                                                     // float64
  t[0xcc] = t[0xd0] = 2;
  t[0xcd] = t[0xd1] = 3;
  t[0xce] = t[0xd2] = 5;
  t[0xcf] = t[0xd3] = 9;
  t[0xd4] = 3;  // fixext 1..16: type byte + data
  t[0xd5] = 4;
  t[0xd6] = 6;
  t[0xd7] = 10;
  t[0xd8] = 18;
  return t;
}
constexpr std::array<uint8_t, 256> kFixedSize = MakeFixedSizes();
constexpr size_t kLargestFixedSize = 32;  // fixstr of 31 bytes

}  // namespace

const char* MsgpackTypeName(MsgpackType type) {
  switch (type) {
    case MsgpackType::kNil:
      return "nil";
    case MsgpackType::kBool:
      return "a boolean";
    case MsgpackType::kUint:
    case MsgpackType::kInt:
      return "an integer";
    case MsgpackType::kFloat:
      return "a float";
    case MsgpackType::kStr:
      return "a string";
    case MsgpackType::kBin:
      return "bytes";
    case MsgpackType::kArray:
      return "an array";
    case MsgpackType::kMap:
      return "a map";
    case MsgpackType::kExt:
      return "an extension";
  }
  return "an unknown type";
}

std::string MsgpackReader::ErrorMessage() const {
  switch (error_) {
    case Error::kNone:
      return "";
    case Error::kTruncated:
      return "truncated payload";
    case Error::kInvalidByte:
      return "not msgpack (invalid type byte)";
    case Error::kTooDeep:
      return absl::StrCat("nesting deeper than ", max_depth_);
  }
  return "";
}

bool MsgpackReader::ReadHeader(MsgpackValue* v) {
  if (p_ == end_) return Fail(Error::kTruncated);
  const uint8_t b = *p_;
  // Body of `n` bytes after a header of `h` bytes.
  const auto body = [&](MsgpackType type, size_t h, uint64_t n) {
    if (!Need(h) || remaining() - h < n) return Fail(Error::kTruncated);
    v->type = type;
    v->data = p_ + h;
    v->size = static_cast<uint32_t>(n);
    p_ += h + n;
    return true;
  };
  const auto container = [&](MsgpackType type, size_t h, uint64_t n) {
    v->type = type;
    v->u = n;
    p_ += h;
    return true;
  };
  const auto scalar = [&](MsgpackType type, uint64_t u, size_t n) {
    v->type = type;
    v->u = u;
    p_ += n;
    return true;
  };
  // Signed encodings: non-negative values are kUint, as msgpack-cxx has it.
  const auto signed_value = [&](int64_t i, size_t n) {
    return scalar(i < 0 ? MsgpackType::kInt : MsgpackType::kUint, static_cast<uint64_t>(i), n);
  };
  if (b <= 0x7f) return scalar(MsgpackType::kUint, b, 1);
  if (b >= 0xe0) return signed_value(static_cast<int8_t>(b), 1);
  if (b >= 0xa0 && b <= 0xbf) return body(MsgpackType::kStr, 1, b & 0x1f);
  if (b >= 0x90 && b <= 0x9f) return container(MsgpackType::kArray, 1, b & 0x0f);
  if (b >= 0x80 && b <= 0x8f) return container(MsgpackType::kMap, 1, b & 0x0f);
  const size_t fixed = kFixedSize[b];
  if (fixed > 0 && !Need(fixed)) return false;
  const uint8_t* q = p_ + 1;
  switch (b) {
    case 0xc0:
      return scalar(MsgpackType::kNil, 0, 1);
    case 0xc2:
    case 0xc3:
      return scalar(MsgpackType::kBool, b & 1, 1);
    case 0xca: {
      float f;
      const uint32_t bits = LoadBigEndian<uint32_t>(q);
      std::memcpy(&f, &bits, 4);
      v->f = f;
      return scalar(MsgpackType::kFloat, 0, 5);
    }
    case 0xcb: {
      const uint64_t bits = LoadBigEndian<uint64_t>(q);
      std::memcpy(&v->f, &bits, 8);
      return scalar(MsgpackType::kFloat, 0, 9);
    }
    case 0xcc:
      return scalar(MsgpackType::kUint, *q, 2);
    case 0xcd:
      return scalar(MsgpackType::kUint, LoadBigEndian<uint16_t>(q), 3);
    case 0xce:
      return scalar(MsgpackType::kUint, LoadBigEndian<uint32_t>(q), 5);
    case 0xcf:
      return scalar(MsgpackType::kUint, LoadBigEndian<uint64_t>(q), 9);
    case 0xd0:
      return signed_value(static_cast<int8_t>(*q), 2);
    case 0xd1:
      return signed_value(static_cast<int16_t>(LoadBigEndian<uint16_t>(q)), 3);
    case 0xd2:
      return signed_value(static_cast<int32_t>(LoadBigEndian<uint32_t>(q)), 5);
    case 0xd3:
      return signed_value(static_cast<int64_t>(LoadBigEndian<uint64_t>(q)), 9);
    case 0xd4:
    case 0xd5:
    case 0xd6:
    case 0xd7:
    case 0xd8:
      return body(MsgpackType::kExt, 2, fixed - 2);  // the type byte is part of the header
    case 0xc4:
      return Need(2) && body(MsgpackType::kBin, 2, *q);
    case 0xc5:
      return Need(3) && body(MsgpackType::kBin, 3, LoadBigEndian<uint16_t>(q));
    case 0xc6:
      return Need(5) && body(MsgpackType::kBin, 5, LoadBigEndian<uint32_t>(q));
    case 0xc7:
      return Need(3) && body(MsgpackType::kExt, 3, *q);
    case 0xc8:
      return Need(4) && body(MsgpackType::kExt, 4, LoadBigEndian<uint16_t>(q));
    case 0xc9:
      return Need(6) && body(MsgpackType::kExt, 6, LoadBigEndian<uint32_t>(q));
    case 0xd9:
      return Need(2) && body(MsgpackType::kStr, 2, *q);
    case 0xda:
      return Need(3) && body(MsgpackType::kStr, 3, LoadBigEndian<uint16_t>(q));
    case 0xdb:
      return Need(5) && body(MsgpackType::kStr, 5, LoadBigEndian<uint32_t>(q));
    case 0xdc:
      return Need(3) && container(MsgpackType::kArray, 3, LoadBigEndian<uint16_t>(q));
    case 0xdd:
      return Need(5) && container(MsgpackType::kArray, 5, LoadBigEndian<uint32_t>(q));
    case 0xde:
      return Need(3) && container(MsgpackType::kMap, 3, LoadBigEndian<uint16_t>(q));
    case 0xdf:
      return Need(5) && container(MsgpackType::kMap, 5, LoadBigEndian<uint32_t>(q));
    default:  // 0xc1
      return Fail(Error::kInvalidByte);
  }
}

bool MsgpackReader::Read(MsgpackValue* v, uint32_t depth) {
  if (!ReadHeader(v)) return false;
  if (!v->is_container()) return true;
  if (depth + 1 > max_depth_) return Fail(Error::kTooDeep);
  // Each child takes at least a byte: more than are left cannot be there.
  return v->children() <= remaining() || Fail(Error::kTruncated);
}

bool MsgpackReader::Skip(uint64_t count, uint32_t depth) {
  // Values still to skip in each enclosing container being skipped.
  absl::InlinedVector<uint64_t, 8> outer;
  while (true) {
    // Fast path, no bounds check needed: while at least the largest
    // fixed-size value fits, runs of 8 positive fixints (token ids below
    // 128) go in one step, other fixed-size values one by one.
    while (count > 0 && remaining() >= kLargestFixedSize) {
      if (count >= 8) {
        uint64_t word;
        std::memcpy(&word, p_, 8);
        if ((word & 0x8080808080808080ull) == 0) {
          p_ += 8;
          count -= 8;
          continue;
        }
      }
      const uint8_t size = kFixedSize[*p_];
      if (size == 0) break;
      p_ += size;
      --count;
    }
    if (count == 0) {
      if (outer.empty()) return true;
      count = outer.back();
      outer.pop_back();
      --depth;
      continue;
    }
    MsgpackValue v;
    if (!Read(&v, depth)) return false;
    --count;
    if (v.is_container() && v.children() > 0) {
      outer.push_back(count);
      count = v.children();
      ++depth;
    }
  }
}

std::string MsgpackStructureError(std::span<const uint8_t> bytes, uint32_t max_depth) {
  // The checks and their order are those of msgpack-cxx's parser with the
  // old decoder's visitor: per header, truncation or the invalid byte; per
  // container, the running total of declared children, then the depth.
  MsgpackReader r(bytes, ~uint32_t{0});
  std::vector<uint64_t> outer;
  uint64_t count = 1;
  uint32_t depth = 0;
  uint64_t declared = 0;
  while (true) {
    if (count == 0) {
      if (outer.empty()) break;
      count = outer.back();
      outer.pop_back();
      --depth;
      continue;
    }
    MsgpackValue v;
    if (!r.ReadHeader(&v)) return r.ErrorMessage();
    --count;
    if (!v.is_container()) continue;
    declared += v.children();
    if (declared > bytes.size()) {
      return absl::StrCat("truncated or corrupt: containers declare more elements (", declared,
                          ") than the payload has bytes (", bytes.size(), ")");
    }
    if (depth + 1 > max_depth) return absl::StrCat("nesting deeper than ", max_depth);
    outer.push_back(count);
    count = v.children();
    ++depth;
  }
  if (r.offset() != bytes.size()) {
    return absl::StrCat(bytes.size() - r.offset(), " trailing bytes after the batch");
  }
  return "";
}

}  // namespace kvlearn
