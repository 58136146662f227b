#include "server/model_registry.h"

#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <simdjson.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/fnv1a.h"
#include "models/model_metadata_json.h"

namespace kvlearn {
namespace fs = std::filesystem;
namespace {

constexpr char kRegistryFile[] = "registry.json";

absl::Status Errno(const std::string& what, const std::string& path) {
  return absl::UnavailableError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

absl::Status FsyncPath(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags);
  if (fd < 0) return Errno("cannot open", path);
  const int synced = ::fsync(fd);
  ::close(fd);
  if (synced != 0) return Errno("cannot fsync", path);
  return absl::OkStatus();
}

// Writes `bytes` to `path` through a temporary file that is fsynced and
// renamed into place, then fsyncs the directory, so `path` is either its old
// self or all of `bytes`, whenever the process dies. `crash_point` names the
// moment after the temporary file is whole and before the rename.
absl::Status WriteFileAtomically(const std::string& path, std::string_view bytes,
                                 const char* crash_point) {
  const std::string partial = absl::StrCat(path, ".partial");
  const int fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return Errno("cannot create", partial);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      return Errno("cannot write", partial);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    return Errno("cannot fsync", partial);
  }
  ::close(fd);
  CrashPoint(crash_point);
  if (std::rename(partial.c_str(), path.c_str()) != 0) return Errno("cannot rename onto", path);
  return FsyncPath(fs::path(path).parent_path().string(), O_RDONLY | O_DIRECTORY);
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot be read"));
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string OptionalInt(const std::optional<int64_t>& v) {
  return v.has_value() ? absl::StrCat(*v) : "null";
}

std::string EntryJson(const RegistryEntry& e) {
  std::string window = "null";
  if (e.window.has_value()) {
    const LogWindow& w = *e.window;
    window = absl::StrCat(
        "{\"node\": \"", JsonEscaped(w.node), "\", \"since_ms\": ", OptionalInt(w.since_ms),
        ", \"until_ms\": ", OptionalInt(w.until_ms), ", \"first_ms\": ", w.first_ms,
        ", \"last_ms\": ", w.last_ms, ", \"requests\": ", w.requests,
        ", \"first_sequence\": ", w.first_sequence, ", \"next_sequence\": ", w.next_sequence, "}");
  }
  return absl::StrCat(
      "{\"version\": ", e.version, ",\n \"file\": \"", JsonEscaped(e.file),
      "\",\n \"checksum\": \"", e.checksum, "\",\n \"bytes\": ", e.bytes,
      ",\n \"parent\": ", e.parent.has_value() ? absl::StrCat(*e.parent) : std::string("null"),
      ",\n \"created_at\": \"", JsonEscaped(e.created_at), "\",\n \"created_by\": \"",
      JsonEscaped(e.created_by), "\",\n \"window\": ", window, "}\n");
}

std::string RegistryJson(std::optional<int> serving, const std::vector<ServingChange>& history) {
  std::vector<std::string> changes;
  for (const ServingChange& c : history) {
    changes.push_back(absl::StrCat(
        "  {\"action\": \"", JsonEscaped(c.action), "\", \"to\": ", c.to,
        ", \"from\": ", c.from.has_value() ? absl::StrCat(*c.from) : std::string("null"),
        ", \"by\": \"", JsonEscaped(c.by), "\", \"at\": \"", JsonEscaped(c.at), "\", \"forced\": ",
        c.forced ? "true" : "false", ", \"evaluation\": \"", JsonEscaped(c.evaluation), "\"}"));
  }
  return absl::StrCat(
      "{\"serving\": ", serving.has_value() ? absl::StrCat(*serving) : std::string("null"),
      ",\n \"history\": [\n", absl::StrJoin(changes, ",\n"), "\n]}\n");
}

// An integer field or null.
bool ReadOptionalInt(simdjson::dom::element obj, const char* key, std::optional<int64_t>& out) {
  simdjson::dom::element v;
  if (obj[key].get(v)) return false;
  if (v.is_null()) {
    out.reset();
    return true;
  }
  int64_t x = 0;
  if (v.get(x)) return false;
  out = x;
  return true;
}

// Parses vN.json into `e`; the reason it does not parse otherwise.
std::string ParseEntry(const std::string& text, RegistryEntry& e) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (auto error = parser.parse(text).get(doc)) {
    return absl::StrCat("not valid JSON (", simdjson::error_message(error), ")");
  }
  int64_t version = 0;
  uint64_t bytes = 0;
  std::string_view file, checksum, created_at, created_by;
  std::optional<int64_t> parent;
  if (doc["version"].get(version) || doc["file"].get(file) || doc["checksum"].get(checksum) ||
      doc["bytes"].get(bytes) || !ReadOptionalInt(doc, "parent", parent) ||
      doc["created_at"].get(created_at) || doc["created_by"].get(created_by)) {
    return "needs version, file, checksum, bytes, parent, created_at and created_by";
  }
  if (version != e.version) {
    return absl::StrCat("says it is version ", version, " but is named v", e.version, ".json");
  }
  if (file.empty() || file.find('/') != std::string_view::npos) {
    return "field 'file' must name a file inside the models directory";
  }
  e.file = std::string(file);
  e.checksum = std::string(checksum);
  e.bytes = bytes;
  if (parent.has_value()) e.parent = static_cast<int>(*parent);
  e.created_at = std::string(created_at);
  e.created_by = std::string(created_by);
  simdjson::dom::element w;
  if (!doc["window"].get(w) && !w.is_null()) {
    LogWindow window;
    std::string_view node;
    if (w["node"].get(node) || !ReadOptionalInt(w, "since_ms", window.since_ms) ||
        !ReadOptionalInt(w, "until_ms", window.until_ms) || w["first_ms"].get(window.first_ms) ||
        w["last_ms"].get(window.last_ms) || w["requests"].get(window.requests) ||
        w["first_sequence"].get(window.first_sequence) ||
        w["next_sequence"].get(window.next_sequence)) {
      return "field 'window' needs node, since_ms, until_ms, first_ms, last_ms, requests, "
             "first_sequence and next_sequence";
    }
    window.node = std::string(node);
    e.window = window;
  }
  return "";
}

absl::Status ParseRegistry(const std::string& path, const std::string& text,
                           std::optional<int>& serving, std::vector<ServingChange>& history) {
  const auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": ", what,
        "; nothing was changed: restore it from a backup, or delete it to serve no registered "
        "version"));
  };
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (auto error = parser.parse(text).get(doc)) {
    return bad(absl::StrCat("not valid JSON (", simdjson::error_message(error), ")"));
  }
  std::optional<int64_t> current;
  simdjson::dom::array changes;
  if (!ReadOptionalInt(doc, "serving", current) || doc["history"].get(changes)) {
    return bad("needs serving (a version or null) and history (an array)");
  }
  if (current.has_value()) serving = static_cast<int>(*current);
  for (simdjson::dom::element c : changes) {
    ServingChange change;
    std::string_view action, by, at, evaluation;
    int64_t to = 0;
    std::optional<int64_t> from;
    if (c["action"].get(action) || c["to"].get(to) || !ReadOptionalInt(c, "from", from) ||
        c["by"].get(by) || c["at"].get(at) || c["forced"].get(change.forced) ||
        c["evaluation"].get(evaluation)) {
      return bad(absl::StrCat("history[", history.size(),
                              "] needs action, to, from, by, at, forced and evaluation"));
    }
    change.action = std::string(action);
    change.to = static_cast<int>(to);
    if (from.has_value()) change.from = static_cast<int>(*from);
    change.by = std::string(by);
    change.at = std::string(at);
    change.evaluation = std::string(evaluation);
    history.push_back(std::move(change));
  }
  return absl::OkStatus();
}

// The models directory, owner-only as the data directory around it is (its
// files are created 0600).
absl::Status CreateOwnerOnly(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return Errno("cannot create", dir);
  return absl::OkStatus();
}

// N of a name "vN.json" (0 if it is not one).
int VersionOfEntryName(const std::string& name) {
  int n = 0;
  if (name.size() < 7 || name[0] != 'v' || !name.ends_with(".json")) return 0;
  if (!absl::SimpleAtoi(name.substr(1, name.size() - 6), &n) || n <= 0) return 0;
  return n;
}

}  // namespace

void CrashPoint(const char* point) {
  const char* want = std::getenv("KVLEARN_REGISTRY_CRASH_AT");
  if (point != nullptr && want != nullptr && std::strcmp(want, point) == 0) ::raise(SIGKILL);
}

std::string CurrentUser() {
  std::string user;
  if (const passwd* pw = ::getpwuid(::geteuid()); pw != nullptr) user = pw->pw_name;
  if (user.empty()) user = absl::StrCat("uid ", ::geteuid());
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) == 0 && host[0] != '\0') {
    absl::StrAppend(&user, "@", host);
  }
  return user;
}

std::string UtcNow() {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone());
}

absl::StatusOr<std::string> FileChecksum(const std::string& path) {
  auto bytes = ReadWholeFile(path);
  if (!bytes.ok()) return bytes.status();
  Fnv1a hash;
  hash.Bytes(*bytes);
  return absl::StrFormat("%016x", hash.value());
}

absl::StatusOr<ModelRegistry> ModelRegistry::Open(const std::string& data_dir) {
  ModelRegistry r((fs::path(data_dir) / "models").string());
  std::error_code ec;
  if (!fs::exists(r.dir_, ec)) return r;
  const std::string registry = (fs::path(r.dir_) / kRegistryFile).string();
  if (fs::exists(registry, ec)) {
    auto text = ReadWholeFile(registry);
    if (!text.ok()) return text.status();
    if (auto s = ParseRegistry(registry, *text, r.serving_, r.history_); !s.ok()) return s;
  }
  for (const fs::directory_entry& f : fs::directory_iterator(r.dir_, ec)) {
    const int version = VersionOfEntryName(f.path().filename().string());
    if (version == 0) continue;
    RegistryEntry e;
    e.version = version;
    auto text = ReadWholeFile(f.path().string());
    e.problem = text.ok() ? ParseEntry(*text, e) : std::string(text.status().message());
    if (e.problem.empty()) {
      const std::string model = r.PathOf(e);
      auto checksum = FileChecksum(model);
      if (!checksum.ok()) {
        e.problem = absl::StrCat("its model file ", model, " is missing or unreadable");
      } else if (*checksum != e.checksum) {
        e.problem = absl::StrCat("its model file ", model, " has checksum ", *checksum,
                                 ", not the registered ", e.checksum, " (changed or damaged)");
      }
    }
    r.entries_.push_back(std::move(e));
  }
  if (ec) return absl::UnavailableError(absl::StrCat("cannot list ", r.dir_, ": ", ec.message()));
  std::sort(r.entries_.begin(), r.entries_.end(),
            [](const RegistryEntry& a, const RegistryEntry& b) { return a.version < b.version; });
  return r;
}

std::string ModelRegistry::PathOf(const RegistryEntry& entry) const {
  return (fs::path(dir_) / entry.file).string();
}

absl::StatusOr<const RegistryEntry*> ModelRegistry::Find(int version) const {
  for (const RegistryEntry& e : entries_) {
    if (e.version == version) return &e;
  }
  std::vector<int> versions;
  for (const RegistryEntry& e : entries_) versions.push_back(e.version);
  return absl::NotFoundError(absl::StrCat(
      "no version ", version, " in ", dir_,
      versions.empty() ? " (it is empty)"
                       : absl::StrCat(" (versions: ", absl::StrJoin(versions, ", "), ")")));
}

absl::StatusOr<const RegistryEntry*> ModelRegistry::Check(int version) const {
  auto e = Find(version);
  if (!e.ok()) return e.status();
  if (!(*e)->problem.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("registry entry version ", version, " (",
                                                      dir_, "/v", version,
                                                      ".json) is refused: ", (*e)->problem));
  }
  return *e;
}

absl::StatusOr<int> ModelRegistry::Register(const std::string& model_path,
                                            const std::string& created_by,
                                            const std::optional<LogWindow>& window) {
  if (auto s = CreateOwnerOnly(dir_); !s.ok()) return s;
  auto bytes = ReadWholeFile(model_path);
  if (!bytes.ok()) return bytes.status();
  RegistryEntry e;
  e.version = entries_.empty() ? 1 : entries_.back().version + 1;
  e.file = absl::StrCat("v", e.version, ".pt");
  Fnv1a hash;
  hash.Bytes(*bytes);
  e.checksum = absl::StrFormat("%016x", hash.value());
  e.bytes = bytes->size();
  e.parent = serving_;
  e.created_at = UtcNow();
  e.created_by = created_by;
  e.window = window;
  // The model file first: an entry never names a file that is not whole.
  if (auto s = WriteFileAtomically(PathOf(e), *bytes, "register-model"); !s.ok()) return s;
  if (auto s =
          WriteFileAtomically((fs::path(dir_) / absl::StrCat("v", e.version, ".json")).string(),
                              EntryJson(e), "register-entry");
      !s.ok()) {
    return s;
  }
  entries_.push_back(e);
  return e.version;
}

absl::Status ModelRegistry::Write(std::optional<int> serving, std::vector<ServingChange> history) {
  if (auto s = CreateOwnerOnly(dir_); !s.ok()) return s;
  if (auto s = WriteFileAtomically((fs::path(dir_) / kRegistryFile).string(),
                                   RegistryJson(serving, history), "registry-rename");
      !s.ok()) {
    return s;
  }
  serving_ = serving;
  history_ = std::move(history);
  return absl::OkStatus();
}

absl::Status ModelRegistry::Record(ServingChange change) {
  std::vector<ServingChange> history = history_;
  history.push_back(change);
  return Write(change.to, std::move(history));
}

absl::Status ModelRegistry::UndoLast() {
  if (history_.empty()) return absl::FailedPreconditionError("no serving change to take back");
  std::vector<ServingChange> history = history_;
  const std::optional<int> from = history.back().from;
  history.pop_back();
  return Write(from, std::move(history));
}

std::optional<int> ModelRegistry::Previous() const {
  if (!serving_.has_value()) return std::nullopt;
  for (auto it = history_.rbegin(); it != history_.rend(); ++it) {
    if (it->action == "promote" && it->to == *serving_) return it->from;
  }
  return std::nullopt;
}

}  // namespace kvlearn
