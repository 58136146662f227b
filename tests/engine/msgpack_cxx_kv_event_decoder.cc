// The KV event decoder as it was before engine/msgpack_reader.h: the
// reference the differential test (kv_event_decoder_differential_test.cc)
// holds the skipping decoder to. Not linked into any program.
//
// One msgpack pass builds the object tree (msgpack-cxx's own object-building
// visitor, wrapped by BoundedObjectVisitor): before the wrapped visitor
// allocates the elements an array or map header declares, the wrapper adds
// them to a running total and stops the parse once the total passes the
// payload's byte count (a real element takes at least one byte) or the
// nesting passes max_depth. The tree therefore holds at most one
// msgpack::object per payload byte, whatever the headers claim; msgpack's
// unpack_limit, set from the payload size, stays as a second line. Strings and
// byte strings point into the payload, nothing is copied. A second pass walks
// the tree and fills the batch; its messages are built only once something is
// wrong.

#include "tests/engine/msgpack_cxx_kv_event_decoder.h"

#include <cmath>
#include <exception>
#include <limits>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#ifndef MSGPACK_NO_BOOST
#define MSGPACK_NO_BOOST
#endif
#include <msgpack.hpp>

namespace kvlearn {

namespace {

// This Abseil's string_view is its own type, not std::string_view.
absl::string_view A(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Strings and byte strings stay in the payload (it outlives the tree).
bool ReferencePayload(msgpack::type::object_type, std::size_t, void*) { return true; }

// msgpack-cxx's object-building visitor, with declared element counts and
// nesting checked before it allocates, and parse errors recorded instead of
// thrown. msgpack::parse calls these by the static type (the base's methods
// are not virtual; these hide them).
class BoundedObjectVisitor : public msgpack::detail::create_object_visitor {
 public:
  BoundedObjectVisitor(uint64_t element_budget, uint32_t max_depth,
                       const msgpack::unpack_limit& limit)
      : create_object_visitor(ReferencePayload, nullptr, limit),
        budget_(element_budget),
        max_depth_(max_depth) {}

  bool start_array(uint32_t n) { return Enter(n) && create_object_visitor::start_array(n); }
  bool end_array() {
    --depth_;
    return create_object_visitor::end_array();
  }
  bool start_map(uint32_t n) {
    return Enter(uint64_t{2} * n) && create_object_visitor::start_map(n);
  }
  bool end_map() {
    --depth_;
    return create_object_visitor::end_map();
  }
  void parse_error(size_t, size_t) {
    if (error_.empty()) error_ = "not msgpack (invalid type byte)";
  }
  void insufficient_bytes(size_t, size_t) {
    if (error_.empty()) error_ = "truncated payload";
  }

  const std::string& error() const { return error_; }

 private:
  bool Enter(uint64_t elements) {
    declared_ += elements;
    if (declared_ > budget_) {
      error_ = absl::StrCat("truncated or corrupt: containers declare more elements (", declared_,
                            ") than the payload has bytes (", budget_, ")");
      return false;
    }
    if (++depth_ > max_depth_) {
      error_ = absl::StrCat("nesting deeper than ", max_depth_);
      return false;
    }
    return true;
  }

  uint64_t budget_;
  uint32_t max_depth_;
  uint64_t declared_ = 0;
  uint32_t depth_ = 0;
  std::string error_;
};

const char* TypeName(const msgpack::object& o) {
  switch (o.type) {
    case msgpack::type::NIL:
      return "nil";
    case msgpack::type::BOOLEAN:
      return "a boolean";
    case msgpack::type::POSITIVE_INTEGER:
    case msgpack::type::NEGATIVE_INTEGER:
      return "an integer";
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
      return "a float";
    case msgpack::type::STR:
      return "a string";
    case msgpack::type::BIN:
      return "bytes";
    case msgpack::type::ARRAY:
      return "an array";
    case msgpack::type::MAP:
      return "a map";
    case msgpack::type::EXT:
      return "an extension";
  }
  return "an unknown type";
}

std::string_view StrOf(const msgpack::object& o) { return {o.via.str.ptr, o.via.str.size}; }

// Where a value sits, for messages: "events[2].block_hashes[0]", "ts".
struct Where {
  int64_t event = -1;  // -1: the batch itself
  std::string_view field;
  int64_t index = -1;

  std::string Name() const {
    std::string s;
    if (event >= 0) absl::StrAppend(&s, "events[", event, "]");
    if (!field.empty()) absl::StrAppend(&s, s.empty() ? "" : ".", A(field));
    if (index >= 0) absl::StrAppend(&s, "[", index, "]");
    return s.empty() ? std::string("payload") : s;
  }
  Where At(int64_t i) const { return {event, field, i}; }
};

absl::Status Invalid(const Where& where, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where.Name(), ": ", A(what)));
}

absl::Status WrongType(const Where& where, std::string_view want, const msgpack::object& got) {
  return Invalid(where, absl::StrCat("expected ", A(want), ", got ", TypeName(got)));
}

absl::Status Missing(const Where& where) { return Invalid(where, "missing"); }

absl::Status ReadHash(const msgpack::object& o, const Where& where, uint64_t* out) {
  switch (o.type) {
    case msgpack::type::POSITIVE_INTEGER:
      *out = o.via.u64;
      return absl::OkStatus();
    case msgpack::type::NEGATIVE_INTEGER:
      *out = static_cast<uint64_t>(o.via.i64);
      return absl::OkStatus();
    case msgpack::type::BIN:
      if (o.via.bin.size == 0) return Invalid(where, "empty byte-string hash");
      *out = HashFromBytes(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(o.via.bin.ptr),
                                                    o.via.bin.size));
      return absl::OkStatus();
    default:
      return WrongType(where, "an integer or bytes", o);
  }
}

absl::Status ReadHashList(const msgpack::object& o, const Where& where,
                          std::vector<uint64_t>* out) {
  if (o.type != msgpack::type::ARRAY) return WrongType(where, "an array", o);
  out->resize(o.via.array.size);
  for (uint32_t i = 0; i < o.via.array.size; ++i) {
    if (absl::Status s = ReadHash(o.via.array.ptr[i], where.At(i), &(*out)[i]); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ReadOptionalHash(const msgpack::object& o, const Where& where,
                              std::optional<uint64_t>* out) {
  if (o.type == msgpack::type::NIL) {
    out->reset();
    return absl::OkStatus();
  }
  uint64_t h = 0;
  if (absl::Status s = ReadHash(o, where, &h); !s.ok()) return s;
  *out = h;
  return absl::OkStatus();
}

// An integer or nil (nil leaves `out` empty).
absl::Status ReadOptionalInt(const msgpack::object& o, const Where& where,
                             std::optional<int64_t>* out) {
  if (o.type == msgpack::type::NIL) {
    out->reset();
    return absl::OkStatus();
  }
  if (o.type == msgpack::type::NEGATIVE_INTEGER) {
    *out = o.via.i64;
    return absl::OkStatus();
  }
  if (o.type == msgpack::type::POSITIVE_INTEGER) {
    if (o.via.u64 > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Invalid(where, "integer out of range");
    }
    *out = static_cast<int64_t>(o.via.u64);
    return absl::OkStatus();
  }
  return WrongType(where, "an integer or nil", o);
}

absl::Status ReadMedium(const msgpack::object& o, const Where& where, KvMedium* medium,
                        std::string* name) {
  if (o.type == msgpack::type::NIL) {
    *medium = KvMedium::kUnspecified;
    return absl::OkStatus();
  }
  if (o.type != msgpack::type::STR) return WrongType(where, "a string or nil", o);
  *medium = ParseKvMedium(StrOf(o));
  if (*medium == KvMedium::kOther) name->assign(StrOf(o));
  return absl::OkStatus();
}

constexpr uint64_t kMaxBlockSize = uint64_t{1} << 24;

absl::Status ReadBlockSize(const msgpack::object& o, const Where& where, uint32_t* out) {
  if (o.type != msgpack::type::POSITIVE_INTEGER) {
    if (o.type == msgpack::type::NEGATIVE_INTEGER) return Invalid(where, "negative block size");
    return WrongType(where, "a non-negative integer", o);
  }
  if (o.via.u64 > kMaxBlockSize) {
    return Invalid(where, absl::StrCat("block size ", o.via.u64, " above ", kMaxBlockSize));
  }
  *out = static_cast<uint32_t>(o.via.u64);
  return absl::OkStatus();
}

absl::Status ReadTokenIds(const msgpack::object& o, const Where& where, uint32_t* count) {
  // Only the count matters here; token values are not checked.
  if (o.type != msgpack::type::ARRAY) return WrongType(where, "an array", o);
  *count = o.via.array.size;
  return absl::OkStatus();
}

void FinishStored(BlockStoredEvent& e) {
  if (e.block_size > 0) {
    e.tokens_per_block = e.block_size;
  } else if (!e.block_hashes.empty()) {
    e.tokens_per_block = static_cast<uint32_t>(e.num_token_ids / e.block_hashes.size());
  }
}

// Field names shared by both forms, in the array form's order after the tag.
constexpr std::string_view kStoredFields[] = {"block_hashes", "parent_block_hash", "token_ids",
                                              "block_size",   "lora_id",           "medium"};
constexpr std::string_view kRemovedFields[] = {"block_hashes", "medium"};

// Sets one BlockStored field by name; unknown names are ignored.
absl::Status SetStoredField(std::string_view key, const msgpack::object& v, int64_t event,
                            BlockStoredEvent& e, uint32_t* seen) {
  const Where where{event, key};
  if (key == "block_hashes") {
    *seen |= 1;
    return ReadHashList(v, where, &e.block_hashes);
  }
  if (key == "parent_block_hash") return ReadOptionalHash(v, where, &e.parent_block_hash);
  if (key == "token_ids") {
    *seen |= 2;
    return ReadTokenIds(v, where, &e.num_token_ids);
  }
  if (key == "block_size") {
    *seen |= 4;
    return ReadBlockSize(v, where, &e.block_size);
  }
  if (key == "lora_id") return ReadOptionalInt(v, where, &e.lora_id);
  if (key == "medium") return ReadMedium(v, where, &e.medium, &e.medium_name);
  if (key == "group_idx") return ReadOptionalInt(v, where, &e.group_idx);
  return absl::OkStatus();
}

absl::Status CheckStoredRequired(uint32_t seen, int64_t event) {
  if (!(seen & 1)) return Missing({event, "block_hashes"});
  if (!(seen & 2)) return Missing({event, "token_ids"});
  if (!(seen & 4)) return Missing({event, "block_size"});
  return absl::OkStatus();
}

absl::Status SetRemovedField(std::string_view key, const msgpack::object& v, int64_t event,
                             BlockRemovedEvent& e, uint32_t* seen) {
  const Where where{event, key};
  if (key == "block_hashes") {
    *seen |= 1;
    return ReadHashList(v, where, &e.block_hashes);
  }
  if (key == "medium") return ReadMedium(v, where, &e.medium, &e.medium_name);
  if (key == "group_idx") return ReadOptionalInt(v, where, &e.group_idx);
  return absl::OkStatus();
}

enum class Tag { kStored, kRemoved, kCleared, kUnknown };

Tag TagOf(std::string_view tag) {
  if (tag == "BlockStored") return Tag::kStored;
  if (tag == "BlockRemoved") return Tag::kRemoved;
  if (tag == "AllBlocksCleared") return Tag::kCleared;
  return Tag::kUnknown;
}

// Decodes events[i]; an unknown tag leaves `out` empty.
absl::Status DecodeEvent(const msgpack::object& o, int64_t i, std::optional<EngineEvent>* out) {
  const Where here{i, ""};
  out->reset();
  if (o.type == msgpack::type::ARRAY) {
    const uint32_t n = o.via.array.size;
    const msgpack::object* a = o.via.array.ptr;
    if (n == 0) return Invalid(here, "empty array (no tag)");
    if (a[0].type != msgpack::type::STR) return WrongType({i, "tag"}, "a string", a[0]);
    switch (TagOf(StrOf(a[0]))) {
      case Tag::kStored: {
        // block_hashes, parent_block_hash, token_ids, block_size are required;
        // lora_id and medium were added later; further elements are ignored.
        if (n < 5) {
          return Invalid(
              here, absl::StrCat("BlockStored array has ", n - 1, " fields, needs at least 4"));
        }
        BlockStoredEvent e;
        uint32_t seen = 0;
        for (uint32_t f = 0; f < std::size(kStoredFields) && f + 1 < n; ++f) {
          if (absl::Status s = SetStoredField(kStoredFields[f], a[f + 1], i, e, &seen); !s.ok()) {
            return s;
          }
        }
        FinishStored(e);
        *out = std::move(e);
        return absl::OkStatus();
      }
      case Tag::kRemoved: {
        if (n < 2) return Missing({i, "block_hashes"});
        BlockRemovedEvent e;
        uint32_t seen = 0;
        for (uint32_t f = 0; f < std::size(kRemovedFields) && f + 1 < n; ++f) {
          if (absl::Status s = SetRemovedField(kRemovedFields[f], a[f + 1], i, e, &seen); !s.ok()) {
            return s;
          }
        }
        *out = std::move(e);
        return absl::OkStatus();
      }
      case Tag::kCleared:
        *out = AllBlocksClearedEvent{};
        return absl::OkStatus();
      case Tag::kUnknown:
        return absl::OkStatus();
    }
  }
  if (o.type == msgpack::type::MAP) {
    const msgpack::object_kv* kv = o.via.map.ptr;
    const uint32_t n = o.via.map.size;
    const msgpack::object* tag = nullptr;
    for (uint32_t k = 0; k < n; ++k) {
      if (kv[k].key.type == msgpack::type::STR && StrOf(kv[k].key) == "type") tag = &kv[k].val;
    }
    if (tag == nullptr) return Missing({i, "type"});
    if (tag->type != msgpack::type::STR) return WrongType({i, "type"}, "a string", *tag);
    switch (TagOf(StrOf(*tag))) {
      case Tag::kStored: {
        BlockStoredEvent e;
        uint32_t seen = 0;
        for (uint32_t k = 0; k < n; ++k) {
          if (kv[k].key.type != msgpack::type::STR) continue;
          if (absl::Status s = SetStoredField(StrOf(kv[k].key), kv[k].val, i, e, &seen); !s.ok()) {
            return s;
          }
        }
        if (absl::Status s = CheckStoredRequired(seen, i); !s.ok()) return s;
        FinishStored(e);
        *out = std::move(e);
        return absl::OkStatus();
      }
      case Tag::kRemoved: {
        BlockRemovedEvent e;
        uint32_t seen = 0;
        for (uint32_t k = 0; k < n; ++k) {
          if (kv[k].key.type != msgpack::type::STR) continue;
          if (absl::Status s = SetRemovedField(StrOf(kv[k].key), kv[k].val, i, e, &seen); !s.ok()) {
            return s;
          }
        }
        if (!(seen & 1)) return Missing({i, "block_hashes"});
        *out = std::move(e);
        return absl::OkStatus();
      }
      case Tag::kCleared:
        *out = AllBlocksClearedEvent{};
        return absl::OkStatus();
      case Tag::kUnknown:
        return absl::OkStatus();
    }
  }
  return WrongType(here, "an array or a map", o);
}

absl::Status ReadTs(const msgpack::object& o, double* ts) {
  switch (o.type) {
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
      *ts = o.via.f64;
      break;
    case msgpack::type::POSITIVE_INTEGER:
      *ts = static_cast<double>(o.via.u64);
      break;
    case msgpack::type::NEGATIVE_INTEGER:
      *ts = static_cast<double>(o.via.i64);
      break;
    default:
      return WrongType({-1, "ts"}, "a number", o);
  }
  if (!std::isfinite(*ts)) return Invalid({-1, "ts"}, "not finite");
  return absl::OkStatus();
}

absl::Status DecodeEvents(const msgpack::object& o, EngineEventBatch& batch) {
  if (o.type != msgpack::type::ARRAY) return WrongType({-1, "events"}, "an array", o);
  batch.events.reserve(o.via.array.size);
  std::optional<EngineEvent> event;
  for (uint32_t i = 0; i < o.via.array.size; ++i) {
    if (absl::Status s = DecodeEvent(o.via.array.ptr[i], i, &event); !s.ok()) return s;
    if (event.has_value()) {
      batch.events.push_back(std::move(*event));
    } else {
      ++batch.unknown_events;
    }
  }
  return absl::OkStatus();
}

absl::Status DecodeBatch(const msgpack::object& root, EngineEventBatch& batch) {
  if (root.type == msgpack::type::ARRAY) {
    const uint32_t n = root.via.array.size;
    const msgpack::object* a = root.via.array.ptr;
    if (n < 2) {
      return Invalid({}, absl::StrCat("batch array has ", n, " elements, needs ts and events"));
    }
    if (absl::Status s = ReadTs(a[0], &batch.ts); !s.ok()) return s;
    if (absl::Status s = DecodeEvents(a[1], batch); !s.ok()) return s;
    if (n >= 3) return ReadOptionalInt(a[2], {-1, "data_parallel_rank"}, &batch.data_parallel_rank);
    return absl::OkStatus();
  }
  if (root.type == msgpack::type::MAP) {
    const msgpack::object* ts = nullptr;
    const msgpack::object* events = nullptr;
    for (uint32_t k = 0; k < root.via.map.size; ++k) {
      const msgpack::object_kv& kv = root.via.map.ptr[k];
      if (kv.key.type != msgpack::type::STR) continue;
      const std::string_view key = StrOf(kv.key);
      if (key == "ts") {
        ts = &kv.val;
      } else if (key == "events") {
        events = &kv.val;
      } else if (key == "data_parallel_rank" || key == "attn_dp_rank") {
        if (absl::Status s = ReadOptionalInt(kv.val, {-1, key}, &batch.data_parallel_rank);
            !s.ok()) {
          return s;
        }
      }
    }
    if (ts == nullptr) return Missing({-1, "ts"});
    if (events == nullptr) return Missing({-1, "events"});
    if (absl::Status s = ReadTs(*ts, &batch.ts); !s.ok()) return s;
    return DecodeEvents(*events, batch);
  }
  return WrongType({}, "a batch (array or map)", root);
}

}  // namespace

absl::StatusOr<EngineEventBatch> DecodeKvEventBatchWithMsgpackCxx(
    std::span<const uint8_t> payload, const KvEventDecodeOptions& options) {
  if (payload.empty()) return absl::InvalidArgumentError("payload: empty");
  if (payload.size() > options.max_payload_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "payload: ", payload.size(), " bytes, above the limit of ", options.max_payload_bytes));
  }
  const char* data = reinterpret_cast<const char*>(payload.data());
  const size_t len = payload.size();

  const msgpack::unpack_limit limit(/*array=*/len, /*map=*/len / 2, /*str=*/len, /*bin=*/len,
                                    /*ext=*/len, /*depth=*/options.max_depth + 1);
  msgpack::zone zone;  // owns the tree; it points into the payload for strings
  BoundedObjectVisitor visitor(len, options.max_depth, limit);
  visitor.set_zone(zone);
  visitor.set_referenced(false);
  size_t off = 0;
  bool parsed = false;
  try {
    parsed = msgpack::parse(data, len, off, visitor);
  } catch (const std::exception& e) {  // unpack_limit overflows, bad_alloc
    return absl::InvalidArgumentError(absl::StrCat("payload: ", e.what()));
  }
  if (!parsed) {
    return absl::InvalidArgumentError(
        absl::StrCat("payload: ", visitor.error().empty() ? "not msgpack" : visitor.error()));
  }
  if (off != len) {
    return absl::InvalidArgumentError(
        absl::StrCat("payload: ", len - off, " trailing bytes after the batch"));
  }

  EngineEventBatch batch;
  if (absl::Status s = DecodeBatch(visitor.data(), batch); !s.ok()) return s;
  return batch;
}

}  // namespace kvlearn
