#include "models/pickle_check.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace kvlearn {
namespace {

// Memo indices above this are refused: LibTorch sizes its memo table to the
// largest index, and kvlearn's files use a few dozen.
constexpr uint64_t kMaxMemoIndex = 1 << 20;

uint64_t ReadLittleEndian(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

}  // namespace

absl::Status CheckPickleStructure(std::string_view pickle) {
  size_t depth = 0;           // objects on the stack
  std::vector<size_t> marks;  // depth at each open MARK
  absl::flat_hash_set<uint64_t> memo;
  size_t at = 0;
  const auto fail = [&](size_t offset, unsigned char op, std::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("pickle byte ", offset, " (opcode 0x",
                                                   absl::Hex(op), "): ", std::string(what)));
  };
  while (at < pickle.size()) {
    const size_t offset = at;
    const auto op = static_cast<unsigned char>(pickle[at++]);
    const size_t left = pickle.size() - at;
    const size_t floor = marks.empty() ? 0 : marks.back();
    // Pops n objects above the top mark, then pushes `push`.
    const auto pop_push = [&](size_t n, size_t push) -> bool {
      if (depth - floor < n) return false;
      depth = depth - n + push;
      return true;
    };
    // Skips a fixed-size argument.
    const auto take = [&](size_t n) -> bool {
      if (left < n) return false;
      at += n;
      return true;
    };
    // Skips a length-prefixed argument whose length takes `bytes` bytes.
    const auto take_sized = [&](int bytes) -> bool {
      if (left < static_cast<size_t>(bytes)) return false;
      const uint64_t n = ReadLittleEndian(pickle.data() + at, bytes);
      if (n > left - bytes) return false;
      at += bytes + n;
      return true;
    };
    bool ok = true;
    switch (op) {
      case 0x80:  // PROTO
        ok = take(1);
        break;
      case '.':  // STOP
        if (depth != 1 || !marks.empty()) return fail(offset, op, "stack is not one object");
        if (at != pickle.size()) return fail(offset, op, "bytes after STOP");
        return absl::OkStatus();
      case 'c': {  // GLOBAL: module\nname\n
        for (int line = 0; line < 2 && ok; ++line) {
          const void* nl = std::memchr(pickle.data() + at, '\n', pickle.size() - at);
          ok = nl != nullptr;
          if (ok) at = static_cast<const char*>(nl) - pickle.data() + 1;
        }
        if (ok) ++depth;
        break;
      }
      case '(':  // MARK
        marks.push_back(depth);
        break;
      case ')':   // EMPTY_TUPLE
      case '}':   // EMPTY_DICT
      case ']':   // EMPTY_LIST
      case 'N':   // NONE
      case 0x88:  // NEWTRUE
      case 0x89:  // NEWFALSE
        ++depth;
        break;
      case 't':  // TUPLE
      case 'u':  // SETITEMS
      case 'e':  // APPENDS
        if (marks.empty()) return fail(offset, op, "no MARK");
        if (op != 't' && floor == 0) return fail(offset, op, "nothing below the MARK");
        if (op == 'u' && (depth - floor) % 2 != 0) return fail(offset, op, "odd key/value count");
        depth = op == 't' ? floor + 1 : floor;
        marks.pop_back();
        break;
      case 0x85:  // TUPLE1
        ok = pop_push(1, 1);
        break;
      case 0x86:  // TUPLE2
        ok = pop_push(2, 1);
        break;
      case 0x87:  // TUPLE3
        ok = pop_push(3, 1);
        break;
      case 'q':    // BINPUT
      case 'r': {  // LONG_BINPUT
        const int bytes = op == 'q' ? 1 : 4;
        if (left < static_cast<size_t>(bytes)) return fail(offset, op, "truncated");
        const uint64_t index = ReadLittleEndian(pickle.data() + at, bytes);
        at += bytes;
        if (depth - floor < 1) return fail(offset, op, "nothing to memoize");
        if (index > kMaxMemoIndex) return fail(offset, op, "memo index too large");
        memo.insert(index);
        break;
      }
      case 'h':    // BINGET
      case 'j': {  // LONG_BINGET
        const int bytes = op == 'h' ? 1 : 4;
        if (left < static_cast<size_t>(bytes)) return fail(offset, op, "truncated");
        const uint64_t index = ReadLittleEndian(pickle.data() + at, bytes);
        at += bytes;
        if (!memo.contains(index)) return fail(offset, op, "memo entry never stored");
        ++depth;
        break;
      }
      case 'X':  // BINUNICODE
      case 'B':  // BINBYTES
        ok = take_sized(4);
        if (ok) ++depth;
        break;
      case 0x8c:  // SHORT_BINUNICODE
      case 'C':   // SHORT_BINBYTES
      case 0x8a:  // LONG1
        ok = take_sized(1);
        if (ok) ++depth;
        break;
      case 'K':  // BININT1
        ok = take(1);
        if (ok) ++depth;
        break;
      case 'M':  // BININT2
        ok = take(2);
        if (ok) ++depth;
        break;
      case 'J':  // BININT
        ok = take(4);
        if (ok) ++depth;
        break;
      case 'G':  // BINFLOAT
        ok = take(8);
        if (ok) ++depth;
        break;
      case 'Q':  // BINPERSID
        ok = pop_push(1, 1);
        break;
      case 'R':   // REDUCE
      case 0x81:  // NEWOBJ
        ok = pop_push(2, 1);
        break;
      case 'b':  // BUILD
      case 'a':  // APPEND
        ok = pop_push(2, 1);
        break;
      case 's':  // SETITEM
        ok = pop_push(3, 1);
        break;
      default:
        return fail(offset, op, "unsupported opcode");
    }
    if (!ok) return fail(offset, op, "truncated, or pops more than the stack holds");
  }
  return absl::InvalidArgumentError("pickle: no STOP");
}

}  // namespace kvlearn
