// Builds msgpack payloads by hand for the engine tests: each call appends one
// value (or a container header whose elements follow), e.g.
//   MsgpackBuilder m; m.Array(2).Double(1.5).Array(0);   // [1.5, []]
// Raw() appends bytes as they are, for malformed payloads.
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>

#ifndef MSGPACK_NO_BOOST
#define MSGPACK_NO_BOOST
#endif
#include <msgpack.hpp>

namespace kvlearn {

class MsgpackBuilder {
 public:
  MsgpackBuilder() : packer_(buffer_) {}

  MsgpackBuilder& Array(uint32_t n) {
    packer_.pack_array(n);
    return *this;
  }
  MsgpackBuilder& Map(uint32_t n) {
    packer_.pack_map(n);
    return *this;
  }
  MsgpackBuilder& Str(std::string_view s) {
    packer_.pack_str(static_cast<uint32_t>(s.size()));
    packer_.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
    return *this;
  }
  MsgpackBuilder& Bin(std::string_view b) {
    packer_.pack_bin(static_cast<uint32_t>(b.size()));
    packer_.pack_bin_body(b.data(), static_cast<uint32_t>(b.size()));
    return *this;
  }
  MsgpackBuilder& Bin(std::initializer_list<uint8_t> bytes) {
    std::string b;
    for (const uint8_t x : bytes) b.push_back(static_cast<char>(x));
    return Bin(b);
  }
  MsgpackBuilder& Uint(uint64_t v) {
    packer_.pack_uint64(v);
    return *this;
  }
  MsgpackBuilder& Int(int64_t v) {
    packer_.pack_int64(v);
    return *this;
  }
  // Always float64 (0xcb), as msgspec writes floats; msgpack-cxx's pack_double
  // would write an integral value as an integer.
  MsgpackBuilder& Double(double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    char out[9] = {static_cast<char>(0xcb)};
    for (int i = 0; i < 8; ++i) out[8 - i] = static_cast<char>((bits >> (8 * i)) & 0xff);
    buffer_.write(out, sizeof out);
    return *this;
  }
  MsgpackBuilder& Nil() {
    packer_.pack_nil();
    return *this;
  }
  MsgpackBuilder& Bool(bool v) {
    if (v) {
      packer_.pack_true();
    } else {
      packer_.pack_false();
    }
    return *this;
  }
  // `n` small integers 0..n-1 as one array (token_ids).
  MsgpackBuilder& Tokens(uint32_t n) {
    packer_.pack_array(n);
    for (uint32_t i = 0; i < n; ++i) packer_.pack_uint32(i);
    return *this;
  }
  MsgpackBuilder& Raw(std::string_view bytes) {
    buffer_.write(bytes.data(), bytes.size());
    return *this;
  }

  std::string bytes() const { return std::string(buffer_.data(), buffer_.size()); }

 private:
  msgpack::sbuffer buffer_;
  msgpack::packer<msgpack::sbuffer> packer_;
};

}  // namespace kvlearn
