// Who may call the sidecar, and for which nodes: principals from the
// --auth-tokens file, each a reporter bound to some nodes or an operator.
//
// The file has one principal per line (blank lines and lines starting with
// '#' are skipped):
//
//   TOKEN reporter NODE[,NODE...]    may ReportEvents, Admit, RankEviction and
//                                    Decide for those nodes only ('*': any)
//   TOKEN operator                   may GetStatus and ReloadModel
//   cert:IDENTITY ROLE [NODES]       the same for a client certificate whose
//                                    CN or a SAN is IDENTITY (mutual TLS)
//
// A TOKEN is 16..4096 printable ASCII characters without spaces; clients send
// it as gRPC metadata `authorization: Bearer TOKEN`. A bad line refuses the
// whole file with "FILE:LINE: what is wrong" (never the token itself).
//
// A call's decision (AuthorizeCall): no credentials, a malformed or unknown
// token, a certificate mapped to no line or to several: UNAUTHENTICATED; a
// method outside the principal's role, or a node it is not bound to (every
// event's node_id, a batch's source and a batch_received's source up to their
// '#', every decision's node_id): PERMISSION_DENIED naming the field. Tokens
// are compared in constant time: every token of the table is compared with
// the presented one, over the presented one's length, without stopping at the
// first match or difference.
//
// AccessControl applies that to gRPC calls: it holds the current table,
// re-reads the file when its modification time, size or inode changes
// (checked once a second by a thread of its own; a reload that fails keeps
// the previous table, is logged on stderr and counted) and counts refusals
// by method and code for /metrics. Without a tokens file every call passes,
// except ReloadModel from a peer off this machine when the server has no
// --model-dir; with mutual TLS but no tokens file, every client whose
// certificate verified passes (the client CA is the authority).
//
// Thread-safety: AccessTable is immutable after Parse. AccessControl's methods
// may be called from any thread; the table is swapped under a mutex and each
// call uses the one it found.
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/message.h"
#include "server/sidecar_metrics.h"

namespace grpc {
class ServerContextBase;
}

namespace kvlearn {

enum class Role { kReporter, kOperator };

struct Principal {
  Role role = Role::kReporter;
  bool any_node = false;  // a reporter bound to '*'
  absl::flat_hash_set<std::string> nodes;
  std::string where;  // "FILE:LINE", for the server's own log lines only
};

// What a call presents: its metadata (only "authorization" is read) and the
// identities (CN and SANs) of its verified client certificate.
struct CallCredentials {
  std::vector<std::pair<absl::string_view, absl::string_view>> metadata;
  std::vector<absl::string_view> cert_identities;
};

inline constexpr size_t kMinTokenBytes = 16;
inline constexpr size_t kMaxTokenBytes = 4096;

class AccessTable {
 public:
  // Parses the --auth-tokens text; `file` names it in errors ("FILE:LINE: ...").
  static absl::StatusOr<AccessTable> Parse(absl::string_view text, absl::string_view file);
  // Reads and parses `path`.
  static absl::StatusOr<AccessTable> Load(const std::string& path);

  // The principal presenting `call`'s credentials (UNAUTHENTICATED with a
  // message otherwise). A bearer token, when present, decides alone.
  absl::StatusOr<const Principal*> Authenticate(const CallCredentials& call) const;

  size_t size() const { return principals_.size(); }

 private:
  std::vector<Principal> principals_;
  std::vector<std::pair<std::string, size_t>> tokens_;  // token, principal index
  absl::flat_hash_map<std::string, size_t> certs_;      // identity, principal index
};

// May `principal` call `rpc` with `request` (the method's parsed message;
// nullptr checks the method only)? PERMISSION_DENIED naming the method or
// the field and node otherwise.
absl::Status AuthorizeRequest(const Principal& principal, Rpc rpc,
                              const google::protobuf::Message* request);

// Authenticate, then AuthorizeRequest; `table` nullptr lets every call pass.
absl::Status AuthorizeCall(const AccessTable* table, const CallCredentials& call, Rpc rpc,
                           const google::protobuf::Message* request);

struct AccessControlOptions {
  std::string tokens_file;           // --auth-tokens; empty: no tokens
  bool client_certificates = false;  // mutual TLS: certificate identities are read
  bool model_dir = false;            // --model-dir given: ReloadModel from any peer
  double reload_check_seconds = 1.0;
  // One line per reload of the tokens file; nullptr: stderr.
  std::function<void(const std::string&)> log;
};

class AccessControl {
 public:
  // Loads the tokens file (its errors refuse the start) and starts watching it.
  static absl::StatusOr<std::unique_ptr<AccessControl>> Start(AccessControlOptions options);
  ~AccessControl();

  // Authenticates the caller of `rpc` and checks its role (before the
  // request is parsed). Refusals are counted.
  absl::Status CheckCaller(const grpc::ServerContextBase& context, Rpc rpc);
  // The same, and every node `request` names.
  absl::Status CheckRequest(const grpc::ServerContextBase& context, Rpc rpc,
                            const google::protobuf::Message& request);

  uint64_t refusals(Rpc rpc, absl::StatusCode code) const;
  uint64_t reloads_ok() const { return reloads_ok_.load(std::memory_order_relaxed); }
  uint64_t reloads_failed() const { return reloads_failed_.load(std::memory_order_relaxed); }
  std::string last_reload_error() const;
  size_t principals() const;

  // kvlearn_auth_refusals_total{rpc,code}, kvlearn_auth_reloads_total{result},
  // kvlearn_auth_principals.
  std::string Render() const;

 private:
  struct FileStamp {
    bool exists = false;
    timespec mtime{};
    off_t size = 0;
    ino_t inode = 0;
    bool operator==(const FileStamp& o) const;
  };
  explicit AccessControl(AccessControlOptions options) : options_(std::move(options)) {}
  absl::Status Check(const grpc::ServerContextBase& context, Rpc rpc,
                     const google::protobuf::Message* request);
  static FileStamp Stamp(const std::string& path);
  void Watch();
  void ReloadIfChanged();
  void Log(const std::string& line) const;

  const AccessControlOptions options_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const AccessTable> table_ ABSL_GUARDED_BY(mu_);  // nullptr: no tokens file
  std::string last_reload_error_ ABSL_GUARDED_BY(mu_);
  FileStamp stamp_;  // of the last version read; the watcher thread's only
  std::array<std::array<std::atomic<uint64_t>, 2>, static_cast<int>(Rpc::kCount)> refusals_{};
  std::atomic<uint64_t> reloads_ok_{0}, reloads_failed_{0};
  // The watcher waits on a std::condition_variable (ThreadSanitizer sees
  // through it; docs/guarantees.md, "What CI runs").
  std::thread watcher_;
  std::mutex watch_mu_;
  std::condition_variable watch_wake_;
  bool stop_ = false;  // guarded by watch_mu_
};

}  // namespace kvlearn
