// TLS and mutual TLS with certificates the test makes at run time with the
// openssl command-line tool (Debian package `openssl`).
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "clients/load_generator.h"
#include "datasets/workload_generator.h"
#include "tests/server/sidecar_fixture.h"

namespace kvlearn {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A CA, a server certificate for 127.0.0.1 / localhost and a client
// certificate, all signed by the CA; plus a client certificate from another CA.
class Certificates {
 public:
  static bool Available() { return std::filesystem::exists("/usr/bin/openssl"); }

  explicit Certificates(const TempDir& dir) : dir_(dir) {
    ok_ = MakeCa("ca") && MakeLeaf("server", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost") &&
          MakeLeaf("client", "ca", "extendedKeyUsage=clientAuth") && MakeCa("rogue-ca") &&
          MakeLeaf("rogue", "rogue-ca", "extendedKeyUsage=clientAuth");
  }
  bool ok() const { return ok_; }
  std::string Pem(const std::string& name) const { return dir_.File(name + ".pem"); }
  std::string Key(const std::string& name) const { return dir_.File(name + ".key"); }

 private:
  bool Run(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; }
  std::string Ec() const { return "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"; }
  bool MakeCa(const std::string& name) {
    return Run("openssl req -x509 " + Ec() + " -keyout " + Key(name) + " -out " + Pem(name) +
               " -days 2 -subj /CN=" + name);
  }
  bool MakeLeaf(const std::string& name, const std::string& ca, const std::string& ext) {
    const std::string ext_file = dir_.File(name + ".ext");
    std::ofstream(ext_file) << ext << "\n";
    return Run("openssl req " + Ec() + " -keyout " + Key(name) + " -out " +
               dir_.File(name + ".csr") + " -subj /CN=" + name) &&
           Run("openssl x509 -req -in " + dir_.File(name + ".csr") + " -CA " + Pem(ca) +
               " -CAkey " + Key(ca) + " -CAcreateserial -out " + Pem(name) + " -days 2 -extfile " +
               ext_file);
  }

  const TempDir& dir_;
  bool ok_ = false;
};

class SidecarTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Certificates::Available()) GTEST_SKIP() << "no /usr/bin/openssl";
    certs_ = std::make_unique<Certificates>(certs_dir_);
    ASSERT_TRUE(certs_->ok()) << "openssl failed to make the test certificates";
  }

  std::unique_ptr<SidecarServer> Start(bool mutual) {
    SidecarOptions o = TestOptions(data_dir_.path());
    o.metrics_listen = "";
    o.tls_cert = certs_->Pem("server");
    o.tls_key = certs_->Key("server");
    if (mutual) o.tls_client_ca = certs_->Pem("ca");
    return StartServer(o);
  }

  std::shared_ptr<grpc::ChannelCredentials> Credentials(const std::string& client) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = Slurp(certs_->Pem("ca"));
    if (!client.empty()) {
      ssl.pem_cert_chain = Slurp(certs_->Pem(client));
      ssl.pem_private_key = Slurp(certs_->Key(client));
    }
    return grpc::SslCredentials(ssl);
  }

  static grpc::Status Ping(int port, std::shared_ptr<grpc::ChannelCredentials> creds) {
    auto stub =
        v1::Retention::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port), creds));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::GetStatusResponse r;
    return stub->GetStatus(&ctx, {}, &r);
  }

  TempDir certs_dir_, data_dir_;
  std::unique_ptr<Certificates> certs_;
};

TEST_F(SidecarTlsTest, TlsServesVerifiedClientsAndRefusesPlaintext) {
  auto server = Start(/*mutual=*/false);
  ASSERT_NE(server, nullptr);
  const grpc::Status tls = Ping(server->port(), Credentials(""));
  EXPECT_TRUE(tls.ok()) << tls.error_message();
  EXPECT_FALSE(Ping(server->port(), grpc::InsecureChannelCredentials()).ok());
}

TEST_F(SidecarTlsTest, MutualTlsRequiresAClientCertificateFromTheClientCa) {
  auto server = Start(/*mutual=*/true);
  ASSERT_NE(server, nullptr);
  const grpc::Status good = Ping(server->port(), Credentials("client"));
  EXPECT_TRUE(good.ok()) << good.error_message();
  EXPECT_FALSE(Ping(server->port(), Credentials("")).ok());       // no client certificate
  EXPECT_FALSE(Ping(server->port(), Credentials("rogue")).ok());  // signed by another CA
  EXPECT_FALSE(Ping(server->port(), grpc::InsecureChannelCredentials()).ok());

  // The load generator speaks mutual TLS too.
  ChatWorkloadOptions w;
  w.requests = 30;
  const Trace trace = GenerateChatTrace(w);
  const CostModel cost(*FindModelProfile("llama3-8b"), *FindHardwareProfile("a100"));
  auto replay = BuildReplayTrace(trace, cost);
  ASSERT_TRUE(replay.ok());
  LoadgenOptions lo;
  lo.target = "127.0.0.1:" + std::to_string(server->port());
  lo.credentials = Credentials("client");
  lo.pool_bytes = replay->distinct_block_bytes / 10;
  auto got = RunLoadgen(*replay, cost, lo);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->result.requests, 30u);
}

// With --auth-tokens, a verified client certificate acts as the line that
// names its CN ("cert:client"); one the file does not name is refused.
TEST_F(SidecarTlsTest, MutualTlsMapsTheClientCertificateToItsTokensFileLine) {
  const std::string tokens = certs_dir_.File("tokens.txt");
  std::ofstream(tokens) << "cert:client reporter node-a\n";
  SidecarOptions o = TestOptions(data_dir_.path());
  o.metrics_listen = "";
  o.tls_cert = certs_->Pem("server");
  o.tls_key = certs_->Key("server");
  o.tls_client_ca = certs_->Pem("ca");
  o.auth_tokens_file = tokens;
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  auto stub = v1::Retention::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(server->port()), Credentials("client")));
  const auto admit = [&](const std::string& node) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::AdmitRequest r;
    r.set_node_id(node);
    auto* c = r.add_candidates();
    c->set_block_id(1);
    c->set_tokens(16);
    c->set_bytes(100);
    v1::AdmitResponse out;
    return stub->Admit(&ctx, r, &out).error_code();
  };
  EXPECT_EQ(admit("node-a"), grpc::StatusCode::OK);
  EXPECT_EQ(admit("node-b"), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Ping(server->port(), Credentials("client")).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);  // GetStatus is an operator's

  // The same CA, a CN the file does not name.
  std::ofstream(tokens) << "cert:someone-else reporter node-a\n";
  server.reset();
  server = StartServer(o);
  ASSERT_NE(server, nullptr);
  stub = v1::Retention::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(server->port()), Credentials("client")));
  EXPECT_EQ(admit("node-a"), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(SidecarTlsTest, HalfConfiguredTlsIsRefusedAtStart) {
  SidecarOptions o = TestOptions(data_dir_.path());
  o.tls_cert = certs_->Pem("server");
  EXPECT_EQ(SidecarServer::Start(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = TestOptions(data_dir_.path());
  o.tls_client_ca = certs_->Pem("ca");
  EXPECT_EQ(SidecarServer::Start(o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvlearn
