// Reading model files without LibTorch: the zip archive, the module's
// pickle and LearnedModel::Load's messages, on bytes written by hand here. (model_file_test
// compares the reader with LibTorch's own on files LibTorch wrote.)
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "models/learned_model.h"
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

// Raw deflate (no zlib header), as zip's method 8 stores a record.
std::string Deflate(const std::string& data) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, Z_BEST_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY),
            Z_OK);
  std::string out(deflateBound(&z, data.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// A zip laid out as APPNOTE.TXT describes (local headers, then the central
// directory, then its end record); an entry of `method` 8 is deflated, one of
// any other method is written as it is.
struct ZipEntry {
  std::string name, data;
  uint16_t method = 0;
};

std::string Zip(const std::vector<ZipEntry>& entries) {
  std::string out, directory;
  for (const ZipEntry& e : entries) {
    const uint32_t crc =
        crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(e.data.data()), e.data.size());
    const std::string packed = e.method == 8 ? Deflate(e.data) : e.data;
    const std::string common =
        absl::StrCat(Le(0, 2), Le(e.method, 2), Le(0, 4), Le(crc, 4), Le(packed.size(), 4),
                     Le(e.data.size(), 4), Le(e.name.size(), 2), Le(0, 2));
    const size_t local = out.size();
    absl::StrAppend(&out, Le(0x04034b50, 4), Le(20, 2), common, e.name, packed);
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

// The TorchScript source is deflated: Text inflates it (Record refuses it),
// and refuses a damaged stream, a stated size it does not inflate to, a size
// past the limit and other compression methods.
TEST(TorchArchiveTest, TextInflatesTheSourceAndRefusesDamagedStreams) {
  const std::string source = "class KvlearnReuseMlp(Module):\n  def forward(self, x):\n" +
                             std::string(300, ' ') + "return x\n";
  const std::string good = Zip({{"m/data.pkl", "pickle"}, {"m/code/__torch__.py", source, 8}});
  auto a = TorchArchive::Parse(good);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a->Text("code/__torch__.py"), source);
  EXPECT_EQ(*a->Text("data.pkl"), "pickle");
  EXPECT_NE(a->Record("code/__torch__.py").status().message().find("compressed"),
            std::string::npos);
  ASSERT_LT(Deflate(source).size(), source.size()) << "the test needs a real deflated stream";

  // Every byte of the deflated stream changed in turn (but the last, whose
  // high bits may be padding): refused each time, by the inflater or by the
  // CRC, never read past.
  const size_t packed_at = good.find("code/__torch__.py") + std::string("code/__torch__.py").size();
  const size_t packed_size = Deflate(source).size();
  for (size_t i = 0; i + 1 < packed_size; ++i) {
    std::string damaged = good;
    damaged[packed_at + i] = static_cast<char>(damaged[packed_at + i] ^ 0x5a);
    auto d = TorchArchive::Parse(damaged);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->Text("code/__torch__.py").status().code(), absl::StatusCode::kInvalidArgument)
        << "byte " << i;
  }
  // The central directory's uncompressed size (offset 24 of its entry).
  const size_t second_entry = good.rfind("PK\x01\x02"sv);
  for (const auto& [stated, what] : std::vector<std::pair<uint32_t, std::string>>{
           {static_cast<uint32_t>(source.size() + 1), "does not inflate to its stated"},
           {static_cast<uint32_t>(source.size() - 1), "does not inflate to its stated"},
           {(1u << 20) + 1, "inflates to more than"}}) {
    std::string wrong = good;
    wrong.replace(second_entry + 24, 4, Le(stated, 4));
    auto w = TorchArchive::Parse(wrong);
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_NE(w->Text("code/__torch__.py").status().message().find(what), std::string::npos)
        << stated << ": " << w->Text("code/__torch__.py").status();
  }
  auto bzip = TorchArchive::Parse(Zip({{"m/code/__torch__.py", source, 12}}));
  ASSERT_TRUE(bzip.ok()) << bzip.status();
  EXPECT_NE(bzip->Text("code/__torch__.py").status().message().find("compression method 12"),
            std::string::npos);
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

constexpr char kClass[] = "KvlearnReuseMlp";

TEST(ModulePickleTest, ReadsTheTensorsOfAHandWrittenModuleState) {
  const std::string pickle = Module(absl::StrCat(
      Str("w0"), Tensor("0", 0, Int(2) + Int(3), Int(3) + Int(1)), Str("b0"),
      Tensor("1", 4, Int(2), Int(1), "DoubleStorage"), Str("note"), Str("not a tensor: skipped")));
  auto state = ReadModulePickle(pickle, kClass);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->class_module, "__torch__");
  const auto* t = &state->tensors;
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
  EXPECT_EQ(m->tensors.at("w0").sizes, (std::vector<int64_t>{6}));
  EXPECT_EQ(m->tensors.at("b0").storage_key, "1");
  // A class Python defined in a module of its own: TorchScript puts the
  // module in the class's name, and the source under code/__torch__/<module>.
  auto nested =
      ReadModulePickle(absl::StrCat("\x80\x02", Global("__torch__.lab.models", "KvlearnReuseMlp"),
                                    ")\x81}(", Str("w0"), Tensor("0", 0, Int(1), Int(1)), "ub."),
                       kClass);
  ASSERT_TRUE(nested.ok()) << nested.status();
  EXPECT_EQ(nested->class_module, "__torch__.lab.models");
  EXPECT_EQ(nested->tensors.size(), 1u);
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
           absl::StrCat("\x80\x02", Global("__main__", "KvlearnReuseMlp"),
                        ")\x81}b."),  // not TorchScript's
           absl::StrCat("\x80\x02", Global("__torch__x", "KvlearnReuseMlp"), ")\x81}b."),
           Module(Str("w0") + Tensor("0", 0, Int(1), Int(1), "LongStorage")),  // not floats
           Module(Str("w0") + Tensor("0", 0, Int(1) + Int(1), Int(1))),        // sizes != strides
           absl::StrCat("\x80\x02)", std::string(40, '\x85'), "."),            // nested 41 deep
           absl::StrCat("\x80\x02", std::string(200000, 'N'), "."),            // 200,000 objects
           absl::StrCat("\x80\x02", Global("__torch__", "KvlearnReuseMlp"), ")\x81}(", w0,
                        "ubq\x03}(K\x01h\x03ub."),  // a module put in a dict
       }) {
    auto t = ReadModulePickle(bad, kClass);
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << testing::PrintToString(bad);
    EXPECT_EQ(t.status().message().find('\n'), std::string::npos) << t.status();
  }
  // A module of another class says which class it is, its name made
  // printable: a Python author sees what to rename.
  auto other = ReadModulePickle(
      absl::StrCat("\x80\x02", Global("__main__", "My\x01Mlp"), ")\x81}b."), kClass);
  EXPECT_NE(other.status().message().find(
                "class '__main__.My?Mlp', not a TorchScript class KvlearnReuseMlp"),
            std::string::npos)
      << other.status();
}

// Found by fuzz/model_file_fuzzer: a file without w0/b0 is refused naming
// the tensors it holds, and a name holding a newline broke the message's one
// line. The names are now made printable.
TEST(ModelReaderTest, AFileWithoutLayersNamesItsTensorsOnOneLine) {
  const std::string path = ::testing::TempDir() + "kvlearn_no_layers.pt";
  {
    std::ofstream out(path, std::ios::binary);
    out << Zip({{"m/data.pkl", Module(Str("fc\n0") + Tensor("0", 0, Int(1), Int(1)))},
                {"m/data/0", std::string(4, '\0')}});
  }
  auto m = LearnedModel::Load(path);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("no tensors w0 and b0"), std::string::npos) << m.status();
  EXPECT_NE(m.status().message().find("(tensors in the file: fc?0)"), std::string::npos)
      << m.status();
  EXPECT_EQ(m.status().message().find('\n'), std::string::npos) << m.status();
  std::remove(path.c_str());
}

}  // namespace
}  // namespace kvlearn
