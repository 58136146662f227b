#include "server/request_validation.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace kvlearn {
namespace {

using v1::Event;

// `field` is a string or a callable returning one: built only on error,
// since these checks run per block on the ingestion path.
std::string FieldName(const char* f) { return f; }
std::string FieldName(const std::string& f) { return f; }
template <typename F>
std::string FieldName(const F& f) {
  return f();
}

// A positive size no larger than `max`.
template <typename Field>
absl::Status CheckSize(int64_t v, const Field& field, int64_t max = kMaxBlockBytes) {
  if (v <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(FieldName(field), ": must be > 0, got ", v));
  }
  if (v > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(FieldName(field), ": ", v, " is over the limit of ", max));
  }
  return absl::OkStatus();
}

std::string ParentText(const BlockCatalog& c, BlockIndex parent) {
  return parent == kNoBlock ? "nothing" : absl::StrCat(c[parent].hash_id);
}

// The payload that marks a string field over the cap.
constexpr char kTooLongMark[] = "kvlearn/string-field-too-long";

// A string `field` of at most kMaxStringFieldBytes (and at least one byte
// when `required`).
absl::Status CheckStringField(const std::string& value, const char* field, bool required = false) {
  if (value.size() > kMaxStringFieldBytes) {
    return StringFieldTooLong(absl::StrCat(field, ": must be ", required ? "1.." : "at most ",
                                           kMaxStringFieldBytes, " bytes, got ", value.size()));
  }
  if (required && value.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": must be 1..", kMaxStringFieldBytes, " bytes, got 0"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status StringFieldTooLong(const std::string& message) {
  absl::Status status = absl::InvalidArgumentError(message);
  status.SetPayload(kTooLongMark, absl::Cord());
  return status;
}

bool IsStringFieldTooLong(const absl::Status& status) {
  return !status.ok() && status.GetPayload(kTooLongMark).has_value();
}

absl::Status ValidateNodeId(std::string_view node_id, const std::string& field) {
  if (node_id.size() > kMaxStringFieldBytes) {
    return StringFieldTooLong(absl::StrCat(field, ": must be 1..", kMaxStringFieldBytes,
                                           " characters, got ", node_id.size()));
  }
  if (node_id.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": must be 1..", kMaxStringFieldBytes, " characters, got 0"));
  }
  for (char c : node_id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == ':' || c == '/' || c == '-';
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": character 0x",
                                                     absl::Hex(static_cast<unsigned char>(c)),
                                                     " not allowed (use [A-Za-z0-9._:/-])"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateEvent(const Event& e) {
  if (e.timestamp_us() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("timestamp_us: must be >= 0, got ", e.timestamp_us()));
  }
  switch (e.kind_case()) {
    case Event::kRequestArrival: {
      const auto& r = e.request_arrival();
      if (r.block_ids().empty()) {
        return absl::InvalidArgumentError("request_arrival.block_ids: empty");
      }
      if (r.input_length() < 0 || r.output_length() < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "request_arrival.", r.input_length() < 0 ? "input_length" : "output_length",
            ": must be >= 0"));
      }
      if (!r.block_tokens().empty() && r.block_tokens_size() != r.block_ids_size()) {
        return absl::InvalidArgumentError(absl::StrCat("request_arrival.block_tokens: has ",
                                                       r.block_tokens_size(), " entries for ",
                                                       r.block_ids_size(), " block ids"));
      }
      if (!r.block_bytes().empty() && r.block_bytes_size() != r.block_ids_size()) {
        return absl::InvalidArgumentError(absl::StrCat("request_arrival.block_bytes: has ",
                                                       r.block_bytes_size(), " entries for ",
                                                       r.block_ids_size(), " block ids"));
      }
      for (int i = 0; i < r.block_tokens_size(); ++i) {
        // A block's token count is 32 bits wide in the catalog.
        if (auto s = CheckSize(
                r.block_tokens(i),
                [i] { return absl::StrCat("request_arrival.block_tokens[", i, "]"); },
                int64_t{UINT32_MAX});
            !s.ok()) {
          return s;
        }
      }
      for (int i = 0; i < r.block_bytes_size(); ++i) {
        if (auto s =
                CheckSize(r.block_bytes(i),
                          [i] { return absl::StrCat("request_arrival.block_bytes[", i, "]"); });
            !s.ok()) {
          return s;
        }
      }
      if (r.served_above() > static_cast<uint32_t>(r.block_ids_size())) {
        return absl::InvalidArgumentError(
            absl::StrCat("request_arrival.served_above: ", r.served_above(),
                         " blocks of a chain of ", r.block_ids_size()));
      }
      if (auto s = CheckStringField(r.request_id(), "request_arrival.request_id"); !s.ok()) {
        return s;
      }
      // A repeated id would make the chain a cycle. Short chains (most) are
      // checked pairwise, without allocating.
      absl::flat_hash_set<uint64_t> seen;
      const int n = r.block_ids_size();
      for (int i = 0; i < n; ++i) {
        bool repeat = false;
        if (n <= 32) {
          for (int j = 0; j < i && !repeat; ++j) repeat = r.block_ids(j) == r.block_ids(i);
        } else {
          repeat = !seen.insert(r.block_ids(i)).second;
        }
        if (repeat) {
          return absl::InvalidArgumentError(absl::StrCat("request_arrival.block_ids[", i, "]: id ",
                                                         r.block_ids(i),
                                                         " repeats within the chain"));
        }
      }
      break;
    }
    case Event::kBlockStored: {
      const auto& st = e.block_stored();
      if (auto s = CheckSize(st.tokens(), "block_stored.tokens"); !s.ok()) return s;
      if (auto s = CheckSize(st.bytes(), "block_stored.bytes"); !s.ok()) return s;
      if (st.has_parent_id() && st.parent_id() == st.block_id()) {
        return absl::InvalidArgumentError(
            absl::StrCat("block_stored.parent_id: block ", st.block_id(), " is its own parent"));
      }
      if (st.tokens() > UINT32_MAX) {
        return absl::InvalidArgumentError("block_stored.tokens: too large");
      }
      break;
    }
    case Event::kTransferFinished: {
      const auto& t = e.transfer_finished();
      if (t.bytes() < 0 || t.microseconds() < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "transfer_finished.", t.bytes() < 0 ? "bytes" : "microseconds", ": must be >= 0"));
      }
      // Logged as sent: without a cap one event could carry megabytes.
      if (auto s = CheckStringField(t.src(), "transfer_finished.src"); !s.ok()) return s;
      if (auto s = CheckStringField(t.dst(), "transfer_finished.dst"); !s.ok()) return s;
      return ValidateNodeId(e.node_id(), "node_id");
    }
    case Event::kPoolConfigured:
      if (auto s = CheckSize(e.pool_configured().capacity_bytes(), "pool_configured.capacity_bytes",
                             kMaxPoolBytes);
          !s.ok()) {
        return s;
      }
      break;
    case Event::kRequestFinished: {
      if (auto s = CheckStringField(e.request_finished().request_id(),
                                    "request_finished.request_id", /*required=*/true);
          !s.ok()) {
        return s;
      }
      break;
    }
    case Event::kBatchReceived: {
      const auto& m = e.batch_received();
      if (m.batch_id() == 0)
        return absl::InvalidArgumentError("batch_received.batch_id: must be > 0");
      if (auto s = CheckStringField(m.source(), "batch_received.source"); !s.ok()) return s;
      return absl::OkStatus();  // concerns no pool: no node id needed
    }
    case Event::kBlockRemoved:
    case Event::kBlockHit:
    case Event::kAllBlocksCleared:
      break;
    case Event::KIND_NOT_SET:
      return absl::InvalidArgumentError("kind: no event set");
  }

  return absl::OkStatus();
}

absl::Status ValidateAdmitRequest(const v1::AdmitRequest& request, uint32_t max_candidates) {
  if (request.timestamp_us() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("timestamp_us: must be >= 0, got ", request.timestamp_us()));
  }
  const int n = request.candidates_size();
  if (n == 0) return absl::InvalidArgumentError("candidates: empty");
  if (static_cast<uint32_t>(n) > max_candidates) {
    return absl::ResourceExhaustedError(absl::StrCat("candidates: ", n, " over the limit of ",
                                                     max_candidates, " (--max-candidates)"));
  }
  for (int i = 0; i < n; ++i) {
    const auto& c = request.candidates(i);
    const std::string field = absl::StrCat("candidates[", i, "]");
    if (auto s = CheckSize(c.tokens(), field + ".tokens"); !s.ok()) return s;
    if (auto s = CheckSize(c.bytes(), field + ".bytes"); !s.ok()) return s;
    if (c.tokens() > UINT32_MAX) return absl::InvalidArgumentError(field + ".tokens: too large");
    if (i > 0 && (!c.has_parent_id() || c.parent_id() != request.candidates(i - 1).block_id())) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".parent_id: must be the previous candidate's block_id ",
                       request.candidates(i - 1).block_id(), " (candidates form one chain)"));
    }
    if (c.has_parent_id() && c.parent_id() == c.block_id()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".parent_id: block ", c.block_id(), " is its own parent"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateRankRequest(const v1::RankRequest& request, uint32_t max_candidates) {
  if (request.bytes_to_free() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bytes_to_free: must be > 0, got ", request.bytes_to_free()));
  }
  if (static_cast<uint32_t>(request.candidate_ids_size()) > max_candidates) {
    return absl::ResourceExhaustedError(
        absl::StrCat("candidate_ids: ", request.candidate_ids_size(), " over the limit of ",
                     max_candidates, " (--max-candidates)"));
  }
  return absl::OkStatus();
}

absl::Status CheckParent(const BlockCatalog& c, uint64_t id, std::optional<uint64_t> parent_hash,
                         std::string_view field) {
  const BlockIndex b = c.Find(id);
  if (b == kNoBlock) return absl::OkStatus();
  const BlockIndex seen = c[b].parent;
  const bool same =
      parent_hash ? (seen != kNoBlock && c[seen].hash_id == *parent_hash) : seen == kNoBlock;
  if (same) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(std::string(field), ": block id ", id, " follows ",
                   parent_hash ? absl::StrCat(*parent_hash) : std::string("nothing"), " here but ",
                   ParentText(c, seen), " before, so the ids are not prefix hashes"));
}

}  // namespace kvlearn
