// Issue 13, "model swaps journaled": ReloadModel used to swap the model
// without a trace in the log, so a restarted sidecar scored with its start-up
// model. Now each swap is journaled (path and version) at its place among the
// decisions and redone at start-up; a file that is gone (or changed) by then
// is reported in one line and the pools keep the model they had before it.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "server/model_swap_record.h"
#include "tests/server/restart_compare.h"
#include "tests/support/test_model.h"

namespace kvlearn {
namespace {

class ModelSwapJournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(CopyTestModel(first_, 1));
    ASSERT_TRUE(CopyTestModel(second_, 2));
  }
  SidecarOptions Options(const std::string& data) const {
    SidecarOptions o = RestartTestOptions(data, "learned");
    o.model_path = first_;
    return o;
  }
  static std::string Reload(v1::Retention::Stub& stub, const std::string& path) {
    grpc::ClientContext ctx;
    v1::ReloadModelRequest r;
    r.set_path(path);
    v1::ReloadModelResponse out;
    const grpc::Status s = stub.ReloadModel(&ctx, r, &out);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return out.model_version();
  }
  // The trace, a swap to the second model, the trace again.
  std::string FeedWithSwap(const Fed& fed, SidecarServer& server) const {
    Feed(fed, server.port());
    auto stub = Connect(server.port());
    const std::string version = Reload(*stub, second_);
    Feed(fed, server.port());
    return version;
  }

  TempDir dir_;
  const std::string first_ = dir_.File("first.pt");
  const std::string second_ = dir_.File("second.pt");
};

TEST_F(ModelSwapJournalTest, ARestartSwapsAtTheSamePlaceAndAnswersAsBefore) {
  const Fed fed(SmallChatTrace(120));
  ASSERT_TRUE(fed.replay.ok());
  auto never = StartServer(Options(dir_.File("never")));
  auto restarted = StartServer(Options(dir_.File("restarted")));
  ASSERT_NE(never, nullptr);
  ASSERT_NE(restarted, nullptr);
  ASSERT_EQ(never->policy(), "learned") << never->startup_notes();
  const std::string version = FeedWithSwap(fed, *never);
  EXPECT_EQ(FeedWithSwap(fed, *restarted), version);
  EXPECT_NE(version.find("second.pt@"), std::string::npos) << version;

  restarted.reset();
  restarted = StartServer(Options(dir_.File("restarted")));
  ASSERT_NE(restarted, nullptr);
  EXPECT_EQ(restarted->startup_notes(), "");
  auto never_stub = Connect(never->port());
  auto restarted_stub = Connect(restarted->port());
  // PoolsOf includes model_version: the restarted server serves the second
  // model, and its Admit scores (the learned policy's) match.
  ExpectSameAnswers(*never_stub, *restarted_stub, fed.pool_bytes);
}

TEST_F(ModelSwapJournalTest, AModelFileGoneByTheRestartIsReportedAndTheOldModelServes) {
  const Fed fed(SmallChatTrace(60));
  ASSERT_TRUE(fed.replay.ok());
  const std::string data = dir_.File("data");
  std::string first_version;
  {
    auto server = StartServer(Options(data));
    ASSERT_NE(server, nullptr);
    auto stub = Connect(server->port());
    grpc::ClientContext ctx;
    v1::GetStatusResponse st;
    ASSERT_TRUE(stub->GetStatus(&ctx, {}, &st).ok());
    first_version = st.model_version();
    FeedWithSwap(fed, *server);
  }
  std::filesystem::remove(second_);
  auto server = StartServer(Options(data));
  ASSERT_NE(server, nullptr);
  const std::string notes = server->startup_notes();
  EXPECT_NE(notes.find("second.pt"), std::string::npos) << notes;
  EXPECT_NE(notes.find("cannot be loaded again"), std::string::npos) << notes;
  EXPECT_NE(notes.find("keep the model they had before it"), std::string::npos) << notes;
  auto stub = Connect(server->port());
  grpc::ClientContext ctx;
  v1::GetStatusResponse st;
  ASSERT_TRUE(stub->GetStatus(&ctx, {}, &st).ok());
  EXPECT_EQ(st.model_version(), first_version);
}

TEST(ModelSwapRecordTest, RoundTripsAndRefusesTruncation) {
  ModelSwapRecord swap;
  swap.path = "/models/m.pt";
  swap.version = "m.pt@0123456789abcdef";
  swap.pools = {{"node-a", v1::TIER_POOL, 7}, {"node-b", v1::TIER_HBM, 300}};
  const std::string record = EncodeModelSwap(swap);
  ASSERT_EQ(record[0], kModelSwapRecord);
  auto back = DecodeModelSwap(record);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->path, swap.path);
  EXPECT_EQ(back->version, swap.version);
  ASSERT_EQ(back->pools.size(), 2u);
  EXPECT_EQ(back->pools[1].node, "node-b");
  EXPECT_EQ(back->pools[1].tier, v1::TIER_HBM);
  EXPECT_EQ(back->pools[1].events_applied, 300u);
  for (size_t n = 0; n < record.size(); ++n) {
    EXPECT_EQ(DecodeModelSwap(record.substr(0, n)).status().code(), absl::StatusCode::kDataLoss)
        << n;
  }
}

}  // namespace
}  // namespace kvlearn
