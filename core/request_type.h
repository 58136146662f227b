// What a request asked for, as the Bailian trace labels it (Mooncake's format
// does not say: kUnknown). Reuse differs by type and by turn (Wang et al.,
// ATC '25), so the learned policy's features read both (core/block_catalog.h
// keeps them per block).
#pragma once

#include <cstdint>
#include <string_view>

namespace kvlearn {

enum class RequestType : uint8_t { kUnknown = 0, kText, kSearch, kImage, kFile, kOther };
inline constexpr int kRequestTypes = 6;

// "text", "search", "image", "file"; "other" for a label outside those
// four, "" when not known.
inline const char* RequestTypeName(RequestType type) {
  constexpr const char* kNames[kRequestTypes] = {"", "text", "search", "image", "file", "other"};
  return kNames[static_cast<int>(type)];
}
// The type named `name`: kUnknown for "", kOther for a label outside the four.
inline RequestType RequestTypeFromName(std::string_view name) {
  if (name.empty()) return RequestType::kUnknown;
  for (int i = 1; i < kRequestTypes - 1; ++i) {
    if (name == RequestTypeName(static_cast<RequestType>(i))) return static_cast<RequestType>(i);
  }
  return RequestType::kOther;
}

}  // namespace kvlearn
