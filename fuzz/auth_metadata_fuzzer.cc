// libFuzzer target: arbitrary bytes as an --auth-tokens file and calls made
// against it (server/access_control.h), without gRPC.
//
// Input: the tokens file's text, a line "%%", then one call per line:
//
//   RPC <TAB> KEY=VALUE;KEY=VALUE... <TAB> CERT_NAME,... <TAB> NODE,... [<TAB> SOURCE]
//
// RPC is a digit (Rpc's order: 0 ReportEvents, 1 Admit, 2 RankEviction,
// 3 GetStatus, 4 ReloadModel, 5 Decide); the pairs are the call's metadata,
// the names its client certificate's; the nodes become the request's (a
// batch's events, an Admit's or RankEviction's node_id, Decide's decisions,
// alternately admit and rank); SOURCE is a batch's source.
//
// Checks: parsing never crashes and a refused file names "FILE:LINE: "; every
// call's decision equals a reference computed here from the file's text by
// plain splitting (so a principal is never granted a method outside its role
// nor a node it is not bound to); every refusal is UNAUTHENTICATED or
// PERMISSION_DENIED with a message.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "kvlearn/v1/retention.pb.h"
#include "server/access_control.h"

namespace kvlearn {
namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

struct RefPrincipal {
  std::string credential;  // a token, or "cert:NAME"
  std::string role;
  std::vector<std::string> nodes;
};

// The accepted file as plain fields (only called when AccessTable accepted it).
std::vector<RefPrincipal> ReferenceTable(absl::string_view text) {
  std::vector<RefPrincipal> table;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f = absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    RefPrincipal p;
    p.credential = f[0];
    p.role = f[1];
    if (f.size() == 3) p.nodes = absl::StrSplit(f[2], ',');
    table.push_back(std::move(p));
  }
  return table;
}

struct RefCall {
  Rpc rpc = Rpc::kGetStatus;
  std::vector<std::pair<std::string, std::string>> metadata;
  std::vector<std::string> certs;
  std::vector<std::string> nodes;  // every node the request names, sources cut at '#'
};

// OK, or the code the reference expects.
absl::StatusCode ReferenceDecision(const std::vector<RefPrincipal>& table, const RefCall& call) {
  const RefPrincipal* who = nullptr;
  int authorizations = 0;
  std::string value;
  for (const auto& [k, v] : call.metadata) {
    if (k == "authorization") {
      ++authorizations;
      value = v;
    }
  }
  if (authorizations > 1) return absl::StatusCode::kUnauthenticated;
  if (authorizations == 1) {
    const size_t space = value.find(' ');
    if (space == std::string::npos || !absl::EqualsIgnoreCase(value.substr(0, space), "bearer")) {
      return absl::StatusCode::kUnauthenticated;
    }
    const std::string token(absl::StripLeadingAsciiWhitespace(value.substr(space + 1)));
    for (const RefPrincipal& p : table) {
      if (!absl::StartsWith(p.credential, "cert:") && p.credential == token) who = &p;
    }
  } else {
    for (const std::string& name : call.certs) {
      for (const RefPrincipal& p : table) {
        if (p.credential != "cert:" + name) continue;
        if (who != nullptr && who != &p) return absl::StatusCode::kUnauthenticated;
        who = &p;
      }
    }
  }
  if (who == nullptr) return absl::StatusCode::kUnauthenticated;
  const bool reporter_rpc = call.rpc != Rpc::kGetStatus && call.rpc != Rpc::kReloadModel;
  if (reporter_rpc != (who->role == "reporter")) return absl::StatusCode::kPermissionDenied;
  if (!reporter_rpc) return absl::StatusCode::kOk;
  const bool any = who->nodes.size() == 1 && who->nodes[0] == "*";
  for (const std::string& node : call.nodes) {
    bool bound = any;
    for (const std::string& n : who->nodes) bound = bound || n == node;
    if (!bound) return absl::StatusCode::kPermissionDenied;
  }
  return absl::StatusCode::kOk;
}

std::string NodeOfSource(absl::string_view source) {
  return std::string(source.substr(0, source.find('#')));
}

void RunCall(const AccessTable& table, const std::vector<RefPrincipal>& ref,
             absl::string_view line) {
  const std::vector<absl::string_view> f = absl::StrSplit(line, '\t');
  if (f.empty() || f[0].size() != 1 || f[0][0] < '0' || f[0][0] > '5') return;
  RefCall call;
  call.rpc = static_cast<Rpc>(f[0][0] - '0');
  CallCredentials credentials;
  if (f.size() > 1) {
    for (absl::string_view pair : absl::StrSplit(f[1], ';', absl::SkipEmpty())) {
      const size_t eq = pair.find('=');
      call.metadata.emplace_back(
          std::string(pair.substr(0, eq)),
          eq == absl::string_view::npos ? "" : std::string(pair.substr(eq + 1)));
    }
  }
  if (f.size() > 2) call.certs = absl::StrSplit(f[2], ',', absl::SkipEmpty());
  std::vector<std::string> nodes;
  if (f.size() > 3) nodes = absl::StrSplit(f[3], ',');
  const std::string source = f.size() > 4 ? std::string(f[4]) : "";
  for (const auto& [k, v] : call.metadata) credentials.metadata.emplace_back(k, v);
  for (const std::string& c : call.certs) credentials.cert_identities.emplace_back(c);

  v1::EventBatch batch;
  v1::AdmitRequest admit;
  v1::RankRequest rank;
  v1::DecideRequest decide;
  v1::GetStatusRequest get_status;
  v1::ReloadModelRequest reload;
  const google::protobuf::Message* request = &get_status;
  switch (call.rpc) {
    case Rpc::kReportEvents:
      for (size_t i = 0; i < nodes.size(); ++i) {
        v1::Event* e = batch.add_events();
        e->set_node_id(nodes[i]);
        call.nodes.push_back(nodes[i]);
        // Every third event carries a batch_received naming the next node's source.
        if (i % 3 == 2) {
          e->mutable_batch_received()->set_source(nodes[(i + 1) % nodes.size()] + "#x");
          call.nodes.push_back(nodes[(i + 1) % nodes.size()]);
        }
      }
      if (!source.empty()) {
        batch.set_source(source);
        call.nodes.push_back(NodeOfSource(source));
      }
      request = &batch;
      break;
    case Rpc::kAdmit:
      admit.set_node_id(nodes.empty() ? "" : nodes[0]);
      call.nodes.push_back(admit.node_id());
      request = &admit;
      break;
    case Rpc::kRankEviction:
      rank.set_node_id(nodes.empty() ? "" : nodes[0]);
      call.nodes.push_back(rank.node_id());
      request = &rank;
      break;
    case Rpc::kDecide:
      for (size_t i = 0; i < nodes.size(); ++i) {
        v1::Decision* d = decide.add_decisions();
        (i % 2 == 0 ? d->mutable_admit()->mutable_node_id() : d->mutable_rank()->mutable_node_id())
            ->assign(nodes[i]);
        call.nodes.push_back(nodes[i]);
      }
      request = &decide;
      break;
    case Rpc::kReloadModel:
      reload.set_path(source);
      request = &reload;
      break;
    default:
      break;
  }

  const absl::Status got = AuthorizeCall(&table, credentials, call.rpc, request);
  const absl::StatusCode want = ReferenceDecision(ref, call);
  Check(got.code() == want);
  if (!got.ok()) {
    Check(!got.message().empty());
    Check(absl::IsUnauthenticated(got) || absl::IsPermissionDenied(got));
  }
  // The method alone (before a request is parsed) never refuses what the
  // whole call passed.
  auto principal = table.Authenticate(credentials);
  if (got.ok()) Check(principal.ok() && AuthorizeRequest(**principal, call.rpc, nullptr).ok());
}

}  // namespace
}  // namespace kvlearn

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvlearn;
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find("\n%%\n");
  const absl::string_view text = input.substr(0, split);
  const absl::string_view calls =
      split == absl::string_view::npos ? absl::string_view() : input.substr(split + 4);
  auto table = AccessTable::Parse(text, "tokens");
  if (!table.ok()) {
    const absl::string_view m = table.status().message();
    Check(absl::IsInvalidArgument(table.status()) && absl::StartsWith(m, "tokens:"));
    const size_t colon = m.find(": ", 7);
    Check(colon != absl::string_view::npos && colon > 7);
    for (size_t i = 7; i < colon; ++i) Check(absl::ascii_isdigit(m[i]));
    return 0;
  }
  const std::vector<RefPrincipal> ref = ReferenceTable(text);
  Check(ref.size() == table->size());
  for (absl::string_view line : absl::StrSplit(calls, '\n')) RunCall(*table, ref, line);
  return 0;
}
