// The records of a TorchScript archive, read without LibTorch. LibTorch's
// writer makes a zip whose entries sit under one top directory ("name/"),
// the tensors' bytes and data.pkl stored uncompressed, the TorchScript source
// deflated. kvlearn reads the weights from stored records (data.pkl,
// data/<key>, extra/) and reads the source only as text (Text), so loading a
// model file never loads LibTorch (about a second of start-up and 280 shared
// libraries) and never compiles code from the file.
//
// Everything is bounds-checked against the bytes read: a damaged or hostile
// file is refused with INVALID_ARGUMENT naming what is wrong, never read past.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvlearn {

// A model file is tens of kilobytes; anything past this is not one.
inline constexpr uint64_t kMaxTorchArchiveBytes = uint64_t{64} << 20;
// A model's TorchScript source is under a kilobyte per layer.
inline constexpr uint64_t kMaxTorchArchiveTextBytes = uint64_t{1} << 20;

class TorchArchive {
 public:
  // Reads and indexes the file at `path` (NOT_FOUND if it cannot be read).
  static absl::StatusOr<TorchArchive> Read(const std::string& path);
  // Indexes `bytes`, an archive already in memory.
  static absl::StatusOr<TorchArchive> Parse(std::string bytes);

  bool Has(std::string_view name) const { return records_.contains(name); }
  // The whole file.
  std::string_view bytes() const { return bytes_; }
  // A stored record by its name below the top directory ("data.pkl",
  // "data/0", "extra/kvlearn_metadata.json"), its CRC-32 checked.
  absl::StatusOr<std::string_view> Record(std::string_view name) const;
  // A record stored or deflated (the TorchScript source), inflated and its
  // CRC-32 checked; refused past kMaxTorchArchiveTextBytes.
  absl::StatusOr<std::string> Text(std::string_view name) const;

 private:
  struct Entry {
    uint64_t offset = 0;  // of its local header in bytes_
    uint64_t size = 0;    // uncompressed
    uint64_t packed = 0;  // as stored in the file
    uint32_t crc32 = 0;
    uint16_t method = 0;  // 0 stored, 8 deflated
  };
  // The bytes of entry `e` as the file holds them, after its local header.
  absl::StatusOr<std::string_view> Packed(std::string_view name, const Entry& e) const;
  std::string bytes_;
  std::map<std::string, Entry, std::less<>> records_;
};

}  // namespace kvlearn
