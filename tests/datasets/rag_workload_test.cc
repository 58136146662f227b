// Invariants of the rag generator: determinism, everything the Mooncake
// reader checks, how many requests read a document another request read (a
// function of the burst size and the corpus), burstiness, and the mean
// prompt length the defaults stand for.
#include <cstdint>
#include <unordered_map>

#include "datasets/workload_generator.h"
#include "gtest/gtest.h"
#include "tests/support/common_prefix_blocks.h"
#include "tests/support/same_trace.h"
#include "tests/support/well_formed_trace.h"

namespace kvlearn {
namespace {

RagWorkloadOptions Small(uint64_t seed = 1) {
  RagWorkloadOptions o;
  o.seed = seed;
  o.requests = 4000;
  return o;
}

// Requests whose first document starts a prefix some other request also has.
// With one system prompt of s full blocks, block s holds the prompt's tail and
// the first document's start, so it is shared exactly when the first
// document (after that prompt) is.
size_t RequestsReadingASharedDocument(const Trace& trace) {
  const size_t s = CommonPrefixBlocks(trace);
  std::unordered_map<uint64_t, int> uses;
  for (const TraceRequest& r : trace.requests) {
    const auto ids = trace.BlocksOf(r);
    if (ids.size() > s) ++uses[ids[s]];
  }
  size_t shared = 0;
  for (const TraceRequest& r : trace.requests) {
    const auto ids = trace.BlocksOf(r);
    shared += ids.size() > s && uses[ids[s]] > 1;
  }
  return shared;
}

TEST(RagWorkloadTest, DefaultsValidBadOptionsRefused) {
  EXPECT_TRUE(ValidateRagWorkloadOptions({}).ok());
  RagWorkloadOptions o;
  o.mean_burst_requests = 0.5;
  EXPECT_FALSE(ValidateRagWorkloadOptions(o).ok());
  o = {};
  o.documents = 0;
  EXPECT_FALSE(ValidateRagWorkloadOptions(o).ok());
  o = {};
  o.mean_documents = 0;
  EXPECT_FALSE(ValidateRagWorkloadOptions(o).ok());
  o = {};
  o.bursts_per_second = -1;
  EXPECT_FALSE(ValidateRagWorkloadOptions(o).ok());
  o = {};
  o.max_input_tokens = 1000;  // no room for a system prompt, a document and a question
  EXPECT_FALSE(ValidateRagWorkloadOptions(o).ok());
}

TEST(RagWorkloadTest, SameSeedSameTraceDifferentSeedDifferentTrace) {
  EXPECT_TRUE(SameTrace(GenerateRagTrace(Small(3)), GenerateRagTrace(Small(3))));
  EXPECT_FALSE(SameTrace(GenerateRagTrace(Small(3)), GenerateRagTrace(Small(4))));
}

TEST(RagWorkloadTest, WellFormed) {
  RagWorkloadOptions o = Small();
  ExpectWellFormed(GenerateRagTrace(o), o.requests, o.max_input_tokens);
  o.block_size = 100;          // odd size, so partial blocks are common
  o.max_input_tokens = 20000;  // documents often do not fit and are left out
  ExpectWellFormed(GenerateRagTrace(o), o.requests, o.max_input_tokens);
}

// A burst's requests all read its documents, so every request of a burst of
// two or more reads a shared document. Bursts are geometric with mean B, so
// a request is alone in its burst with chance P(size 1) / B = 1 / B^2
// (1/16 at B = 4); popular documents only add to the share.
TEST(RagWorkloadTest, BurstsAndPopularityShareDocuments) {
  RagWorkloadOptions o = Small();
  o.system_prompts = 1;
  const Trace trace = GenerateRagTrace(o);
  const double b = o.mean_burst_requests;
  EXPECT_GE(RequestsReadingASharedDocument(trace),
            trace.requests.size() * (1 - 1 / (b * b) - 0.03));
  // One request per burst from a uniform corpus of a million documents: 4000
  // draws repeat a first document about 4000^2 / 2e6 = 8 times.
  o.mean_burst_requests = 1;
  o.document_zipf = 0;
  o.documents = 1000000;
  EXPECT_LE(RequestsReadingASharedDocument(GenerateRagTrace(o)), 40u);
  // Same, but a popular-skewed corpus of 2000 (Zipf 1): the ten most popular
  // documents alone are the first pick of H(10) / H(2000) = 2.93 / 8.18 = 36%
  // of the requests, all but ten of them reading a document read before.
  o.documents = 2000;
  o.document_zipf = 1;
  EXPECT_GE(RequestsReadingASharedDocument(GenerateRagTrace(o)), trace.requests.size() * 0.3);
}

// Share of the reads of a shared first document that come within 10 s of
// the previous read of it.
double ShareOfReusesWithinTenSeconds(const Trace& trace) {
  const size_t s = CommonPrefixBlocks(trace);
  std::unordered_map<uint64_t, int64_t> last_read_ms;
  size_t reuses = 0, soon = 0;
  for (const TraceRequest& r : trace.requests) {
    const auto ids = trace.BlocksOf(r);
    if (ids.size() <= s) continue;
    if (auto it = last_read_ms.find(ids[s]); it != last_read_ms.end()) {
      ++reuses;
      soon += r.timestamp_ms - it->second <= 10000;
    }
    last_read_ms[ids[s]] = r.timestamp_ms;
  }
  EXPECT_GT(reuses, trace.requests.size() / 2);
  return static_cast<double>(soon) / static_cast<double>(reuses);
}

// Reuse comes in bursts: all but the first request of a burst (3/4 of the
// requests at mean burst 4) follow the previous one within 10 s with chance
// 1 - e^(-10/2) = 99.3% (mean gap 2 s), and there are at most as many reuses
// as requests, so at least ~74% of the reuses come within 10 s; 2/3 leaves
// room for sampling noise.
TEST(RagWorkloadTest, ReuseComesInBursts) {
  RagWorkloadOptions o = Small();
  o.system_prompts = 1;
  EXPECT_GE(ShareOfReusesWithinTenSeconds(GenerateRagTrace(o)), 2.0 / 3);
  // Spread out (mean gap 60 s): a follower lands within 10 s with chance
  // 1 - e^(-1/6) = 15%.
  o.mean_burst_gap_s = 60;
  EXPECT_LT(ShareOfReusesWithinTenSeconds(GenerateRagTrace(o)), 0.5);
}

// Mean prompt at the defaults: system prompt 1500 e^(0.5^2/2) = 1700 tokens,
// E[documents] = 2 of 6000 e^(0.5^2/2) = 6800, question 100 e^(0.8^2/2) = 138:
// 15,400 tokens, 30.1 blocks of 512, plus half a block for the partial last
// one. Each seed draws its own document lengths and the popular ones weigh
// most, so the band is +-20%; checked on several seeds.
TEST(RagWorkloadTest, MeanPromptIsAboutThirtyBlocks) {
  for (uint64_t seed : {1, 2, 3, 4, 5}) {
    const Trace trace = GenerateRagTrace(Small(seed));
    const double mean_blocks =
        static_cast<double>(trace.hash_ids.size()) / static_cast<double>(trace.requests.size());
    EXPECT_GT(mean_blocks, 30.6 * 0.8) << "seed " << seed;
    EXPECT_LT(mean_blocks, 30.6 * 1.2) << "seed " << seed;
  }
}

}  // namespace
}  // namespace kvlearn
