// MsgpackReader: walks msgpack bytes in place, one value header at a time,
// and skips whole values without building anything. The KV event decoder
// (engine/kv_event_decoder.cc) reads the fields it needs through it and skips
// the rest (token_ids, fields it does not know) at a few CPU cycles per
// element; msgpack-cxx, which it replaced, built an object per token id.
//
// Strings, byte strings and extensions are returned as views into the input,
// which must outlive them. Nothing is allocated except, when skipping values
// nested more than 8 containers deep, the stack of their element counts.
//
// Errors: a read or skip that would pass the end (truncated input), the byte
// 0xC1 (never used by msgpack), or a container deeper than max_depth stops
// the reader, which then reports false from then on; error() says which.
//
// MsgpackStructureError checks a whole document the way msgpack-cxx's parser
// did, in document order, and names the first problem the way the old
// decoder did; the decoder calls it only once something is wrong, so that its
// errors stay what they were.
//
// Thread-safety: a reader belongs to one thread; MsgpackStructureError is pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace kvlearn {

enum class MsgpackType : uint8_t {
  kNil,
  kBool,
  kUint,  // a non-negative integer, whatever its encoding (msgpack-cxx's POSITIVE_INTEGER)
  kInt,   // a negative integer
  kFloat,
  kStr,
  kBin,
  kArray,
  kMap,
  kExt,
};

// "nil", "a boolean", "an integer", "a float", "a string", "bytes", "an
// array", "a map", "an extension": for messages.
const char* MsgpackTypeName(MsgpackType type);

struct MsgpackValue {
  MsgpackType type = MsgpackType::kNil;
  // kUint: the value; kInt: its two's-complement bits; kBool: 0 or 1;
  // kArray: elements; kMap: key/value pairs.
  uint64_t u = 0;
  double f = 0;                   // kFloat (float32 widened)
  const uint8_t* data = nullptr;  // kStr, kBin, kExt: the body
  uint32_t size = 0;              // kStr, kBin, kExt: its length

  std::string_view str() const { return {reinterpret_cast<const char*>(data), size}; }
  std::span<const uint8_t> bytes() const { return {data, size}; }
  bool is_container() const { return type == MsgpackType::kArray || type == MsgpackType::kMap; }
  // Values that follow a container header: elements, or keys and values.
  uint64_t children() const { return type == MsgpackType::kMap ? 2 * u : u; }
};

class MsgpackReader {
 public:
  enum class Error : uint8_t { kNone, kTruncated, kInvalidByte, kTooDeep };

  MsgpackReader(std::span<const uint8_t> bytes, uint32_t max_depth)
      : begin_(bytes.data()),
        p_(bytes.data()),
        end_(bytes.data() + bytes.size()),
        max_depth_(max_depth) {}

  // Reads the next value: a scalar, string, byte string or extension whole;
  // an array or map only by its header (its children follow). A container
  // read inside `depth` enclosing containers is depth + 1 deep; deeper than
  // max_depth is an error. A container that declares more children than bytes
  // are left is truncated (each child takes at least one byte).
  bool Read(MsgpackValue* v, uint32_t depth);

  // The next value's header alone: no depth check, and a container may
  // declare any number of children (MsgpackStructureError counts them).
  bool ReadHeader(MsgpackValue* v);

  // Skips `count` whole values that sit inside `depth` enclosing containers.
  bool Skip(uint64_t count, uint32_t depth);

  size_t offset() const { return static_cast<size_t>(p_ - begin_); }
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }
  // REQUIRES: an offset this reader returned; clears no error.
  void Seek(size_t offset) { p_ = begin_ + offset; }

  Error error() const { return error_; }
  // "truncated payload", "not msgpack (invalid type byte)", "nesting deeper than N".
  std::string ErrorMessage() const;

 private:
  bool Fail(Error e) {
    error_ = e;
    p_ = end_;
    return false;
  }
  bool Need(size_t n) { return static_cast<size_t>(end_ - p_) >= n || Fail(Error::kTruncated); }

  const uint8_t* begin_;
  const uint8_t* p_;
  const uint8_t* end_;
  uint32_t max_depth_;
  Error error_ = Error::kNone;
};

// The first structural problem of `bytes` as one document, in document order,
// or "" when there is none: "truncated payload", "not msgpack (invalid type
// byte)", "truncated or corrupt: containers declare more elements (N) than
// the payload has bytes (L)" (the running total of declared children passes
// the byte count), "nesting deeper than D", "K trailing bytes after the batch".
std::string MsgpackStructureError(std::span<const uint8_t> bytes, uint32_t max_depth);

}  // namespace kvlearn
