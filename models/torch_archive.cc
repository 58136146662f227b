#include "models/torch_archive.h"

#include <zlib.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "core/one_line.h"

namespace kvlearn {
namespace {

// Zip's little-endian fields (APPNOTE.TXT, sections 4.3.7, 4.3.12, 4.3.16).
constexpr uint32_t kLocalHeaderSignature = 0x04034b50;
constexpr uint32_t kCentralHeaderSignature = 0x02014b50;
constexpr uint32_t kEndOfDirectorySignature = 0x06054b50;
constexpr size_t kLocalHeaderBytes = 30;
constexpr size_t kCentralHeaderBytes = 46;
constexpr size_t kEndOfDirectoryBytes = 22;
constexpr uint16_t kStored = 0;
constexpr uint16_t kDeflated = 8;

uint16_t U16(std::string_view b, size_t at) {
  return static_cast<uint16_t>(static_cast<uint8_t>(b[at]) |
                               (static_cast<uint8_t>(b[at + 1]) << 8));
}

uint32_t U32(std::string_view b, size_t at) {
  return static_cast<uint32_t>(U16(b, at)) | (static_cast<uint32_t>(U16(b, at + 2)) << 16);
}

absl::Status Bad(std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("zip archive: ", std::string(what)));
}

std::string Quoted(std::string_view name) { return absl::StrCat("'", OneLine(name), "'"); }

// zlib's crc32 takes at most 4 GiB at once; archives are capped far below.
bool CrcMatches(std::string_view data, uint32_t expected) {
  const uLong crc =
      crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(data.data()), data.size());
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION  // the fuzz build (CMakeLists.txt)
  (void)crc;
  (void)expected;
  return true;
#else
  return crc == expected;
#endif
}

}  // namespace

absl::StatusOr<TorchArchive> TorchArchive::Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("model file ", path, " cannot be read"));
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0) return absl::DataLossError(absl::StrCat("model file ", path, ": read error"));
  if (static_cast<uint64_t>(size) > kMaxTorchArchiveBytes) {
    return Bad(
        absl::StrCat(size, " bytes, more than a model file's limit of ", kMaxTorchArchiveBytes));
  }
  std::string bytes(static_cast<size_t>(size), '\0');
  in.seekg(0);
  if (!in.read(bytes.data(), size)) {
    return absl::DataLossError(absl::StrCat("model file ", path, ": read error"));
  }
  return Parse(std::move(bytes));
}

absl::StatusOr<TorchArchive> TorchArchive::Parse(std::string bytes) {
  TorchArchive a;
  a.bytes_ = std::move(bytes);
  const std::string_view b = a.bytes_;
  if (b.size() > kMaxTorchArchiveBytes) return Bad("larger than a model file's limit");
  // The end-of-directory record is the last 22 bytes unless a comment
  // follows it (up to 64 KiB): look backwards for its signature.
  if (b.size() < kEndOfDirectoryBytes) return Bad("too short for a zip archive");
  size_t end = b.size() - kEndOfDirectoryBytes;
  const size_t lowest = end > 0xffff ? end - 0xffff : 0;
  while (U32(b, end) != kEndOfDirectorySignature) {
    if (end == lowest) return Bad("no end-of-directory record");
    --end;
  }
  const uint16_t entries = U16(b, end + 10);
  const uint32_t directory_size = U32(b, end + 12);
  const uint32_t directory_offset = U32(b, end + 16);
  if (U16(b, end + 4) != 0 || U16(b, end + 6) != 0 || U16(b, end + 8) != entries) {
    return Bad("spans several disks");
  }
  if (entries == 0xffff || directory_size == 0xffffffff || directory_offset == 0xffffffff) {
    return Bad("zip64 sizes (larger than any model file)");
  }
  if (uint64_t{directory_offset} + directory_size > end) {
    return Bad("central directory reaches past its end record");
  }
  std::string top;  // the directory every entry sits under, with its '/'
  size_t at = directory_offset;
  for (uint16_t i = 0; i < entries; ++i) {
    if (at + kCentralHeaderBytes > end || U32(b, at) != kCentralHeaderSignature) {
      return Bad(absl::StrCat("central directory entry ", i, " is damaged"));
    }
    const uint16_t method = U16(b, at + 10);
    const uint32_t crc = U32(b, at + 16);
    const uint32_t packed = U32(b, at + 20);
    const uint32_t size = U32(b, at + 24);
    const size_t name_bytes = U16(b, at + 28);
    const size_t skip = name_bytes + U16(b, at + 30) + U16(b, at + 32);
    const uint32_t local = U32(b, at + 42);
    if (at + kCentralHeaderBytes + skip > end) {
      return Bad(absl::StrCat("central directory entry ", i, " reaches past the directory"));
    }
    const std::string_view full = b.substr(at + kCentralHeaderBytes, name_bytes);
    at += kCentralHeaderBytes + skip;
    const size_t slash = full.find('/');
    if (slash == std::string_view::npos || slash == 0) {
      return Bad(absl::StrCat("entry ", Quoted(full), " is not under a top directory"));
    }
    if (i == 0) top = std::string(full.substr(0, slash + 1));
    if (full.substr(0, slash + 1) != top) {
      return Bad(absl::StrCat("entry ", Quoted(full), " is not under ", Quoted(top)));
    }
    Entry e;
    e.method = method;
    e.crc32 = crc;
    e.size = size;
    e.packed = packed;
    if (method == kStored && packed != size) {
      return Bad(absl::StrCat("stored entry ", Quoted(full), " changes size"));
    }
    e.offset = local;  // of its local header: Record() finds the bytes behind it
    if (!a.records_.emplace(std::string(full.substr(slash + 1)), e).second) {
      return Bad(absl::StrCat("entry ", Quoted(full), " appears twice"));
    }
  }
  return a;
}

absl::StatusOr<std::string_view> TorchArchive::Packed(std::string_view name, const Entry& e) const {
  // The local header's name and extra field (alignment padding) come first.
  const std::string_view b = bytes_;
  if (e.offset + kLocalHeaderBytes > b.size() || U32(b, e.offset) != kLocalHeaderSignature) {
    return Bad(absl::StrCat("record ", Quoted(name), " has no local header"));
  }
  const uint64_t start =
      e.offset + kLocalHeaderBytes + U16(b, e.offset + 26) + U16(b, e.offset + 28);
  if (start + e.packed > b.size()) {
    return Bad(absl::StrCat("record ", Quoted(name), " reaches past the end of the file"));
  }
  return b.substr(start, e.packed);
}

absl::StatusOr<std::string_view> TorchArchive::Record(std::string_view name) const {
  const auto it = records_.find(name);
  if (it == records_.end()) return Bad(absl::StrCat("no record ", Quoted(name)));
  const Entry& e = it->second;
  if (e.method != kStored) return Bad(absl::StrCat("record ", Quoted(name), " is compressed"));
  auto data = Packed(name, e);
  if (!data.ok()) return data.status();
  if (!CrcMatches(*data, e.crc32)) {
    return Bad(absl::StrCat("record ", Quoted(name), " fails its CRC-32"));
  }
  return *data;
}

absl::StatusOr<std::string> TorchArchive::Text(std::string_view name) const {
  const auto it = records_.find(name);
  if (it == records_.end()) return Bad(absl::StrCat("no record ", Quoted(name)));
  const Entry& e = it->second;
  if (e.method == kStored) {
    auto data = Record(name);
    if (!data.ok()) return data.status();
    if (data->size() > kMaxTorchArchiveTextBytes) {
      return Bad(absl::StrCat("record ", Quoted(name), " is longer than ",
                              kMaxTorchArchiveTextBytes, " bytes"));
    }
    return std::string(*data);
  }
  if (e.method != kDeflated) {
    return Bad(absl::StrCat("record ", Quoted(name), " uses compression method ", e.method));
  }
  if (e.size > kMaxTorchArchiveTextBytes) {
    return Bad(absl::StrCat("record ", Quoted(name), " inflates to more than ",
                            kMaxTorchArchiveTextBytes, " bytes"));
  }
  auto packed = Packed(name, e);
  if (!packed.ok()) return packed.status();
  // Raw deflate (no zlib header), into exactly the size the directory states:
  // a stream that ends early, runs longer or is damaged is refused.
  std::string out(static_cast<size_t>(e.size), '\0');
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) return absl::InternalError("zlib: inflateInit2");
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(packed->data()));
  z.avail_in = static_cast<uInt>(packed->size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = inflate(&z, Z_FINISH);
  const uint64_t produced = z.total_out;
  inflateEnd(&z);
  if (rc != Z_STREAM_END || produced != e.size) {
    return Bad(absl::StrCat("record ", Quoted(name), " does not inflate to its stated ", e.size,
                            " bytes"));
  }
  if (!CrcMatches(out, e.crc32)) {
    return Bad(absl::StrCat("record ", Quoted(name), " fails its CRC-32"));
  }
  return out;
}

}  // namespace kvlearn
