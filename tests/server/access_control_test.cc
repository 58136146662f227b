// The --auth-tokens table without gRPC: parsing (every refusal names
// FILE:LINE and never the token), who a call's credentials are, and what each
// role may do for which nodes.
#include "server/access_control.h"

#include <gtest/gtest.h>

#include <string>

#include "kvlearn/v1/retention.pb.h"

namespace kvlearn {
namespace {

// Authorization values of the table's three tokens: a reporter bound to
// node-a and node-b, an operator, a reporter bound to any node.
constexpr char kReporter[] = "Bearer reporter-token-0001";
constexpr char kOperator[] = "Bearer operator-token-0001";
constexpr char kAnyNode[] = "Bearer any-node-token-0001";

const char* const kTable =
    "# who may call the sidecar\n"
    "reporter-token-0001 reporter node-a,node-b\n"
    "\n"
    "   operator-token-0001\toperator\n"
    "any-node-token-0001 reporter *\n"
    "cert:client-a reporter node-a\n"
    "cert:ops.example.com operator\n";

AccessTable Table() {
  auto table = AccessTable::Parse(kTable, "tokens.txt");
  EXPECT_TRUE(table.ok()) << table.status();
  return *std::move(table);
}

// `value` must outlive the credentials (they hold views).
CallCredentials Bearer(absl::string_view value) {
  CallCredentials c;
  c.metadata = {{"user-agent", "test"}, {"authorization", value}};
  return c;
}

absl::Status Call(const AccessTable& table, const CallCredentials& c, Rpc rpc,
                  const google::protobuf::Message* request) {
  return AuthorizeCall(&table, c, rpc, request);
}

v1::AdmitRequest AdmitFor(const std::string& node) {
  v1::AdmitRequest r;
  r.set_node_id(node);
  return r;
}

TEST(AccessTableTest, ParsesPrincipalsSkippingCommentsAndBlankLines) {
  EXPECT_EQ(Table().size(), 5u);
  auto empty = AccessTable::Parse("# nobody yet\n\n", "t");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->size(), 0u);
}

TEST(AccessTableTest, EachBadLineIsRefusedWithFileLineAndWhatIsWrong) {
  const std::string ok = "good-token-000000001 operator\n";
  struct Case {
    std::string line;
    std::string what;
  };
  const Case cases[] = {
      {"short-token reporter node-a", "16..4096 printable ASCII"},
      {"some-long-token-00001 admin", "role 'admin': expected 'reporter' or 'operator'"},
      {"some-long-token-00001 reporter", "a reporter needs its nodes"},
      {"some-long-token-00001 operator node-a", "an operator is bound to no node"},
      {"some-long-token-00001 reporter node-a,*", "'*' must stand alone"},
      {"some-long-token-00001 reporter node-a,,node-b", "node id"},
      {"some-long-token-00001 reporter bad|node", "node id"},
      {"some-long-token-00001 reporter a b", "4 fields"},
      {"lonely-token-0000001", "1 fields"},
      {"cert: reporter node-a", "cert: needs the certificate's CN"},
      {"good-token-000000001 reporter node-a", "the same token is on line 1"},
  };
  for (const Case& c : cases) {
    auto table = AccessTable::Parse(ok + c.line + "\n", "/etc/kvlearn/tokens");
    ASSERT_FALSE(table.ok()) << c.line;
    EXPECT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(table.status().message());
    EXPECT_EQ(message.rfind("/etc/kvlearn/tokens:2: ", 0), 0u) << message;
    EXPECT_NE(message.find(c.what), std::string::npos) << message;
    // The token of the line never appears in the message.
    const std::string token = c.line.substr(0, c.line.find(' '));
    if (token.size() >= 16) EXPECT_EQ(message.find(token), std::string::npos) << message;
  }
}

TEST(AccessTableTest, CallsWithoutAValidTokenAreUnauthenticated) {
  const AccessTable table = Table();
  CallCredentials none;
  none.metadata = {{"user-agent", "test"}};
  for (const CallCredentials& c :
       {none, Bearer(""), Bearer("Bearer"), Bearer("Bearer "), Bearer("Basic cmVwb3J0ZXI="),
        Bearer("Bearer reporter-token-0002"), Bearer("Bearer reporter-token-000"),
        Bearer("Bearer reporter-token-00011"), Bearer("reporter-token-0001")}) {
    const absl::Status st = Call(table, c, Rpc::kGetStatus, nullptr);
    EXPECT_EQ(st.code(), absl::StatusCode::kUnauthenticated)
        << (c.metadata.size() > 1 ? c.metadata[1].second : "no metadata");
    EXPECT_NE(st.message().find("authorization: Bearer TOKEN"), std::string::npos) << st;
  }
  // Two authorization values are ambiguous, even if both are good.
  CallCredentials two = Bearer("Bearer operator-token-0001");
  two.metadata.emplace_back("authorization", "Bearer operator-token-0001");
  EXPECT_EQ(Call(table, two, Rpc::kGetStatus, nullptr).code(), absl::StatusCode::kUnauthenticated);
}

TEST(AccessTableTest, TheSchemeIsCaseInsensitiveAndTheTokenExact) {
  const AccessTable table = Table();
  EXPECT_TRUE(Call(table, Bearer("bearer operator-token-0001"), Rpc::kGetStatus, nullptr).ok());
  EXPECT_TRUE(Call(table, Bearer("BEARER  operator-token-0001"), Rpc::kGetStatus, nullptr).ok());
  EXPECT_FALSE(Call(table, Bearer("Bearer OPERATOR-token-0001"), Rpc::kGetStatus, nullptr).ok());
}

TEST(AccessTableTest, EachRoleMayCallItsMethodsOnly) {
  const AccessTable table = Table();
  const Rpc reporter_rpcs[] = {Rpc::kReportEvents, Rpc::kAdmit, Rpc::kRankEviction, Rpc::kDecide};
  const Rpc operator_rpcs[] = {Rpc::kGetStatus, Rpc::kReloadModel};
  for (const Rpc rpc : reporter_rpcs) {
    EXPECT_TRUE(Call(table, Bearer(kReporter), rpc, nullptr).ok());
    const absl::Status st = Call(table, Bearer(kOperator), rpc, nullptr);
    EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied) << RpcName(rpc);
    EXPECT_NE(st.message().find("operator may call only GetStatus and ReloadModel"),
              std::string::npos);
  }
  for (const Rpc rpc : operator_rpcs) {
    EXPECT_TRUE(Call(table, Bearer(kOperator), rpc, nullptr).ok());
    for (const char* token : {kReporter, kAnyNode}) {
      EXPECT_EQ(Call(table, Bearer(token), rpc, nullptr).code(),
                absl::StatusCode::kPermissionDenied)
          << RpcName(rpc);
    }
  }
}

TEST(AccessTableTest, AReporterActsOnlyForItsNodes) {
  const AccessTable table = Table();
  const CallCredentials reporter = Bearer(kReporter);
  const CallCredentials any = Bearer(kAnyNode);
  for (const char* node : {"node-a", "node-b"}) {
    const v1::AdmitRequest admit = AdmitFor(node);
    EXPECT_TRUE(Call(table, reporter, Rpc::kAdmit, &admit).ok()) << node;
  }
  for (const char* node : {"node-c", "node-", "node-ab", ""}) {
    const v1::AdmitRequest admit = AdmitFor(node);
    const absl::Status st = Call(table, reporter, Rpc::kAdmit, &admit);
    EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied) << node;
    EXPECT_NE(st.message().find("node_id: this reporter is not bound to node"), std::string::npos);
    EXPECT_TRUE(Call(table, any, Rpc::kAdmit, &admit).ok()) << node;
  }
  v1::RankRequest rank;
  rank.set_node_id("node-c");
  EXPECT_EQ(Call(table, reporter, Rpc::kRankEviction, &rank).code(),
            absl::StatusCode::kPermissionDenied);

  // Every event of a batch is checked: the third one names another node.
  v1::EventBatch batch;
  for (const char* node : {"node-a", "node-b", "node-c"}) batch.add_events()->set_node_id(node);
  absl::Status st = Call(table, reporter, Rpc::kReportEvents, &batch);
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(st.message().find("events[2].node_id"), std::string::npos) << st;
  batch.mutable_events()->RemoveLast();
  EXPECT_TRUE(Call(table, reporter, Rpc::kReportEvents, &batch).ok());
  // A batch may not number itself as another node's source, nor mark
  // another source's batch as received (that would suppress it).
  batch.set_source("node-c#TIER_POOL");
  st = Call(table, reporter, Rpc::kReportEvents, &batch);
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(st.message().find("source"), std::string::npos) << st;
  batch.set_source("node-b#TIER_POOL");
  EXPECT_TRUE(Call(table, reporter, Rpc::kReportEvents, &batch).ok());
  batch.mutable_events(0)->mutable_batch_received()->set_source("node-c");
  st = Call(table, reporter, Rpc::kReportEvents, &batch);
  EXPECT_NE(st.message().find("events[0].batch_received.source"), std::string::npos) << st;

  v1::DecideRequest decide;
  decide.add_decisions()->mutable_admit()->set_node_id("node-a");
  decide.add_decisions()->mutable_rank()->set_node_id("node-c");
  st = Call(table, reporter, Rpc::kDecide, &decide);
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(st.message().find("decisions[1].rank.node_id"), std::string::npos) << st;
}

TEST(AccessTableTest, ClientCertificateNamesMapToTheirLines) {
  const AccessTable table = Table();
  CallCredentials cert;
  cert.cert_identities = {"unrelated-san", "client-a"};
  const v1::AdmitRequest a = AdmitFor("node-a"), b = AdmitFor("node-b");
  EXPECT_TRUE(Call(table, cert, Rpc::kAdmit, &a).ok());
  EXPECT_EQ(Call(table, cert, Rpc::kAdmit, &b).code(), absl::StatusCode::kPermissionDenied);
  cert.cert_identities = {"stranger"};
  EXPECT_EQ(Call(table, cert, Rpc::kAdmit, &a).code(), absl::StatusCode::kUnauthenticated);
  // Names of one certificate on two lines: which role is meant is unclear.
  cert.cert_identities = {"client-a", "ops.example.com"};
  EXPECT_EQ(Call(table, cert, Rpc::kGetStatus, nullptr).code(), absl::StatusCode::kUnauthenticated);
  // A token decides alone when there is one, whatever the certificate says.
  CallCredentials both = Bearer(kOperator);
  both.cert_identities = {"client-a"};
  EXPECT_TRUE(Call(table, both, Rpc::kGetStatus, nullptr).ok());
  EXPECT_FALSE(Call(table, both, Rpc::kAdmit, &a).ok());
}

TEST(AccessTableTest, WithoutATableEveryCallPasses) {
  const v1::AdmitRequest admit = AdmitFor("anything");
  EXPECT_TRUE(AuthorizeCall(nullptr, CallCredentials{}, Rpc::kAdmit, &admit).ok());
}

}  // namespace
}  // namespace kvlearn
