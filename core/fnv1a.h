// FNV-1a, 64 bits, over bytes fed in order: names a trace (the model file
// records it) or a model file (its version in journals and metrics). A
// fingerprint, not a defence against anyone choosing the bytes.
#pragma once

#include <cstdint>
#include <string_view>

namespace kvlearn {

class Fnv1a {
 public:
  // The published offset basis, 0xcbf29ce484222325.
  static constexpr uint64_t kPublishedBasis = 14695981039346656037ull;
  // kvlearn's: the published one a digit short, as the first fingerprints
  // were written; kept so that every recorded trace fingerprint and model
  // version stays what it was.
  static constexpr uint64_t kKvlearnBasis = 1469598103934665603ull;

  explicit Fnv1a(uint64_t basis = kKvlearnBasis) : hash_(basis) {}

  void Byte(unsigned char c) { hash_ = (hash_ ^ c) * kPrime; }
  void Bytes(std::string_view s) {
    for (const char c : s) Byte(static_cast<unsigned char>(c));
  }
  // The 8 bytes of `v`, least significant first.
  void Word(uint64_t v) {
    for (int i = 0; i < 8; ++i, v >>= 8) Byte(static_cast<unsigned char>(v & 0xff));
  }
  uint64_t value() const { return hash_; }

 private:
  static constexpr uint64_t kPrime = 1099511628211ull;
  uint64_t hash_;
};

}  // namespace kvlearn
