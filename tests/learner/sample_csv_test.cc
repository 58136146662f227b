// WriteSamplesCsv on a SampleSet written by hand: the columns docs promise,
// censored labels and a next use that never comes as empty cells, the split
// by request; refusals leave no file behind.
#include "learner/sample_csv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "features/feature_schema.h"

namespace kvlearn {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> ReadLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Two accesses: request 3 (training) with every feature 0.5, reused within
// 10 s but not within 1 s (both known), next use in 4.25 s having saved
// 12.5 ms; request 9 (validation) with feature k = k, its 10 s label
// censored, never used again.
SampleSet HandSamples() {
  SampleSet s;
  s.num_horizons = 2;
  s.features.assign(kNumFeatures, 0.5f);
  for (size_t k = 0; k < kNumFeatures; ++k) s.features.push_back(static_cast<float>(k));
  s.reused = {0, 1, 0, 0};
  s.known = {1, 1, 1, 0};
  s.request = {3, 9};
  s.block = {0, 1};
  s.next_use_seconds = {4.25, std::numeric_limits<double>::infinity()};
  s.requests_to_next_use = {2, 0};
  s.saved_ms = {12.5f, 0};
  return s;
}

TEST(SampleCsvTest, WritesTheDocumentedColumnsRowByRow) {
  const std::string path = (fs::temp_directory_path() / "kvlearn_samples_test.csv").string();
  ASSERT_TRUE(WriteSamplesCsv(path, HandSamples(), std::vector<double>{1, 10}, 5).ok());
  const std::vector<std::string> lines = ReadLines(path);
  ASSERT_EQ(lines.size(), 3u);

  std::vector<std::string> header = {"request", "split"};
  for (auto name : kFeatureNames) header.emplace_back(name);
  for (auto c : {"reused_within_1s", "reused_within_10s", "next_use_seconds", "saved_ms"}) {
    header.emplace_back(c);
  }
  EXPECT_EQ(lines[0], absl::StrJoin(header, ","));

  std::vector<std::string> first = {"3", "train"}, second = {"9", "valid"};
  for (size_t k = 0; k < kNumFeatures; ++k) {
    first.push_back("0.5");
    second.push_back(absl::StrCat(k));
  }
  first.insert(first.end(), {"0", "1", "4.25", "12.5"});
  second.insert(second.end(), {"0", "", "", "0"});
  EXPECT_EQ(lines[1], absl::StrJoin(first, ","));
  EXPECT_EQ(lines[2], absl::StrJoin(second, ","));
  EXPECT_FALSE(fs::exists(path + ".partial"));
  fs::remove(path);
}

// Progress comes after each megabyte written, rows counted in order.
TEST(SampleCsvTest, ProgressCountsRowsAsTheyAreWritten) {
  SampleSet s;
  s.num_horizons = 1;
  const size_t rows = 20000;  // about 60 bytes of features a row: over 1 MB
  for (size_t i = 0; i < rows; ++i) {
    s.features.insert(s.features.end(), kNumFeatures, 0.25f);
    s.reused.push_back(1);
    s.known.push_back(1);
    s.request.push_back(static_cast<uint32_t>(i));
    s.block.push_back(0);
    s.next_use_seconds.push_back(1);
    s.requests_to_next_use.push_back(1);
    s.saved_ms.push_back(1);
  }
  const std::string path = (fs::temp_directory_path() / "kvlearn_samples_progress.csv").string();
  std::vector<size_t> heard;
  ASSERT_TRUE(WriteSamplesCsv(path, s, std::vector<double>{1}, 0, [&](size_t done) {
                heard.push_back(done);
              }).ok());
  ASSERT_FALSE(heard.empty());
  EXPECT_TRUE(std::is_sorted(heard.begin(), heard.end()));
  EXPECT_LT(heard.back(), rows);  // the last rows go out after the last full megabyte
  EXPECT_EQ(ReadLines(path).size(), rows + 1);
  fs::remove(path);
}

TEST(SampleCsvTest, RefusalsLeaveNoFile) {
  const std::string path = (fs::temp_directory_path() / "kvlearn_samples_refused.csv").string();
  fs::remove(path);
  // Three horizon names for two labels per sample.
  EXPECT_EQ(WriteSamplesCsv(path, HandSamples(), std::vector<double>{1, 10, 100}, 5).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(path));
  // A directory that does not exist.
  const absl::Status s =
      WriteSamplesCsv("/nonexistent-dir/samples.csv", HandSamples(), std::vector<double>{1, 10}, 5);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("/nonexistent-dir/samples.csv"), std::string::npos) << s;
}

}  // namespace
}  // namespace kvlearn
