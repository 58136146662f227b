// Text from an input file (a name, a line of code) as an error message may
// quote it: control bytes shown as '?', so the message stays one line, and at
// most `max_bytes` of it, so a hostile file cannot make it long.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kvlearn {

inline std::string OneLine(std::string_view text, size_t max_bytes = 100) {
  std::string out(text.substr(0, max_bytes));
  for (char& c : out) c = (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
  if (text.size() > max_bytes) out += "...";
  return out;
}

}  // namespace kvlearn
