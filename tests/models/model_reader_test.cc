// Reading model files without LibTorch: the zip archive and the module's
// pickle, on bytes written by hand here. (model_file_test compares the reader
// with LibTorch's own on files LibTorch wrote.)
#include <gtest/gtest.h>
#include <zlib.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "models/module_pickle.h"
#include "models/torch_archive.h"

namespace kvlearn {
namespace {

using namespace std::string_literals;
using namespace std::string_view_literals;

std::string Le(uint64_t v, int bytes) {
  std::string out;
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}

// A zip of stored entries, laid out as APPNOTE.TXT describes (local headers,
// then the central directory, then its end record); `method` 8 marks an
// entry deflated without deflating it (the reader must not read those).
struct ZipEntry {
  std::string name, data;
  uint16_t method = 0;
};

std::string Zip(const std::vector<ZipEntry>& entries) {
  std::string out, directory;
  for (const ZipEntry& e : entries) {
    const uint32_t crc =
        crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(e.data.data()), e.data.size());
    const std::string common =
        absl::StrCat(Le(0, 2), Le(e.method, 2), Le(0, 4), Le(crc, 4), Le(e.data.size(), 4),
                     Le(e.data.size(), 4), Le(e.name.size(), 2), Le(0, 2));
    const size_t local = out.size();
    absl::StrAppend(&out, Le(0x04034b50, 4), Le(20, 2), common, e.name, e.data);
    absl::StrAppend(&directory, Le(0x02014b50, 4), Le(20, 2), Le(20, 2), common, Le(0, 2), Le(0, 2),
                    Le(0, 2), Le(0, 4), Le(local, 4), e.name);
  }
  const size_t at = out.size();
  absl::StrAppend(&out, directory, Le(0x06054b50, 4), Le(0, 2), Le(0, 2), Le(entries.size(), 2),
                  Le(entries.size(), 2), Le(directory.size(), 4), Le(at, 4), Le(0, 2));
  return out;
}

TEST(TorchArchiveTest, ReadsStoredRecordsByTheirNameBelowTheTopDirectory) {
  const std::string weights("\x00\x00\x80\x3f\x00\x00\x00\x40", 8);
  auto a = TorchArchive::Parse(Zip({{"model/data.pkl", "pickle"},
                                    {"model/data/0", weights},
                                    {"model/code/__torch__.py", "deflated", 8}}));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->Has("data.pkl"));
  EXPECT_FALSE(a->Has("model/data.pkl"));
  EXPECT_EQ(*a->Record("data.pkl"), "pickle");
  EXPECT_EQ(*a->Record("data/0"), weights);
  EXPECT_EQ(a->Record("code/__torch__.py").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a->Record("data/1").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TorchArchiveTest, RefusesDamagedArchives) {
  const std::string good = Zip({{"m/data.pkl", "pickle"}, {"m/data/0", "0123"}});
  // A flipped byte inside a record fails its CRC when the record is read.
  std::string flipped = good;
  flipped[flipped.find("0123")] = '9';
  auto f = TorchArchive::Parse(flipped);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_NE(f->Record("data/0").status().message().find("CRC-32"), std::string::npos);
  // Every shorter prefix loses the end record or its directory.
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_FALSE(TorchArchive::Parse(good.substr(0, n)).ok()) << n << " bytes";
  }
  for (const auto& [entries, what] : std::vector<std::pair<std::vector<ZipEntry>, std::string>>{
           {{{"m/data.pkl", "a"}, {"m/data.pkl", "b"}}, "appears twice"},
           {{{"m/data.pkl", "a"}, {"n/data/0", "b"}}, "is not under 'm/'"},
           {{{"data.pkl", "a"}}, "not under a top directory"},
       }) {
    auto s = TorchArchive::Parse(Zip(entries));
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_NE(s.status().message().find(what), std::string::npos) << s.status();
  }
  // A record whose central entry states more bytes than the file holds.
  std::string long_entry = good;
  const size_t directory = long_entry.find("PK\x01\x02"sv);
  long_entry.replace(directory + 20, 8, Le(1 << 20, 4) + Le(1 << 20, 4));
  auto long_archive = TorchArchive::Parse(long_entry);
  ASSERT_TRUE(long_archive.ok()) << long_archive.status();
  EXPECT_NE(long_archive->Record("data.pkl").status().message().find("past the end of the file"),
            std::string::npos)
      << long_archive->Record("data.pkl").status();
}

// Pickle opcodes, protocol 2, as LibTorch writes a module's data.pkl.
std::string Str(const std::string& s) { return absl::StrCat("X", Le(s.size(), 4), s); }
std::string Global(const std::string& module, const std::string& name) {
  return absl::StrCat("c", module, "\n", name, "\n");
}
std::string Int(uint8_t v) { return absl::StrCat("K", std::string(1, static_cast<char>(v))); }

// A tensor of storage `key`: _rebuild_tensor_v2(storage, offset, sizes, strides, False, {}).
std::string Tensor(const std::string& key, uint8_t offset, const std::string& sizes,
                   const std::string& strides, const std::string& storage = "FloatStorage") {
  return absl::StrCat(Global("torch._utils", "_rebuild_tensor_v2"), "((", Str("storage"),
                      Global("torch", storage), Str(key), Str("cpu"), Int(6), "tQ", Int(offset),
                      "(", sizes, "t(", strides, "t\x89", Global("collections", "OrderedDict"),
                      ")RtR");
}

std::string Module(const std::string& state_items) {
  return absl::StrCat("\x80\x02", Global("__torch__", "KvlearnReuseMlp"), ")\x81}(", state_items,
                      "ub.");
}

constexpr char kClass[] = "__torch__.KvlearnReuseMlp";

TEST(ModulePickleTest, ReadsTheTensorsOfAHandWrittenModuleState) {
  const std::string pickle = Module(absl::StrCat(
      Str("w0"), Tensor("0", 0, Int(2) + Int(3), Int(3) + Int(1)), Str("b0"),
      Tensor("1", 4, Int(2), Int(1), "DoubleStorage"), Str("note"), Str("not a tensor: skipped")));
  auto t = ReadModulePickle(pickle, kClass);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->size(), 2u);
  const PickledTensor& w = t->at("w0");
  EXPECT_EQ(w.storage_key, "0");
  EXPECT_EQ(w.dtype, PickledDtype::kFloat32);
  EXPECT_EQ(w.storage_offset, 0);
  EXPECT_EQ(w.sizes, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w.strides, (std::vector<int64_t>{3, 1}));
  const PickledTensor& b = t->at("b0");
  EXPECT_EQ(b.storage_key, "1");
  EXPECT_EQ(b.dtype, PickledDtype::kFloat64);
  EXPECT_EQ(b.storage_offset, 4);
  EXPECT_EQ(b.sizes, (std::vector<int64_t>{2}));
  // The same state through the memo (BINPUT, then BINGET), as LibTorch
  // writes a global or storage it has used before.
  const std::string memo = Module(absl::StrCat(
      Str("w0"), Global("torch._utils", "_rebuild_tensor_v2"), "q\x01", "((", Str("storage"),
      Global("torch", "FloatStorage"), "q\x02", Str("0"), Str("cpu"), Int(6), "tQ", Int(0), "(",
      Int(6), "t(", Int(1), "t\x89", Global("collections", "OrderedDict"), ")RtR", Str("b0"),
      "h\x01((", Str("storage"), "h\x02", Str("1"), Str("cpu"), Int(1), "tQ", Int(0), "(", Int(1),
      "t(", Int(1), "t\x89", Global("collections", "OrderedDict"), ")RtR"));
  auto m = ReadModulePickle(memo, kClass);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->at("w0").sizes, (std::vector<int64_t>{6}));
  EXPECT_EQ(m->at("b0").storage_key, "1");
}

TEST(ModulePickleTest, RefusesWhatWouldReadOutsideTheStackMemoOrInputOrRunCode) {
  const std::string w0 = Str("w0") + Tensor("0", 0, Int(1), Int(1));
  for (const std::string& bad : std::vector<std::string>{
           "\x80\x02"
           "b."s,  // BUILD on an empty stack
           "\x80\x02"
           "K\x01(K\x02R."s,  // REDUCE pops across a MARK
           "\x80\x02"
           "K\x01t."s,  // TUPLE without MARK
           "\x80\x02"
           "h\x05."s,  // BINGET of a memo entry never stored
           "\x80\x02"
           "K\x01r\xff\xff\xff\xff."s,  // memo index of 4 G entries
           "\x80\x02"
           "X\xff\xff\xff\x7f"
           "ab."s,  // a 2 GB string in 3 bytes
           "\x80\x02"
           "cmodule_without_name"s,  // GLOBAL cut short
           "\x80\x02"
           "N"s,  // no STOP
           "\x80\x02"
           "NN."s,  // two objects at STOP
           "\x80\x02"
           "(N."s,  // MARK still open at STOP
           "\x80\x02"
           "\xff."s,  // unknown opcode
           "\x80\x02"
           "}q\x00(K\x01h\x00u."s,  // a dict made to hold itself
           "\x80\x02"
           "N."s,  // a well-formed pickle that is not a module
           absl::StrCat("\x80\x02", Global("os", "system"), "(", Str("true"), "tR."),  // code
           absl::StrCat("\x80\x02", Global("__torch__", "Other"), ")\x81}b."),  // other class
           Module(Str("w0") + Tensor("0", 0, Int(1), Int(1), "LongStorage")),   // not floats
           Module(Str("w0") + Tensor("0", 0, Int(1) + Int(1), Int(1))),         // sizes != strides
           absl::StrCat("\x80\x02)", std::string(40, '\x85'), "."),             // nested 41 deep
           absl::StrCat("\x80\x02", std::string(200000, 'N'), "."),             // 200,000 objects
           absl::StrCat("\x80\x02", Global("__torch__", "KvlearnReuseMlp"), ")\x81}(", w0,
                        "ubq\x03}(K\x01h\x03ub."),  // a module put in a dict
       }) {
    auto t = ReadModulePickle(bad, kClass);
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << testing::PrintToString(bad);
    EXPECT_EQ(t.status().message().find('\n'), std::string::npos) << t.status();
  }
}

}  // namespace
}  // namespace kvlearn
