#include "server/access_control.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "kvlearn/v1/retention.pb.h"
#include "server/loopback_address.h"
#include "server/request_validation.h"

namespace kvlearn {
namespace {

constexpr absl::string_view kCertPrefix = "cert:";
constexpr absl::string_view kFormat =
    "expected 'TOKEN reporter NODE[,NODE...]', 'TOKEN operator' or 'cert:IDENTITY ROLE [NODES]'";

bool Printable(absl::string_view s) {
  for (const char c : s) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

// Equal without a timing difference that depends on `secret`'s bytes: the
// loop runs over `presented` (the caller's own, known to it) and never stops
// early.
bool ConstantTimeEquals(absl::string_view presented, absl::string_view secret) {
  unsigned char diff = presented.size() != secret.size() ? 1 : 0;
  const size_t n = secret.empty() ? 1 : secret.size();
  for (size_t i = 0; i < presented.size(); ++i) {
    const unsigned char s = secret.empty() ? 0 : static_cast<unsigned char>(secret[i % n]);
    diff |= static_cast<unsigned char>(presented[i]) ^ s;
  }
  // Keeps the compiler from turning the loop into an early exit.
  volatile unsigned char result = diff;
  return result == 0;
}

absl::Status Unauthenticated(absl::string_view why) {
  return absl::UnauthenticatedError(
      absl::StrCat(why,
                   " (send gRPC metadata 'authorization: Bearer TOKEN' with a token of the "
                   "server's --auth-tokens file)"));
}

bool RoleAllows(Role role, Rpc rpc) {
  switch (rpc) {
    case Rpc::kReportEvents:
    case Rpc::kAdmit:
    case Rpc::kRankEviction:
    case Rpc::kDecide:
      return role == Role::kReporter;
    case Rpc::kGetStatus:
    case Rpc::kReloadModel:
      return role == Role::kOperator;
    case Rpc::kCount:
      break;
  }
  return false;
}

absl::Status MayActFor(const Principal& p, absl::string_view node, absl::string_view field) {
  if (p.any_node || p.nodes.contains(node)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(field, ": this reporter is not bound to node '",
                                                  node.substr(0, 128), "' (--auth-tokens)"));
}

// A batch source is "<node_id>" or "<node_id>#<anything>" (the clients'
// "<node_id>#<tier>"): the node it speaks for is the part before '#'.
absl::string_view SourceNode(absl::string_view source) {
  return source.substr(0, source.find('#'));
}

absl::Status AuthorizeBatch(const Principal& p, const v1::EventBatch& batch) {
  if (!batch.source().empty()) {
    if (auto st = MayActFor(p, SourceNode(batch.source()), "source"); !st.ok()) return st;
  }
  for (int i = 0; i < batch.events_size(); ++i) {
    const v1::Event& e = batch.events(i);
    if (auto st = MayActFor(p, e.node_id(), absl::StrCat("events[", i, "].node_id")); !st.ok()) {
      return st;
    }
    if (e.has_batch_received()) {
      if (auto st = MayActFor(p, SourceNode(e.batch_received().source()),
                              absl::StrCat("events[", i, "].batch_received.source"));
          !st.ok()) {
        return st;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status AuthorizeDecide(const Principal& p, const v1::DecideRequest& request) {
  for (int i = 0; i < request.decisions_size(); ++i) {
    const v1::Decision& d = request.decisions(i);
    if (d.has_admit()) {
      if (auto st =
              MayActFor(p, d.admit().node_id(), absl::StrCat("decisions[", i, "].admit.node_id"));
          !st.ok()) {
        return st;
      }
    } else if (d.has_rank()) {
      if (auto st =
              MayActFor(p, d.rank().node_id(), absl::StrCat("decisions[", i, "].rank.node_id"));
          !st.ok()) {
        return st;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckNodeList(absl::string_view list, Principal& p) {
  if (list == "*") {
    p.any_node = true;
    return absl::OkStatus();
  }
  for (absl::string_view node : absl::StrSplit(list, ',')) {
    if (node == "*") return absl::InvalidArgumentError("'*' must stand alone (any node)");
    if (auto st = ValidateNodeId(std::string_view(node.data(), node.size()), "node id"); !st.ok()) {
      return st;
    }
    p.nodes.insert(std::string(node));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<AccessTable> AccessTable::Parse(absl::string_view text, absl::string_view file) {
  AccessTable table;
  absl::flat_hash_map<std::string, int> token_lines;  // token, line: duplicates
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    const auto fail = [&](absl::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat(file, ":", line_number, ": ", what));
    };
    absl::ConsumeSuffix(&line, "\r");
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    const std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.size() < 2 || fields.size() > 3) {
      return fail(absl::StrCat(fields.size(), " fields; ", kFormat));
    }
    Principal p;
    p.where = absl::StrCat(file, ":", line_number);
    if (fields[1] == "reporter") {
      p.role = Role::kReporter;
      if (fields.size() != 3) return fail("a reporter needs its nodes: NODE[,NODE...] or '*'");
      if (auto st = CheckNodeList(fields[2], p); !st.ok()) return fail(st.message());
    } else if (fields[1] == "operator") {
      p.role = Role::kOperator;
      if (fields.size() != 2)
        return fail("an operator is bound to no node; remove the third field");
    } else {
      return fail(
          absl::StrCat("role '", fields[1].substr(0, 32), "': expected 'reporter' or 'operator'"));
    }
    const absl::string_view credential = fields[0];
    const size_t index = table.principals_.size();
    if (absl::StartsWith(credential, kCertPrefix)) {
      const absl::string_view identity = credential.substr(kCertPrefix.size());
      if (identity.empty() || identity.size() > kMaxTokenBytes || !Printable(identity)) {
        return fail("cert: needs the certificate's CN or a SAN after it (printable, no spaces)");
      }
      if (!table.certs_.emplace(std::string(identity), index).second) {
        return fail(absl::StrCat("certificate identity '", identity, "' is on an earlier line"));
      }
    } else {
      if (credential.size() < kMinTokenBytes || credential.size() > kMaxTokenBytes ||
          !Printable(credential)) {
        return fail(absl::StrCat("the token must be ", kMinTokenBytes, "..", kMaxTokenBytes,
                                 " printable ASCII characters without spaces (e.g. the output of "
                                 "'openssl rand -hex 32')"));
      }
      const auto [it, fresh] = token_lines.emplace(std::string(credential), line_number);
      if (!fresh) return fail(absl::StrCat("the same token is on line ", it->second));
      table.tokens_.emplace_back(std::string(credential), index);
    }
    table.principals_.push_back(std::move(p));
  }
  return table;
}

absl::StatusOr<AccessTable> AccessTable::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("--auth-tokens: cannot read ", path));
  std::ostringstream text;
  text << in.rdbuf();
  return Parse(text.str(), path);
}

absl::StatusOr<const Principal*> AccessTable::Authenticate(const CallCredentials& call) const {
  absl::string_view authorization;
  int authorizations = 0;
  for (const auto& [key, value] : call.metadata) {
    if (key != "authorization") continue;
    ++authorizations;
    authorization = value;
  }
  if (authorizations > 1) return Unauthenticated("several authorization metadata values");
  if (authorizations == 1) {
    const size_t space = authorization.find(' ');
    if (space == absl::string_view::npos ||
        !absl::EqualsIgnoreCase(authorization.substr(0, space), "bearer")) {
      return Unauthenticated("the authorization metadata is not 'Bearer TOKEN'");
    }
    const absl::string_view token =
        absl::StripLeadingAsciiWhitespace(authorization.substr(space + 1));
    if (token.empty() || token.size() > kMaxTokenBytes) {
      return Unauthenticated("the authorization metadata is not 'Bearer TOKEN'");
    }
    // Every token is compared, whatever matched before.
    const Principal* found = nullptr;
    for (const auto& [secret, index] : tokens_) {
      const bool equal = ConstantTimeEquals(token, secret);
      if (equal) found = &principals_[index];
    }
    if (found == nullptr) return Unauthenticated("unknown token");
    return found;
  }
  const Principal* found = nullptr;
  for (const absl::string_view identity : call.cert_identities) {
    const auto it = certs_.find(identity);
    if (it == certs_.end()) continue;
    const Principal* p = &principals_[it->second];
    if (found != nullptr && found != p) {
      return Unauthenticated(
          "the client certificate's names map to several lines of --auth-tokens");
    }
    found = p;
  }
  if (found != nullptr) return found;
  if (!call.cert_identities.empty()) {
    return Unauthenticated("no line of --auth-tokens names this client certificate (cert:CN)");
  }
  return Unauthenticated("no credentials");
}

absl::Status AuthorizeRequest(const Principal& principal, Rpc rpc,
                              const google::protobuf::Message* request) {
  if (!RoleAllows(principal.role, rpc)) {
    return absl::PermissionDeniedError(absl::StrCat(RpcName(rpc), ": an ",
                                                    principal.role == Role::kOperator
                                                        ? "operator may call only GetStatus and "
                                                          "ReloadModel"
                                                        : "reporter may call only ReportEvents, "
                                                          "Admit, RankEviction and Decide",
                                                    " (--auth-tokens)"));
  }
  if (request == nullptr) return absl::OkStatus();
  if (const auto* r = dynamic_cast<const v1::AdmitRequest*>(request)) {
    return MayActFor(principal, r->node_id(), "node_id");
  }
  if (const auto* r = dynamic_cast<const v1::RankRequest*>(request)) {
    return MayActFor(principal, r->node_id(), "node_id");
  }
  if (const auto* r = dynamic_cast<const v1::DecideRequest*>(request)) {
    return AuthorizeDecide(principal, *r);
  }
  if (const auto* r = dynamic_cast<const v1::EventBatch*>(request)) {
    return AuthorizeBatch(principal, *r);
  }
  return absl::OkStatus();  // GetStatus, ReloadModel: no node
}

absl::Status AuthorizeCall(const AccessTable* table, const CallCredentials& call, Rpc rpc,
                           const google::protobuf::Message* request) {
  if (table == nullptr) return absl::OkStatus();
  auto principal = table->Authenticate(call);
  if (!principal.ok()) return principal.status();
  return AuthorizeRequest(**principal, rpc, request);
}

bool AccessControl::FileStamp::operator==(const FileStamp& o) const {
  return exists == o.exists && mtime.tv_sec == o.mtime.tv_sec && mtime.tv_nsec == o.mtime.tv_nsec &&
         size == o.size && inode == o.inode;
}

AccessControl::FileStamp AccessControl::Stamp(const std::string& path) {
  FileStamp s;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return s;
  s.exists = true;
  s.mtime = st.st_mtim;
  s.size = st.st_size;
  s.inode = st.st_ino;
  return s;
}

absl::StatusOr<std::unique_ptr<AccessControl>> AccessControl::Start(AccessControlOptions options) {
  std::unique_ptr<AccessControl> ac(new AccessControl(std::move(options)));
  if (ac->options_.tokens_file.empty()) return ac;
  // Stamped before reading: a change during the read is seen at the next check.
  ac->stamp_ = Stamp(ac->options_.tokens_file);
  auto table = AccessTable::Load(ac->options_.tokens_file);
  if (!table.ok()) return table.status();
  {
    absl::MutexLock lock(&ac->mu_);
    ac->table_ = std::make_shared<const AccessTable>(*std::move(table));
  }
  AccessControl* self = ac.get();
  ac->watcher_ = std::thread([self] { self->Watch(); });
  return ac;
}

AccessControl::~AccessControl() {
  if (watcher_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(watch_mu_);
      stop_ = true;
    }
    watch_wake_.notify_all();
    watcher_.join();
  }
}

void AccessControl::Watch() {
  const auto interval = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(options_.reload_check_seconds));
  std::unique_lock<std::mutex> lock(watch_mu_);
  while (!stop_) {
    watch_wake_.wait_for(lock, interval, [this] { return stop_; });
    if (stop_) break;
    lock.unlock();
    ReloadIfChanged();
    lock.lock();
  }
}

void AccessControl::ReloadIfChanged() {
  const std::string& path = options_.tokens_file;
  const FileStamp now = Stamp(path);
  if (now == stamp_) return;
  stamp_ = now;
  auto table = now.exists ? AccessTable::Load(path)
                          : absl::StatusOr<AccessTable>(absl::NotFoundError(
                                absl::StrCat("--auth-tokens: ", path, " is gone")));
  if (!table.ok()) {
    reloads_failed_.fetch_add(1, std::memory_order_relaxed);
    size_t kept = 0;
    {
      absl::MutexLock lock(&mu_);
      last_reload_error_ = std::string(table.status().message());
      kept = table_ ? table_->size() : 0;
    }
    Log(absl::StrCat("kvlearn serve: --auth-tokens: reload refused, the previous ", kept,
                     " principals stay in force: ", table.status().message()));
    return;
  }
  const size_t principals = table->size();
  {
    absl::MutexLock lock(&mu_);
    table_ = std::make_shared<const AccessTable>(*std::move(table));
    last_reload_error_.clear();
  }
  reloads_ok_.fetch_add(1, std::memory_order_relaxed);
  Log(absl::StrCat("kvlearn serve: --auth-tokens: reloaded ", path, ", ", principals,
                   " principals"));
}

void AccessControl::Log(const std::string& line) const {
  if (options_.log) {
    options_.log(line);
  } else {
    std::cerr << line << std::endl;
  }
}

absl::Status AccessControl::Check(const grpc::ServerContextBase& context, Rpc rpc,
                                  const google::protobuf::Message* request) {
  absl::Status status;
  if (rpc == Rpc::kReloadModel && !options_.model_dir && !IsLoopbackPeer(context.peer())) {
    status = absl::PermissionDeniedError(
        "ReloadModel: this server has no --model-dir, so it loads models only for callers on its "
        "own machine (loopback); start it with --model-dir DIR to reload over the network");
  } else {
    std::shared_ptr<const AccessTable> table;
    {
      absl::ReaderMutexLock lock(&mu_);
      table = table_;
    }
    if (table == nullptr) return absl::OkStatus();
    CallCredentials call;
    for (const auto& [key, value] : context.client_metadata()) {
      call.metadata.emplace_back(absl::string_view(key.data(), key.size()),
                                 absl::string_view(value.data(), value.size()));
    }
    std::vector<grpc::string_ref> names;
    const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
    if (options_.client_certificates && auth != nullptr && auth->IsPeerAuthenticated()) {
      for (const char* property : {"x509_common_name", "x509_subject_alternative_name"}) {
        for (const grpc::string_ref& name : auth->FindPropertyValues(property)) {
          call.cert_identities.emplace_back(name.data(), name.size());
        }
      }
    }
    status = AuthorizeCall(table.get(), call, rpc, request);
  }
  if (!status.ok()) {
    const int code = absl::IsUnauthenticated(status) ? 0 : 1;
    refusals_[static_cast<int>(rpc)][code].fetch_add(1, std::memory_order_relaxed);
  }
  return status;
}

absl::Status AccessControl::CheckCaller(const grpc::ServerContextBase& context, Rpc rpc) {
  return Check(context, rpc, nullptr);
}

absl::Status AccessControl::CheckRequest(const grpc::ServerContextBase& context, Rpc rpc,
                                         const google::protobuf::Message& request) {
  return Check(context, rpc, &request);
}

uint64_t AccessControl::refusals(Rpc rpc, absl::StatusCode code) const {
  if (code != absl::StatusCode::kUnauthenticated && code != absl::StatusCode::kPermissionDenied) {
    return 0;
  }
  return refusals_[static_cast<int>(rpc)][code == absl::StatusCode::kUnauthenticated ? 0 : 1].load(
      std::memory_order_relaxed);
}

std::string AccessControl::last_reload_error() const {
  absl::MutexLock lock(&mu_);
  return last_reload_error_;
}

size_t AccessControl::principals() const {
  absl::MutexLock lock(&mu_);
  return table_ ? table_->size() : 0;
}

std::string AccessControl::Render() const {
  std::string out =
      "# HELP kvlearn_auth_refusals_total Calls refused for their credentials "
      "(UNAUTHENTICATED) or their role or nodes (PERMISSION_DENIED), by method.\n"
      "# TYPE kvlearn_auth_refusals_total counter\n";
  for (int r = 0; r < static_cast<int>(Rpc::kCount); ++r) {
    for (int c = 0; c < 2; ++c) {
      absl::StrAppend(&out, "kvlearn_auth_refusals_total{rpc=\"", RpcName(static_cast<Rpc>(r)),
                      "\",code=\"", c == 0 ? "UNAUTHENTICATED" : "PERMISSION_DENIED", "\"} ",
                      refusals_[r][c].load(std::memory_order_relaxed), "\n");
    }
  }
  absl::StrAppend(&out,
                  "# HELP kvlearn_auth_reloads_total Re-reads of the --auth-tokens file after it "
                  "changed: taken (ok) or refused, the previous table kept (error).\n"
                  "# TYPE kvlearn_auth_reloads_total counter\n"
                  "kvlearn_auth_reloads_total{result=\"ok\"} ",
                  reloads_ok(), "\nkvlearn_auth_reloads_total{result=\"error\"} ", reloads_failed(),
                  "\n# HELP kvlearn_auth_principals Lines of the --auth-tokens file in force "
                  "(0 without one).\n# TYPE kvlearn_auth_principals gauge\n"
                  "kvlearn_auth_principals ",
                  principals(), "\n");
  return out;
}

}  // namespace kvlearn
