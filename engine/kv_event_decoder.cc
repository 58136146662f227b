// KV event payload decoder: one pass over the bytes with MsgpackReader
// (engine/msgpack_reader.h), reading the fields it needs and skipping the
// rest in place; token_ids is only counted and skipped.
//
// The errors are those the msgpack-cxx decoder gave (it is kept as the
// reference in tests/engine/msgpack_cxx_kv_event_decoder.cc, and a
// differential test holds the two equal): that decoder checked the whole
// document's structure before reading any field, so when this pass finds
// anything wrong, MsgpackStructureError is asked first and a structural
// problem anywhere wins over the field error. Maps are read in key order;
// when a map event does not start with its "type" key, when a key comes twice,
// or when a field is wrong, the map is read again the slow way (find the last
// "type", then the fields in order), which is what the old decoder's
// semantics were, so the first error reported is the same.

#include "engine/kv_event_decoder.h"

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/msgpack_reader.h"

namespace kvlearn {
namespace {

// This Abseil's string_view is its own type, not std::string_view.
absl::string_view A(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Nesting of the batch's parts: the batch container is 1 deep, its events
// array 2, an event 3, an event's array fields 4. A value read "in" depth d
// sits inside d containers.
constexpr uint32_t kInBatch = 1;
constexpr uint32_t kInEvents = 2;
constexpr uint32_t kInEvent = 3;

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

absl::Status WrongType(const Where& where, std::string_view want, const MsgpackValue& got) {
  return Invalid(where, absl::StrCat("expected ", A(want), ", got ", MsgpackTypeName(got.type)));
}

absl::Status Missing(const Where& where) { return Invalid(where, "missing"); }

constexpr uint64_t kMaxBlockSize = uint64_t{1} << 24;

enum class Tag { kStored, kRemoved, kCleared, kUnknown };

Tag TagOf(std::string_view tag) {
  if (tag == "BlockStored") return Tag::kStored;
  if (tag == "BlockRemoved") return Tag::kRemoved;
  if (tag == "AllBlocksCleared") return Tag::kCleared;
  return Tag::kUnknown;
}

// Field names shared by both forms, in the array form's order after the tag.
constexpr std::string_view kStoredFields[] = {"block_hashes", "parent_block_hash", "token_ids",
                                              "block_size",   "lora_id",           "medium"};
constexpr std::string_view kRemovedFields[] = {"block_hashes", "medium"};

// Bits of the required BlockStored fields seen.
constexpr uint32_t kSawHashes = 1, kSawTokens = 2, kSawBlockSize = 4;

// The next event slot of the batch as a default T, reusing the hash list
// storage the slot's earlier event had (a subscriber decodes every payload
// into the same batch, so steady streams allocate nothing per event).
template <typename T>
T& NextEvent(std::vector<EngineEvent>& events, size_t& used) {
  if (used == events.size()) events.emplace_back();
  EngineEvent& slot = events[used++];
  std::vector<uint64_t> keep;
  std::visit(
      [&keep](auto& old) {
        if constexpr (!std::is_same_v<std::decay_t<decltype(old)>, AllBlocksClearedEvent>) {
          keep = std::move(old.block_hashes);
        }
      },
      slot);
  T& t = slot.emplace<T>();
  if constexpr (!std::is_same_v<T, AllBlocksClearedEvent>) {
    keep.clear();
    t.block_hashes = std::move(keep);
  }
  return t;
}

class Decoder {
 public:
  Decoder(std::span<const uint8_t> payload, const KvEventDecodeOptions& options,
          EngineEventBatch& batch)
      : r_(payload, options.max_depth), batch_(batch) {}

  absl::Status Run() {
    MsgpackValue root;
    if (!r_.Read(&root, 0)) return Structural();
    absl::Status s;
    if (root.type == MsgpackType::kArray) {
      s = ArrayBatch(root.u);
    } else if (root.type == MsgpackType::kMap) {
      s = MapBatch(root.u);
    } else {
      return WrongType({}, "a batch (array or map)", root);
    }
    if (!s.ok()) return s;
    if (r_.remaining() != 0) return Structural();
    batch_.events.resize(used_);
    return absl::OkStatus();
  }

 private:
  // The reader stopped (truncated, invalid byte, too deep): the caller asks
  // MsgpackStructureError for the message; this one is the fallback.
  absl::Status Structural() const {
    return absl::InvalidArgumentError(absl::StrCat("payload: ", r_.ErrorMessage()));
  }

  // Reads one value inside `depth` containers.
  absl::Status Next(MsgpackValue* v, uint32_t depth) {
    return r_.Read(v, depth) ? absl::OkStatus() : Structural();
  }
  absl::Status SkipValues(uint64_t n, uint32_t depth) {
    return r_.Skip(n, depth) ? absl::OkStatus() : Structural();
  }

  absl::Status ReadHash(const MsgpackValue& v, const Where& where, uint64_t* out) {
    switch (v.type) {
      case MsgpackType::kUint:
      case MsgpackType::kInt:
        *out = v.u;
        return absl::OkStatus();
      case MsgpackType::kBin:
        if (v.size == 0) return Invalid(where, "empty byte-string hash");
        *out = HashFromBytes(v.bytes());
        return absl::OkStatus();
      default:
        return WrongType(where, "an integer or bytes", v);
    }
  }

  // The value of field `where` has been read into `v`; its children, if
  // any, are next.
  absl::Status HashList(const MsgpackValue& v, const Where& where, std::vector<uint64_t>* out) {
    if (v.type != MsgpackType::kArray) return WrongType(where, "an array", v);
    out->resize(v.u);  // Read checked it against the bytes left
    for (uint64_t i = 0; i < v.u; ++i) {
      MsgpackValue h;
      if (absl::Status s = Next(&h, kInEvent + 1); !s.ok()) return s;
      if (absl::Status s = ReadHash(h, where.At(static_cast<int64_t>(i)), &(*out)[i]); !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }

  absl::Status OptionalHash(const MsgpackValue& v, const Where& where,
                            std::optional<uint64_t>* out) {
    if (v.type == MsgpackType::kNil) {
      out->reset();
      return absl::OkStatus();
    }
    uint64_t h = 0;
    if (absl::Status s = ReadHash(v, where, &h); !s.ok()) return s;
    *out = h;
    return absl::OkStatus();
  }

  // An integer or nil (nil leaves `out` empty).
  static absl::Status OptionalInt(const MsgpackValue& v, const Where& where,
                                  std::optional<int64_t>* out) {
    switch (v.type) {
      case MsgpackType::kNil:
        out->reset();
        return absl::OkStatus();
      case MsgpackType::kInt:
        *out = static_cast<int64_t>(v.u);
        return absl::OkStatus();
      case MsgpackType::kUint:
        if (v.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          return Invalid(where, "integer out of range");
        }
        *out = static_cast<int64_t>(v.u);
        return absl::OkStatus();
      default:
        return WrongType(where, "an integer or nil", v);
    }
  }

  static absl::Status Medium(const MsgpackValue& v, const Where& where, KvMedium* medium,
                             std::string* name) {
    if (v.type == MsgpackType::kNil) {
      *medium = KvMedium::kUnspecified;
      return absl::OkStatus();
    }
    if (v.type != MsgpackType::kStr) return WrongType(where, "a string or nil", v);
    *medium = ParseKvMedium(v.str());
    if (*medium == KvMedium::kOther) name->assign(v.str());
    return absl::OkStatus();
  }

  static absl::Status BlockSize(const MsgpackValue& v, const Where& where, uint32_t* out) {
    if (v.type != MsgpackType::kUint) {
      if (v.type == MsgpackType::kInt) return Invalid(where, "negative block size");
      return WrongType(where, "a non-negative integer", v);
    }
    if (v.u > kMaxBlockSize) {
      return Invalid(where, absl::StrCat("block size ", v.u, " above ", kMaxBlockSize));
    }
    *out = static_cast<uint32_t>(v.u);
    return absl::OkStatus();
  }

  // Reads the value of field `key` of a BlockStored or BlockRemoved
  // (unknown keys: skipped).
  template <typename E>
  absl::Status Field(std::string_view key, int64_t event, E& e, uint32_t* seen) {
    constexpr bool kStored = std::is_same_v<E, BlockStoredEvent>;
    const Where where{event, key};
    MsgpackValue v;
    if (absl::Status s = Next(&v, kInEvent); !s.ok()) return s;
    absl::Status s;
    if (key == "block_hashes") {
      *seen |= kSawHashes;
      return HashList(v, where, &e.block_hashes);  // reads the elements
    } else if (key == "medium") {
      s = Medium(v, where, &e.medium, &e.medium_name);
    } else if (key == "group_idx") {
      s = OptionalInt(v, where, &e.group_idx);
    } else if constexpr (kStored) {
      if (key == "parent_block_hash") {
        s = OptionalHash(v, where, &e.parent_block_hash);
      } else if (key == "token_ids") {
        // Only the count matters; token values are skipped unread.
        *seen |= kSawTokens;
        if (v.type != MsgpackType::kArray) return WrongType(where, "an array", v);
        e.num_token_ids = static_cast<uint32_t>(v.u);
      } else if (key == "block_size") {
        *seen |= kSawBlockSize;
        s = BlockSize(v, where, &e.block_size);
      } else if (key == "lora_id") {
        s = OptionalInt(v, where, &e.lora_id);
      }
    }
    if (!s.ok() || !v.is_container()) return s;
    return SkipValues(v.children(), kInEvent + 1);
  }

  static void FinishStored(BlockStoredEvent& e) {
    if (e.block_size > 0) {
      e.tokens_per_block = e.block_size;
    } else if (!e.block_hashes.empty()) {
      e.tokens_per_block = static_cast<uint32_t>(e.num_token_ids / e.block_hashes.size());
    }
  }

  static absl::Status CheckStoredRequired(uint32_t seen, int64_t event) {
    if (!(seen & kSawHashes)) return Missing({event, "block_hashes"});
    if (!(seen & kSawTokens)) return Missing({event, "token_ids"});
    if (!(seen & kSawBlockSize)) return Missing({event, "block_size"});
    return absl::OkStatus();
  }

  // ["BlockStored", block_hashes, parent, token_ids, block_size, lora_id?, medium?, ...]
  absl::Status ArrayEvent(uint64_t n, int64_t i) {
    const Where here{i, ""};
    if (n == 0) return Invalid(here, "empty array (no tag)");
    MsgpackValue tag;
    if (absl::Status s = Next(&tag, kInEvent); !s.ok()) return s;
    if (tag.type != MsgpackType::kStr) return WrongType({i, "tag"}, "a string", tag);
    uint64_t read = 1;
    switch (TagOf(tag.str())) {
      case Tag::kStored: {
        // block_hashes, parent_block_hash, token_ids, block_size are
        // required; lora_id and medium were added later.
        if (n < 5) {
          return Invalid(
              here, absl::StrCat("BlockStored array has ", n - 1, " fields, needs at least 4"));
        }
        BlockStoredEvent& e = NextEvent<BlockStoredEvent>(batch_.events, used_);
        uint32_t seen = 0;
        for (; read - 1 < std::size(kStoredFields) && read < n; ++read) {
          if (absl::Status s = Field(kStoredFields[read - 1], i, e, &seen); !s.ok()) {
            return s;
          }
        }
        FinishStored(e);
        break;
      }
      case Tag::kRemoved: {
        if (n < 2) return Missing({i, "block_hashes"});
        BlockRemovedEvent& e = NextEvent<BlockRemovedEvent>(batch_.events, used_);
        uint32_t seen = 0;
        for (; read - 1 < std::size(kRemovedFields) && read < n; ++read) {
          if (absl::Status s = Field(kRemovedFields[read - 1], i, e, &seen); !s.ok()) {
            return s;
          }
        }
        break;
      }
      case Tag::kCleared:
        NextEvent<AllBlocksClearedEvent>(batch_.events, used_);
        break;
      case Tag::kUnknown:
        ++batch_.unknown_events;
        break;
    }
    return SkipValues(n - read, kInEvent);  // fields appended by newer versions
  }

  // Reads the fields of a map event whose tag is known, from the first pair
  // on, in key order; a "type" key among them is skipped like an unknown one
  // and reported in `saw_type`.
  absl::Status MapEventFields(Tag tag, uint64_t pairs, int64_t i, bool* saw_type) {
    BlockStoredEvent* stored = nullptr;
    BlockRemovedEvent* removed = nullptr;
    if (tag == Tag::kStored) stored = &NextEvent<BlockStoredEvent>(batch_.events, used_);
    if (tag == Tag::kRemoved) removed = &NextEvent<BlockRemovedEvent>(batch_.events, used_);
    if (tag == Tag::kCleared) NextEvent<AllBlocksClearedEvent>(batch_.events, used_);
    if (tag == Tag::kUnknown) ++batch_.unknown_events;
    uint32_t seen = 0;
    for (uint64_t k = 0; k < pairs; ++k) {
      MsgpackValue key;
      if (absl::Status s = Next(&key, kInEvent); !s.ok()) return s;
      absl::Status s;
      if (key.type != MsgpackType::kStr) {
        s = SkipKeyRest(key);
      } else if (stored != nullptr) {
        s = Field(key.str(), i, *stored, &seen);
      } else if (removed != nullptr) {
        s = Field(key.str(), i, *removed, &seen);
      } else {
        s = SkipValues(1, kInEvent);
      }
      if (!s.ok()) return s;
      if (key.type == MsgpackType::kStr && key.str() == "type") *saw_type = true;
    }
    if (stored != nullptr) {
      if (absl::Status s = CheckStoredRequired(seen, i); !s.ok()) return s;
      FinishStored(*stored);
    }
    if (removed != nullptr && !(seen & kSawHashes)) return Missing({i, "block_hashes"});
    return absl::OkStatus();
  }

  // A non-string key was read: skips its children, if any, and its value.
  absl::Status SkipKeyRest(const MsgpackValue& key) {
    if (key.is_container()) {
      if (absl::Status s = SkipValues(key.children(), kInEvent + 1); !s.ok()) return s;
    }
    return SkipValues(1, kInEvent);
  }

  // {"type": "BlockStored", ...}. Fast: "type" is the first key (msgspec
  // writes the tag first) and comes once. Otherwise, or on any error, the
  // event is read again: the last "type" key decides, then the fields in key
  // order, as the old decoder did.
  absl::Status MapEvent(uint64_t pairs, int64_t i) {
    const size_t start = r_.offset();
    const size_t used = used_;
    const uint32_t unknown = batch_.unknown_events;
    if (pairs > 0) {
      MsgpackValue key, tag;
      if (!r_.Read(&key, kInEvent)) return Structural();
      if (key.type == MsgpackType::kStr && key.str() == "type") {
        if (!r_.Read(&tag, kInEvent)) return Structural();
        bool second_type = false;
        if (tag.type == MsgpackType::kStr &&
            MapEventFields(TagOf(tag.str()), pairs - 1, i, &second_type).ok() && !second_type) {
          return absl::OkStatus();
        }
      }
    }
    r_.Seek(start);
    used_ = used;
    batch_.unknown_events = unknown;
    return MapEventSlow(pairs, i);
  }

  absl::Status MapEventSlow(uint64_t pairs, int64_t i) {
    const size_t start = r_.offset();
    std::optional<size_t> tag_at;
    for (uint64_t k = 0; k < pairs; ++k) {
      MsgpackValue key;
      if (absl::Status s = Next(&key, kInEvent); !s.ok()) return s;
      if (key.is_container()) {
        if (absl::Status s = SkipValues(key.children(), kInEvent + 1); !s.ok()) return s;
      }
      if (key.type == MsgpackType::kStr && key.str() == "type") tag_at = r_.offset();
      if (absl::Status s = SkipValues(1, kInEvent); !s.ok()) return s;
    }
    const size_t end = r_.offset();
    if (!tag_at) return Missing({i, "type"});
    r_.Seek(*tag_at);
    MsgpackValue tag;
    if (absl::Status s = Next(&tag, kInEvent); !s.ok()) return s;
    if (tag.type != MsgpackType::kStr) return WrongType({i, "type"}, "a string", tag);
    r_.Seek(start);
    const Tag kind = TagOf(tag.str());
    if (kind == Tag::kCleared || kind == Tag::kUnknown) {
      // Their fields are not read, so nothing in them can be wrong.
      r_.Seek(end);
      if (kind == Tag::kCleared) NextEvent<AllBlocksClearedEvent>(batch_.events, used_);
      if (kind == Tag::kUnknown) ++batch_.unknown_events;
      return absl::OkStatus();
    }
    bool unused = false;
    return MapEventFields(kind, pairs, i, &unused);
  }

  absl::Status Event(int64_t i) {
    MsgpackValue v;
    if (absl::Status s = Next(&v, kInEvents); !s.ok()) return s;
    if (v.type == MsgpackType::kArray) return ArrayEvent(v.u, i);
    if (v.type == MsgpackType::kMap) return MapEvent(v.u, i);
    return WrongType({i, ""}, "an array or a map", v);
  }

  // The events array's header has been read into `v`.
  absl::Status Events(const MsgpackValue& v) {
    if (v.type != MsgpackType::kArray) return WrongType({-1, "events"}, "an array", v);
    batch_.events.reserve(v.u);  // Read checked it against the bytes left
    for (uint64_t i = 0; i < v.u; ++i) {
      if (absl::Status s = Event(static_cast<int64_t>(i)); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  static absl::Status Ts(const MsgpackValue& v, double* ts) {
    switch (v.type) {
      case MsgpackType::kFloat:
        *ts = v.f;
        break;
      case MsgpackType::kUint:
        *ts = static_cast<double>(v.u);
        break;
      case MsgpackType::kInt:
        *ts = static_cast<double>(static_cast<int64_t>(v.u));
        break;
      default:
        return WrongType({-1, "ts"}, "a number", v);
    }
    if (!std::isfinite(*ts)) return Invalid({-1, "ts"}, "not finite");
    return absl::OkStatus();
  }

  // Reads a batch-level value whose children the caller does not want.
  absl::Status BatchScalar(MsgpackValue* v) {
    if (absl::Status s = Next(v, kInBatch); !s.ok()) return s;
    return v->is_container() ? SkipValues(v->children(), kInBatch + 1) : absl::OkStatus();
  }

  // [ts, events, data_parallel_rank?, ...]
  absl::Status ArrayBatch(uint64_t n) {
    if (n < 2) {
      return Invalid({}, absl::StrCat("batch array has ", n, " elements, needs ts and events"));
    }
    MsgpackValue v;
    if (absl::Status s = BatchScalar(&v); !s.ok()) return s;
    if (absl::Status s = Ts(v, &batch_.ts); !s.ok()) return s;
    if (absl::Status s = Next(&v, kInBatch); !s.ok()) return s;
    if (absl::Status s = Events(v); !s.ok()) return s;
    if (n >= 3) {
      if (absl::Status s = BatchScalar(&v); !s.ok()) return s;
      const absl::Status s = OptionalInt(v, {-1, "data_parallel_rank"}, &batch_.data_parallel_rank);
      if (!s.ok()) return s;
    }
    return SkipValues(n < 3 ? 0 : n - 3, kInBatch);
  }

  static bool IsRankKey(std::string_view key) {
    return key == "data_parallel_rank" || key == "attn_dp_rank";
  }

  // {"ts": ..., "events": [...], "data_parallel_rank": ...}. Fast: keys in
  // order, each once. Otherwise, or on any error, read again the slow way.
  absl::Status MapBatch(uint64_t pairs) {
    const size_t start = r_.offset();
    bool ts = false, events = false, once = true;
    absl::Status s;
    for (uint64_t k = 0; k < pairs && s.ok() && once; ++k) {
      MsgpackValue key, v;
      s = Next(&key, kInBatch);
      if (!s.ok()) break;
      if (key.type != MsgpackType::kStr) {
        if (key.is_container()) s = SkipValues(key.children(), kInBatch + 1);
        if (s.ok()) s = SkipValues(1, kInBatch);
        continue;
      }
      const std::string_view name = key.str();
      if (name == "events") {
        once = !events;
        events = true;
        if (once) s = Next(&v, kInBatch);
        if (s.ok() && once) s = Events(v);
      } else if (name == "ts") {
        once = !ts;
        ts = true;
        if (!once) break;
        s = BatchScalar(&v);
        if (s.ok()) s = Ts(v, &batch_.ts);
      } else if (IsRankKey(name)) {
        s = BatchScalar(&v);
        if (s.ok()) s = OptionalInt(v, {-1, name}, &batch_.data_parallel_rank);
      } else {
        s = SkipValues(1, kInBatch);
      }
    }
    if (s.ok() && once && ts && events) return absl::OkStatus();
    r_.Seek(start);
    used_ = 0;
    batch_.ts = 0;
    batch_.unknown_events = 0;
    batch_.data_parallel_rank.reset();
    return MapBatchSlow(pairs);
  }

  // The old decoder's order: rank keys as they come, then ts missing, events
  // missing, the last ts, the last events.
  absl::Status MapBatchSlow(uint64_t pairs) {
    std::optional<size_t> ts_at, events_at;
    for (uint64_t k = 0; k < pairs; ++k) {
      MsgpackValue key;
      if (absl::Status s = Next(&key, kInBatch); !s.ok()) return s;
      if (key.is_container()) {
        if (absl::Status s = SkipValues(key.children(), kInBatch + 1); !s.ok()) return s;
      }
      const std::string_view name = key.type == MsgpackType::kStr ? key.str() : "";
      if (name == "ts") ts_at = r_.offset();
      if (name == "events") events_at = r_.offset();
      if (key.type == MsgpackType::kStr && IsRankKey(name)) {
        MsgpackValue v;
        if (absl::Status s = BatchScalar(&v); !s.ok()) return s;
        if (absl::Status s = OptionalInt(v, {-1, name}, &batch_.data_parallel_rank); !s.ok()) {
          return s;
        }
      } else if (absl::Status s = SkipValues(1, kInBatch); !s.ok()) {
        return s;
      }
    }
    const size_t end = r_.offset();
    if (!ts_at) return Missing({-1, "ts"});
    if (!events_at) return Missing({-1, "events"});
    MsgpackValue v;
    r_.Seek(*ts_at);
    if (absl::Status s = BatchScalar(&v); !s.ok()) return s;
    if (absl::Status s = Ts(v, &batch_.ts); !s.ok()) return s;
    r_.Seek(*events_at);
    if (absl::Status s = Next(&v, kInBatch); !s.ok()) return s;
    if (absl::Status s = Events(v); !s.ok()) return s;
    r_.Seek(end);
    return absl::OkStatus();
  }

  MsgpackReader r_;
  EngineEventBatch& batch_;
  size_t used_ = 0;  // events of batch_.events filled so far
};

}  // namespace

absl::Status DecodeKvEventBatch(std::span<const uint8_t> payload,
                                const KvEventDecodeOptions& options, EngineEventBatch* batch) {
  if (payload.empty()) return absl::InvalidArgumentError("payload: empty");
  if (payload.size() > options.max_payload_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "payload: ", payload.size(), " bytes, above the limit of ", options.max_payload_bytes));
  }
  batch->ts = 0;
  batch->data_parallel_rank.reset();
  batch->unknown_events = 0;
  batch->engine_restarted = false;
  absl::Status s = Decoder(payload, options, *batch).Run();
  if (s.ok()) return s;
  batch->events.clear();
  // A structural problem anywhere wins, as it did when the whole document
  // was parsed before any field was read.
  if (std::string structural = MsgpackStructureError(payload, options.max_depth);
      !structural.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("payload: ", structural));
  }
  return s;
}

absl::StatusOr<EngineEventBatch> DecodeKvEventBatch(std::span<const uint8_t> payload,
                                                    const KvEventDecodeOptions& options) {
  EngineEventBatch batch;
  if (absl::Status s = DecodeKvEventBatch(payload, options, &batch); !s.ok()) return s;
  return batch;
}

}  // namespace kvlearn
