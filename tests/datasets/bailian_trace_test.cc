// Bailian's trace shape (float seconds, conversation ids, request type and
// turn, 16-token blocks) read beside Mooncake's, detected from the first line.
#include <unistd.h>

#include <filesystem>
#include <string>

#include "datasets/mooncake_reader.h"
#include "datasets/workload_generator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvlearn {
namespace {

using ::testing::HasSubstr;

// Two conversations: chat 7 (two turns), then chat 9. Blocks of 16 tokens:
// 33 tokens need 3 ids, 16 need 1, 40 need 3.
constexpr char kBailian[] =
    R"({"chat_id": 7, "parent_chat_id": -1, "timestamp": 0.5, "input_length": 33, "output_length": 4, "type": "text", "turn": 1, "hash_ids": [1, 2, 3]})"
    "\n"
    R"({"chat_id": 8, "parent_chat_id": 7, "timestamp": 1.25, "input_length": 16, "output_length": 2, "type": "search", "turn": 2, "hash_ids": [1]})"
    "\n"
    R"({"chat_id": 9, "parent_chat_id": -1, "timestamp": 2, "input_length": 40, "output_length": 1, "type": "audio", "turn": 1, "hash_ids": [5, 6, 7]})"
    "\n";

TEST(BailianTraceTest, AFirstLineWithAChatIdIsReadAsBailianWithItsFields) {
  auto trace = ParseTrace(kBailian, "b.jsonl", {});
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->block_size, 16u);  // the format's default
  ASSERT_EQ(trace->requests.size(), 3u);
  const TraceRequest& a = trace->requests[0];
  const TraceRequest& b = trace->requests[1];
  const TraceRequest& c = trace->requests[2];
  EXPECT_EQ(a.timestamp_ms, 500);
  EXPECT_EQ(b.timestamp_ms, 1250);
  EXPECT_EQ(c.timestamp_ms, 2000);  // an integer number of seconds is fine too
  EXPECT_EQ(a.type, RequestType::kText);
  EXPECT_EQ(b.type, RequestType::kSearch);
  EXPECT_EQ(c.type, RequestType::kOther);  // a label outside the paper's four
  EXPECT_EQ(a.turn, 1);
  EXPECT_EQ(b.turn, 2);
  EXPECT_EQ(b.chat_id, 8);
  EXPECT_EQ(b.parent_chat_id, 7);
  EXPECT_EQ(a.parent_chat_id, -1);
  EXPECT_EQ(trace->BlocksOf(c).size(), 3u);
  EXPECT_EQ(trace->TokensOfBlock(c, 2), 8u);  // 40 - 2 * 16
}

TEST(BailianTraceTest, DetectionLooksAtTheFirstLineThatIsNotBlank) {
  EXPECT_EQ(DetectTraceFormat(std::string("\n  \n") + kBailian), TraceFormat::kBailian);
  EXPECT_EQ(DetectTraceFormat(
                R"({"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1]})"),
            TraceFormat::kMooncake);
  EXPECT_EQ(DetectTraceFormat(""), TraceFormat::kMooncake);
}

TEST(BailianTraceTest, ANamedFormatOverridesDetection) {
  TraceReadOptions mooncake;
  mooncake.format = TraceFormat::kMooncake;
  mooncake.block_size = 16;
  auto refused = ParseTrace(kBailian, "b.jsonl", mooncake);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(),
              HasSubstr("b.jsonl:1: field 'timestamp': expected an integer, got 0.5"));
}

TEST(BailianTraceTest, BadFieldsAreNamedWithTheirLine) {
  const std::string head =
      R"({"chat_id": 1, "parent_chat_id": -1, "timestamp": 0.5, "input_length": 16, "output_length": 1, "type": "text", "turn": 1, "hash_ids": [1]})"
      "\n";
  auto error_of = [&](const std::string& second_line) {
    auto trace = ParseTrace(head + second_line + "\n", "b.jsonl", {});
    return trace.ok() ? std::string("accepted") : std::string(trace.status().message());
  };
  EXPECT_THAT(
      error_of(
          R"({"chat_id": 2, "timestamp": "soon", "input_length": 16, "output_length": 1, "hash_ids": [2]})"),
      HasSubstr("b.jsonl:2: field 'timestamp': expected seconds as a number, got a string"));
  EXPECT_THAT(
      error_of(
          R"({"chat_id": 2, "timestamp": -1.5, "input_length": 16, "output_length": 1, "hash_ids": [2]})"),
      HasSubstr("b.jsonl:2: field 'timestamp': must be seconds >= 0"));
  EXPECT_THAT(
      error_of(
          R"({"chat_id": 2, "parent_chat_id": -2, "timestamp": 1, "input_length": 16, "output_length": 1, "hash_ids": [2]})"),
      HasSubstr("b.jsonl:2: field 'parent_chat_id': must be >= -1, got -2"));
  EXPECT_THAT(
      error_of(
          R"({"chat_id": 2, "timestamp": 1, "input_length": 16, "output_length": 1, "type": 3, "hash_ids": [2]})"),
      HasSubstr("b.jsonl:2: field 'type': expected a string, got a number"));
  EXPECT_THAT(
      error_of(
          R"({"chat_id": 2, "timestamp": 1, "input_length": 17, "output_length": 1, "hash_ids": [2]})"),
      HasSubstr("b.jsonl:2: field 'hash_ids': expected 2 ids (input_length 17 at block_size 16)"));
  EXPECT_THAT(
      error_of(
          R"({"chat_id": 2, "timestamp": 0.25, "input_length": 16, "output_length": 1, "hash_ids": [2]})"),
      HasSubstr("b.jsonl:2: field 'timestamp': goes backwards from 500 to 250"));
  // type, turn and the conversation ids are optional.
  EXPECT_EQ(
      error_of(R"({"timestamp": 1, "input_length": 16, "output_length": 1, "hash_ids": [2]})"),
      "accepted");
}

TEST(BailianTraceTest, AGeneratedTraceRoundTripsThroughBailian) {
  ChatWorkloadOptions options;
  options.requests = 200;
  options.block_size = 16;
  options.seed = 15;
  const Trace generated = GenerateChatTrace(options);
  const std::string path = (std::filesystem::path(::testing::TempDir()) /
                            ("kvlearn_bailian_" + std::to_string(getpid()) + ".jsonl"))
                               .string();
  ASSERT_TRUE(WriteTrace(generated, path, TraceFormat::kBailian).ok());
  auto back = ReadTrace(path, {});
  std::filesystem::remove(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->block_size, 16u);
  ASSERT_EQ(back->requests.size(), generated.requests.size());
  EXPECT_EQ(back->Fingerprint(), generated.Fingerprint());  // times, lengths and ids
  for (size_t i = 0; i < generated.requests.size(); ++i) {
    // A generated request has no conversation id: it is written as its index.
    EXPECT_EQ(back->requests[i].chat_id, static_cast<int64_t>(i));
    EXPECT_EQ(back->requests[i].type, RequestType::kText);
  }
}

TEST(BailianTraceTest, FormatNamesRoundTrip) {
  for (TraceFormat f : {TraceFormat::kAuto, TraceFormat::kMooncake, TraceFormat::kBailian}) {
    EXPECT_EQ(TraceFormatFromName(TraceFormatName(f)), f);
  }
  EXPECT_FALSE(TraceFormatFromName("csv").has_value());
  EXPECT_EQ(DefaultBlockSize(TraceFormat::kMooncake), 512u);
  EXPECT_EQ(DefaultBlockSize(TraceFormat::kBailian), 16u);
}

}  // namespace
}  // namespace kvlearn
