#include "server/decision_staging.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/varint.h"

namespace kvlearn {
namespace {

constexpr char kFileMagic[8] = {'K', 'V', 'L', 'D', 'S', 'T', 'G', '1'};
constexpr uint32_t kRecordMagic = 0x4b56444eu;  // "KVDN"
constexpr size_t kRecordHeaderBytes = 24;       // size, magic, check, number
// Larger than any staging file kvlearn writes: something else is at the path.
constexpr size_t kMaxFileBytes = size_t{64} << 20;

size_t Align8(size_t n) { return (n + 7) & ~size_t{7}; }

// Not a cryptographic hash: it tells a record from torn or foreign bytes.
// Eight bytes at a time (multiply and fold), since every decision pays it.
uint64_t Check(uint64_t number, std::string_view value) {
  constexpr uint64_t kMul = 0x9e3779b97f4a7c15ull;
  uint64_t h = (number ^ value.size()) * kMul;
  const auto mix = [&h](uint64_t word) {
    h = (h ^ word) * kMul;
    h ^= h >> 29;
  };
  size_t i = 0;
  for (; i + 8 <= value.size(); i += 8) {
    uint64_t word;
    std::memcpy(&word, value.data() + i, 8);
    mix(word);
  }
  uint64_t tail = 0;
  std::memcpy(&tail, value.data() + i, value.size() - i);
  mix(tail);
  return h;
}

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <typename T>
void Store(char* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

absl::Status Unavailable(const std::string& path, const char* what) {
  return absl::UnavailableError(
      absl::StrCat("decision staging ", path, ": ", what, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<DecisionStaging>> DecisionStaging::Open(const std::string& path,
                                                                       size_t capacity) {
  capacity = std::max(Align8(capacity), kHeaderBytes + kRecordHeaderBytes + 8);
  // Owner-only, like the rest of the data directory (journaled decisions).
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Unavailable(path, "open");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const absl::Status s = Unavailable(path, "stat");
    ::close(fd);
    return s;
  }
  const auto existing = static_cast<size_t>(st.st_size);
  if (existing > kMaxFileBytes) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("decision staging ", path, ": ", existing,
                     " bytes, larger than any staging file kvlearn writes; move it aside"));
  }
  // Never shrink: an older build's larger file may hold records past
  // `capacity` (OpenEmptied starts it again, once they are in RocksDB).
  const size_t size = std::max(Align8(existing), capacity);
  // Allocate every block now: a store into a hole of a shared mapping that
  // the file system cannot fill (disk full) kills the process with SIGBUS,
  // where an error here only refuses to start.
  if (const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(size)); err != 0) {
    errno = err;
    const absl::Status s = Unavailable(path, "allocate");
    ::close(fd);
    return s;
  }
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    const absl::Status s = Unavailable(path, "map");
    ::close(fd);
    return s;
  }
  std::unique_ptr<DecisionStaging> staging(new DecisionStaging(fd, static_cast<char*>(base), size));
  char* header = staging->base_;
  if (existing < kHeaderBytes || std::memcmp(header, "\0\0\0\0\0\0\0\0", 8) == 0) {
    // A new file (all zeros): stamp it.
    std::memcpy(header, kFileMagic, sizeof kFileMagic);
    Store<uint32_t>(header + kHeaderBytes, 0);
  } else if (std::memcmp(header, kFileMagic, sizeof kFileMagic) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "decision staging ", path, ": not a kvlearn decision staging file (bad magic)"));
  }
  // Find the end of the records left by the last run; they stay until Clear().
  for (const Record& r : staging->Records()) {
    staging->end_ = Align8(static_cast<size_t>(r.value.data() + r.value.size() - staging->base_));
  }
  return staging;
}

absl::StatusOr<std::unique_ptr<DecisionStaging>> DecisionStaging::OpenEmptied(
    const std::string& path, size_t capacity) {
  if (::truncate(path.c_str(), 0) != 0) return Unavailable(path, "truncate");
  return Open(path, capacity);
}

DecisionStaging::~DecisionStaging() {
  ::munmap(base_, size_);
  ::close(fd_);
}

bool DecisionStaging::Append(uint64_t number, uint64_t event_sequence, std::string_view record) {
  std::string varint;  // short enough to need no allocation
  PutVarint(varint, event_sequence);
  const size_t size = varint.size() + record.size();
  const size_t next = Align8(end_ + kRecordHeaderBytes + size);
  if (next > size_ || size > UINT32_MAX) return false;
  char* r = base_ + end_;
  char* value = r + kRecordHeaderBytes;
  std::memcpy(value, varint.data(), varint.size());
  std::memcpy(value + varint.size(), record.data(), record.size());
  Store<uint32_t>(r + 4, kRecordMagic);
  Store<uint64_t>(r + 8, Check(number, {value, size}));
  Store<uint64_t>(r + 16, number);
  if (next + 4 <= size_) Store<uint32_t>(base_ + next, 0);  // ends the records after this one
  // Last: until the size is there, a reader sees the records end here.
  std::atomic_signal_fence(std::memory_order_release);
  Store<uint32_t>(r, static_cast<uint32_t>(size));
  end_ = next;
  return true;
}

std::vector<DecisionStaging::Record> DecisionStaging::Records() const {
  std::vector<Record> out;
  size_t at = kHeaderBytes;
  while (at + kRecordHeaderBytes <= size_) {
    const char* r = base_ + at;
    const uint32_t size = Load<uint32_t>(r);
    if (size == 0 || size > size_ - at - kRecordHeaderBytes) break;
    if (Load<uint32_t>(r + 4) != kRecordMagic) break;
    const uint64_t number = Load<uint64_t>(r + 16);
    const std::string_view value(r + kRecordHeaderBytes, size);
    if (Load<uint64_t>(r + 8) != Check(number, value)) break;
    if (!out.empty() && number != out.back().number + 1) break;
    out.push_back({number, value});
    at = Align8(at + kRecordHeaderBytes + size);
  }
  return out;
}

void DecisionStaging::Clear() {
  Store<uint32_t>(base_ + kHeaderBytes, 0);
  end_ = kHeaderBytes;
}

}  // namespace kvlearn
