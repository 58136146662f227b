// The model registry of a sidecar's data directory: every model trained from
// its log (or registered by hand), which one serves, and who changed that.
// Files, in DATA_DIR/models/:
//   vN.pt     the model file of version N, never rewritten once in place
//   vN.json   its entry: file, checksum (FNV-1a of the file's bytes, the hash
//             in the model's version "vN.pt@HASH"), size, parent (the version
//             serving when it was registered), when and by what command it
//             was made, the log window it was trained on (absent for a model
//             trained from a trace file). Its validation table is the model
//             file's own verdict (docs/training.md, "The verdict").
//   registry.json  the serving version and the history of promotions and
//             rollbacks (who, when, from which version, forced or not, the
//             costs on the window evaluated).
// Every file is written whole to a temporary name, fsynced and renamed into
// place (then the directory fsynced), so a crash at any point leaves each
// file either as it was or as it was meant to be: registry.json always names
// a version whose file was complete before it was named.
//
// A damaged entry (vN.json that does not parse, a missing model file, a
// checksum that does not match) is listed with what is wrong and refused by
// Check, naming the version; the others stay usable. A registry.json that does
// not parse refuses every command that needs it (nothing is rewritten).
//
// `kvlearn train --data-dir` and `kvlearn model` write it; the sidecar only
// reads it, for experiment arms naming a version
// (server/registry_model_reference.h): Open checks every entry's checksum, so
// each lookup reads every registered model file once.
//
// Thread-safety: none; one command at a time changes a registry (the last
// rename wins). A reader in another process sees each file whole (renames).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvlearn {

// The part of an event log a model was trained on (`kvlearn train --data-dir`).
struct LogWindow {
  std::string node;                 // empty: every node
  std::optional<int64_t> since_ms;  // --since / --until as given
  std::optional<int64_t> until_ms;
  int64_t first_ms = 0;  // the requests read: first and last timestamp
  int64_t last_ms = 0;
  uint64_t requests = 0;
  uint64_t first_sequence = 0;  // the log's retained sequences when read
  uint64_t next_sequence = 0;
};

struct RegistryEntry {
  int version = 0;
  std::string file;      // name inside the models directory
  std::string checksum;  // 16 hex digits
  uint64_t bytes = 0;
  std::optional<int> parent;
  std::string created_at;  // UTC, RFC 3339
  std::string created_by;  // the command line
  std::optional<LogWindow> window;
  std::string problem;  // why the entry is unusable; empty when it reads whole
};

struct ServingChange {
  std::string action;  // "promote" or "rollback"
  int to = 0;
  std::optional<int> from;
  std::string by;
  std::string at;  // UTC, RFC 3339
  bool forced = false;
  std::string evaluation;  // the costs it was decided on, one line; may be empty
};

class ModelRegistry {
 public:
  // Reads DATA_DIR/models (an absent directory is an empty registry).
  // INVALID_ARGUMENT naming registry.json when it does not parse.
  static absl::StatusOr<ModelRegistry> Open(const std::string& data_dir);

  const std::string& dir() const { return dir_; }
  const std::vector<RegistryEntry>& entries() const { return entries_; }
  std::optional<int> serving() const { return serving_; }
  const std::vector<ServingChange>& history() const { return history_; }

  // The entry of `version`; NOT_FOUND listing the versions there are.
  absl::StatusOr<const RegistryEntry*> Find(int version) const;
  // Its file's path.
  std::string PathOf(const RegistryEntry& entry) const;
  // The entry, refused (FAILED_PRECONDITION naming the version and what is
  // wrong) when it is damaged or its file's bytes are not the ones registered.
  absl::StatusOr<const RegistryEntry*> Check(int version) const;

  // Copies the model file at `model_path` in as the next version, parent =
  // the serving one; returns its number.
  absl::StatusOr<int> Register(const std::string& model_path, const std::string& created_by,
                               const std::optional<LogWindow>& window);
  // Makes change.to serve and appends `change` to the history.
  absl::Status Record(ServingChange change);
  // Takes back the last Record (its `from` serves again, its entry leaves
  // the history): for a change the sidecar then refused.
  absl::Status UndoLast();
  // The version that served before the serving one was last promoted (what
  // rollback restores); nullopt when there is none.
  std::optional<int> Previous() const;

 private:
  explicit ModelRegistry(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
  std::vector<RegistryEntry> entries_;  // by version
  std::optional<int> serving_;
  std::vector<ServingChange> history_;

  // Writes registry.json as `serving` and `history` (atomically), then
  // holds them.
  absl::Status Write(std::optional<int> serving, std::vector<ServingChange> history);
};

// The user and host running the command ("alice@host"), for `by`.
std::string CurrentUser();
// Now in UTC, RFC 3339 to the second.
std::string UtcNow();
// 16 hex digits of FNV-1a over the file's bytes (NOT_FOUND when unreadable).
absl::StatusOr<std::string> FileChecksum(const std::string& path);

// Tests: when the environment variable KVLEARN_REGISTRY_CRASH_AT equals
// `point`, the process kills itself (SIGKILL) there, as a crash would.
void CrashPoint(const char* point);

}  // namespace kvlearn
