#include "datasets/mooncake_reader.h"

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvlearn {
namespace {

using ::testing::HasSubstr;

constexpr char kShippedTrace[] = KVLEARN_SOURCE_DIR "/datasets/mooncake_conversation_trace.jsonl";

// Two good lines (timestamps 0 and 10, block size 512); bad lines go on line 3.
constexpr char kGoodLines[] =
    R"({"timestamp": 0, "input_length": 1000, "output_length": 10, "hash_ids": [1, 2]})"
    "\n"
    R"({"timestamp": 10, "input_length": 513, "output_length": 0, "hash_ids": [1, 3]})"
    "\n";

// Each test gets its own directory under the GoogleTest temp dir.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "_" + info->name();
    for (char& c : name) {
      if (c == '/') c = '_';
    }
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("kvlearn_" + name + "_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string WriteFile(const std::string& name, const std::string& contents) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << contents;
    return path;
  }

  std::filesystem::path dir_;
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// ---- One test per kind of bad line -------------------------------------------------

struct BadLineCase {
  std::string name;
  std::string line;   // placed on line 3, after kGoodLines
  std::string field;  // field the error must name
  std::string what;   // substring of the explanation
};

void PrintTo(const BadLineCase& c, std::ostream* os) { *os << c.name; }

class BadLineTest : public TempDirTest, public ::testing::WithParamInterface<BadLineCase> {};

TEST_P(BadLineTest, NamesLineAndField) {
  const BadLineCase& c = GetParam();
  const std::string path = WriteFile("bad.jsonl", std::string(kGoodLines) + c.line + "\n");
  const absl::StatusOr<Trace> trace = ReadMooncakeTrace(path, {});
  ASSERT_FALSE(trace.ok());
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(trace.status().message(), HasSubstr("bad.jsonl:3: field '" + c.field + "': "));
  EXPECT_THAT(trace.status().message(), HasSubstr(c.what));
}

// Lines are built from a good line with one thing changed.
std::string Line(const std::string& timestamp, const std::string& input_length,
                 const std::string& output_length, const std::string& hash_ids) {
  std::string line = "{";
  auto add = [&](const char* key, const std::string& value) {
    if (value.empty()) return;  // empty = leave the field out
    if (line.size() > 1) line += ", ";
    line += std::string("\"") + key + "\": " + value;
  };
  add("timestamp", timestamp);
  add("input_length", input_length);
  add("output_length", output_length);
  add("hash_ids", hash_ids);
  return line + "}";
}

INSTANTIATE_TEST_SUITE_P(
    MooncakeReader, BadLineTest,
    ::testing::Values(
        BadLineCase{"MalformedJson", R"({"timestamp": 20, "input_length": 1000,)", "json",
                    "malformed JSON"},
        BadLineCase{"MissingComma", R"({"timestamp": 20 "input_length": 1})", "json",
                    "malformed JSON"},
        BadLineCase{"NotAnObject", "[20, 1000, 10, [1, 2]]", "json", "expected an object"},
        BadLineCase{"TrailingContent", Line("20", "1000", "10", "[1, 2]") + " {}", "json",
                    "after the object"},
        BadLineCase{"MissingTimestamp", Line("", "1000", "10", "[1, 2]"), "timestamp", "missing"},
        BadLineCase{"MissingInputLength", Line("20", "", "10", "[1, 2]"), "input_length",
                    "missing"},
        BadLineCase{"MissingOutputLength", Line("20", "1000", "", "[1, 2]"), "output_length",
                    "missing"},
        BadLineCase{"MissingHashIds", Line("20", "1000", "10", ""), "hash_ids", "missing"},
        BadLineCase{"TimestampIsString", Line("\"20\"", "1000", "10", "[1, 2]"), "timestamp",
                    "expected an integer, got a string"},
        BadLineCase{"InputLengthIsFloat", Line("20", "1000.5", "10", "[1, 2]"), "input_length",
                    "expected an integer, got 1000.5"},
        BadLineCase{"OutputLengthIsNull", Line("20", "1000", "null", "[1, 2]"), "output_length",
                    "expected an integer, got null"},
        BadLineCase{"HashIdsIsNumber", Line("20", "1000", "10", "7"), "hash_ids",
                    "expected an array, got a number"},
        BadLineCase{"NegativeTimestamp", Line("-5", "1000", "10", "[1, 2]"), "timestamp",
                    "must be >= 0, got -5"},
        BadLineCase{"NegativeInputLength", Line("20", "-1000", "10", "[1, 2]"), "input_length",
                    "must be >= 0, got -1000"},
        BadLineCase{"NegativeOutputLength", Line("20", "1000", "-1", "[1, 2]"), "output_length",
                    "must be >= 0, got -1"},
        BadLineCase{"InputLengthTooLarge", Line("20", "4294967296", "10", "[1, 2]"), "input_length",
                    "must be <= 4294967295"},
        BadLineCase{"ZeroInputLength", Line("20", "0", "10", "[1]"), "input_length",
                    "must be > 0, got 0"},
        BadLineCase{"EmptyHashIds", Line("20", "1000", "10", "[]"), "hash_ids", "is empty"},
        BadLineCase{"NegativeId", Line("20", "1000", "10", "[1, -2]"), "hash_ids",
                    "element 1: must be >= 0, got -2"},
        BadLineCase{"StringId", Line("20", "1000", "10", R"([1, "2"])"), "hash_ids",
                    "element 1: expected an integer, got a string"},
        BadLineCase{"FloatId", Line("20", "1000", "10", "[1.5, 2]"), "hash_ids",
                    "element 0: expected an integer, got 1.5"},
        BadLineCase{"IdBeyond64Bits", Line("20", "1000", "10", "[1, 18446744073709551616]"),
                    "hash_ids", "element 1"},
        BadLineCase{"TooFewIds", Line("20", "1025", "10", "[1, 2]"), "hash_ids",
                    "expected 3 ids (input_length 1025 at block_size 512), got 2"},
        BadLineCase{"TooManyIds", Line("20", "512", "10", "[1, 2]"), "hash_ids",
                    "expected 1 ids (input_length 512 at block_size 512), got 2"},
        BadLineCase{"LargestInputLengthNeedsManyIds", Line("20", "4294967295", "10", "[1]"),
                    "hash_ids", "expected 8388608 ids"},
        BadLineCase{"RepeatedId", Line("20", "1500", "10", "[4, 5, 4]"), "hash_ids",
                    "id 4 repeats (elements 0 and 2)"},
        BadLineCase{"TimestampGoesBackwards", Line("9", "1000", "10", "[1, 2]"), "timestamp",
                    "goes backwards from 10 to 9"},
        BadLineCase{"DuplicateKey",
                    R"({"timestamp": 20, "timestamp": 21, "input_length": 1, )"
                    R"("output_length": 1, "hash_ids": [1]})",
                    "timestamp", "appears more than once"}),
    [](const ::testing::TestParamInfo<BadLineCase>& info) { return info.param.name; });

// ---- Everything else ---------------------------------------------------------------

class MooncakeReaderTest : public TempDirTest {};

TEST_F(MooncakeReaderTest, ReadsGoodLines) {
  const std::string path = WriteFile("good.jsonl", kGoodLines);
  const absl::StatusOr<Trace> trace = ReadMooncakeTrace(path, {});
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->source, path);
  EXPECT_EQ(trace->block_size, 512u);
  ASSERT_EQ(trace->requests.size(), 2u);
  const TraceRequest& second = trace->requests[1];
  EXPECT_EQ(second.timestamp_ms, 10);
  EXPECT_EQ(second.input_length, 513u);
  EXPECT_EQ(second.output_length, 0u);
  EXPECT_EQ(second.line, 2u);
  EXPECT_THAT(std::vector<uint64_t>(trace->BlocksOf(second).begin(), trace->BlocksOf(second).end()),
              ::testing::ElementsAre(1, 3));
}

TEST_F(MooncakeReaderTest, FieldOrderAndUnknownKeysDoNotMatter) {
  const std::string path = WriteFile(
      "reordered.jsonl",
      R"({"hash_ids": [7], "note": {"a": [1, 2]}, "output_length": 3, "input_length": 5, )"
      R"("timestamp": 4})"
      "\n");
  const absl::StatusOr<Trace> trace = ReadMooncakeTrace(path, {});
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(trace->requests.size(), 1u);
  EXPECT_EQ(trace->requests[0].timestamp_ms, 4);
  EXPECT_EQ(trace->requests[0].input_length, 5u);
  EXPECT_EQ(trace->requests[0].output_length, 3u);
  EXPECT_EQ(trace->hash_ids, std::vector<uint64_t>{7});
}

TEST_F(MooncakeReaderTest, BlankLinesAreSkippedButKeepLineNumbers) {
  const std::string path =
      WriteFile("bad.jsonl", "\n   \n" + Line("0", "1", "1", "[1]") + "\r\n\t\n" +
                                 Line("0", "1", "1", "[]") + "\n");
  const absl::StatusOr<Trace> trace = ReadMooncakeTrace(path, {});
  ASSERT_FALSE(trace.ok());
  EXPECT_THAT(trace.status().message(), HasSubstr("bad.jsonl:5: field 'hash_ids': is empty"));

  const absl::StatusOr<Trace> lenient = ReadMooncakeTrace(path, {.lenient = true});
  ASSERT_TRUE(lenient.ok()) << lenient.status();
  ASSERT_EQ(lenient->requests.size(), 1u);
  EXPECT_EQ(lenient->requests[0].line, 3u);
  EXPECT_EQ(lenient->skipped_lines, 1u);  // blank lines are not counted
}

TEST_F(MooncakeReaderTest, MissingFileIsNotFoundAndNamesPath) {
  const std::string path = (dir_ / "no_such_trace.jsonl").string();
  const absl::StatusOr<Trace> trace = ReadMooncakeTrace(path, {});
  ASSERT_FALSE(trace.ok());
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(trace.status().message(), HasSubstr(path));
}

TEST_F(MooncakeReaderTest, LenientSkipsAndCountsExactlyTheBadLines) {
  const std::vector<std::string> lines = {
      Line("0", "1000", "10", "[1, 2]"),   // 1 good
      Line("100", "1000", "10", "[1]"),    // 2 bad: one id short (its timestamp must not count)
      Line("50", "1000", "10", "[1, 3]"),  // 3 good: compared with line 1, not line 2
      "{not json",                         // 4 bad
      Line("40", "1000", "10", "[1, 4]"),  // 5 bad: goes backwards from 50
      Line("60", "0", "10", "[5]"),        // 6 bad: empty prompt
      Line("60", "600", "10", "[6, 7]"),   // 7 good
      Line("70", "600", "10", "[8, 8]"),   // 8 bad: repeated id
  };
  std::string contents;
  for (const std::string& line : lines) contents += line + "\n";
  const std::string path = WriteFile("mixed.jsonl", contents);

  const absl::StatusOr<Trace> trace = ReadMooncakeTrace(path, {.lenient = true});
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->skipped_lines, 5u);
  std::vector<uint32_t> accepted;
  for (const TraceRequest& r : trace->requests) accepted.push_back(r.line);
  EXPECT_THAT(accepted, ::testing::ElementsAre(1, 3, 7));
  // Rejected lines leave no ids behind.
  EXPECT_EQ(trace->hash_ids, (std::vector<uint64_t>{1, 2, 1, 3, 6, 7}));
  EXPECT_EQ(trace->requests[2].first_block, 4u);

  const absl::StatusOr<Trace> strict = ReadMooncakeTrace(path, {});
  ASSERT_FALSE(strict.ok());
  EXPECT_THAT(strict.status().message(), HasSubstr("mixed.jsonl:2: field 'hash_ids'"));
}

TEST_F(MooncakeReaderTest, BlockSizeOptionSetsExpectedIdCount) {
  const std::string path = WriteFile("b256.jsonl", Line("0", "513", "1", "[1, 2, 3]") + "\n");
  const absl::StatusOr<Trace> trace = ReadMooncakeTrace(path, {.block_size = 256});
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->block_size, 256u);
  EXPECT_FALSE(ReadMooncakeTrace(path, {.block_size = 512}).ok());
  EXPECT_FALSE(ReadMooncakeTrace(path, {.block_size = 0}).ok());
}

TEST_F(MooncakeReaderTest, ParseNamesSourceInErrors) {
  const absl::StatusOr<Trace> trace =
      ParseMooncakeTrace(std::string(kGoodLines) + "{}\n", "memory", {});
  ASSERT_FALSE(trace.ok());
  EXPECT_THAT(trace.status().message(), HasSubstr("memory:3: field 'timestamp': missing"));

  const absl::StatusOr<Trace> good = ParseMooncakeTrace(kGoodLines, "memory", {});
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->source, "memory");
  EXPECT_EQ(good->requests.size(), 2u);
}

TEST_F(MooncakeReaderTest, LastLineWithoutNewlineIsRead) {
  const absl::StatusOr<Trace> trace =
      ParseMooncakeTrace(std::string(kGoodLines) + Line("11", "1", "1", "[9]"), "memory", {});
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->requests.size(), 3u);
}

TEST_F(MooncakeReaderTest, WriteThenReadRoundTripsExactly) {
  Trace original;
  original.block_size = 4;
  const uint64_t big = std::numeric_limits<uint64_t>::max();
  original.Add(0, 9, 0, std::vector<uint64_t>{0, 1, big});
  original.Add(0, 4, 7, std::vector<uint64_t>{0});
  // Extremes: large timestamp, the largest output length, a long chain of huge ids.
  std::vector<uint64_t> long_chain;
  for (uint64_t i = 0; i < 300; ++i) long_chain.push_back(big - i);
  original.Add(1234567890123, 1197, 4294967295u, long_chain);

  const std::string path = (dir_ / "round.jsonl").string();
  ASSERT_TRUE(WriteMooncakeTrace(original, path).ok());
  const absl::StatusOr<Trace> read = ReadMooncakeTrace(path, {.block_size = 4});
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->requests.size(), original.requests.size());
  for (size_t i = 0; i < original.requests.size(); ++i) {
    const TraceRequest& a = original.requests[i];
    const TraceRequest& b = read->requests[i];
    EXPECT_EQ(a.timestamp_ms, b.timestamp_ms);
    EXPECT_EQ(a.input_length, b.input_length);
    EXPECT_EQ(a.output_length, b.output_length);
    EXPECT_EQ(a.first_block, b.first_block);
    EXPECT_EQ(a.num_blocks, b.num_blocks);
    EXPECT_EQ(b.line, i + 1);
  }
  EXPECT_EQ(read->hash_ids, original.hash_ids);
}

TEST_F(MooncakeReaderTest, WriteFailsWithPathWhenDirectoryIsMissing) {
  const std::string path = (dir_ / "missing_dir" / "out.jsonl").string();
  const absl::Status status = WriteMooncakeTrace(Trace{}, path);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr(path));
}

TEST_F(MooncakeReaderTest, ShippedTraceHasKnownSize) {
  const absl::StatusOr<Trace> trace = ReadMooncakeTrace(kShippedTrace, {});
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->requests.size(), 12031u);   // wc -l
  EXPECT_EQ(trace->hash_ids.size(), 288500u);  // sum of hash_ids lengths
  EXPECT_EQ(trace->skipped_lines, 0u);
}

// ParseMooncakeTrace reads lines in place in an unpadded buffer (all but the
// last few bytes); it must agree with the file reader, which pads.
TEST_F(MooncakeReaderTest, ParsingShippedBytesMatchesReadingTheFile) {
  const absl::StatusOr<Trace> read = ReadMooncakeTrace(kShippedTrace, {});
  const absl::StatusOr<Trace> parsed = ParseMooncakeTrace(Slurp(kShippedTrace), "shipped", {});
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->requests.size(), read->requests.size());
  EXPECT_TRUE(parsed->hash_ids == read->hash_ids);
  EXPECT_EQ(parsed->requests.back().line, 12031u);
  EXPECT_EQ(parsed->requests.back().timestamp_ms, read->requests.back().timestamp_ms);
}

TEST_F(MooncakeReaderTest, WritingShippedTraceReproducesItByteForByte) {
  const absl::StatusOr<Trace> trace = ReadMooncakeTrace(kShippedTrace, {});
  ASSERT_TRUE(trace.ok()) << trace.status();
  const std::string path = (dir_ / "copy.jsonl").string();
  ASSERT_TRUE(WriteMooncakeTrace(*trace, path).ok());
  EXPECT_TRUE(Slurp(path) == Slurp(kShippedTrace));  // not EXPECT_EQ: 3 MB diff output
}

}  // namespace
}  // namespace kvlearn
