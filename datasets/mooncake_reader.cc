// Trace JSONL reader and writer (Mooncake's and Bailian's shapes).
//
// Reading: a file is read whole into one simdjson::padded_string; lines are found
// with memchr and each is parsed by the ondemand parser in place (a line is a
// padded_string_view into the buffer: the bytes after it, and the buffer's own
// padding, satisfy simdjson's read-past-the-end requirement). In-memory input is
// parsed in place the same way, without a copy, except for its last few bytes. Fields are taken in
// one pass over the object, in whatever order they appear. The fast path only
// checks error codes; messages are built only once something is wrong.

#include "datasets/mooncake_reader.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "simdjson.h"

namespace kvlearn {
namespace {

namespace ondemand = simdjson::ondemand;

// What is wrong with one line; turned into "<source>:<line>: field '<field>': <what>".
struct LineError {
  const char* field;  // always a literal
  std::string what;
};

LineError Malformed(std::string what) { return {"json", std::move(what)}; }

LineError Malformed(simdjson::error_code code) {
  return Malformed(absl::StrCat("malformed JSON (", simdjson::error_message(code), ")"));
}

const char* TypeName(ondemand::json_type type) {
  switch (type) {
    case ondemand::json_type::array:
      return "an array";
    case ondemand::json_type::object:
      return "an object";
    case ondemand::json_type::number:
      return "a number";
    case ondemand::json_type::string:
      return "a string";
    case ondemand::json_type::boolean:
      return "a boolean";
    case ondemand::json_type::null:
      return "null";
  }
  return "an unknown value";
}

// Explains why `value` was refused as an integer. Only called on the error path:
// a failed get_int64/get_uint64 leaves the value unconsumed, so it can be looked
// at again here.
LineError ExplainNotInteger(ondemand::value& value, const char* field, const std::string& element) {
  ondemand::json_type type;
  if (auto error = value.type().get(type)) return Malformed(error);
  if (type != ondemand::json_type::number) {
    return {field, absl::StrCat(element, "expected an integer, got ", TypeName(type))};
  }
  std::string_view token = value.raw_json_token();
  while (!token.empty() && (token.back() == ' ' || token.back() == '\t' || token.back() == '\r')) {
    token.remove_suffix(1);
  }
  ondemand::number number;
  if (value.get_number().get(number)) {
    return {field, absl::StrCat(element, "not a valid 64-bit integer: ", std::string(token))};
  }
  switch (number.get_number_type()) {
    case ondemand::number_type::floating_point_number:
      return {field, absl::StrCat(element, "expected an integer, got ", std::string(token))};
    case ondemand::number_type::signed_integer:
      if (number.get_int64() < 0) {
        return {field, absl::StrCat(element, "must be >= 0, got ", std::string(token))};
      }
      break;
    case ondemand::number_type::unsigned_integer:
      break;
  }
  return {field, absl::StrCat(element, "out of range: ", std::string(token))};
}

// Reads a non-negative integer no larger than `max` (the type's range).
std::optional<LineError> ReadCount(ondemand::value& value, const char* field, int64_t max,
                                   int64_t& out) {
  if (value.get_int64().get(out)) return ExplainNotInteger(value, field, "");
  if (out < 0) return LineError{field, absl::StrCat("must be >= 0, got ", out)};
  if (out > max) return LineError{field, absl::StrCat("must be <= ", max, ", got ", out)};
  return std::nullopt;
}

// A line of comma-separated values not starting as JSON does: likely a CSV
// file given as a trace, which deserves a hint rather than a JSON type error.
bool LooksLikeCsv(std::string_view line) {
  const size_t first = line.find_first_not_of(" \t");
  return first != std::string_view::npos && line[first] != '{' && line[first] != '[' &&
         line.find(',') != std::string_view::npos;
}

// `error`, or for a line that looks like CSV, what kvlearn reads instead.
LineError NotAnObject(std::string_view line, LineError error) {
  if (!LooksLikeCsv(line)) return error;
  return Malformed(
      "this looks like CSV (comma-separated values, not a JSON object); traces are Mooncake JSONL "
      "or "
      "Bailian JSONL, one object per line with timestamp, input_length, output_length and "
      "hash_ids (docs/results.md; kvlearn gen writes both)");
}

// Parses lines one at a time into a Trace; keeps the parser and scratch space
// between lines so the steady state allocates nothing.
class LineParser {
 public:
  LineParser(Trace& trace, uint32_t block_size, TraceFormat format)
      : trace_(trace), block_size_(block_size), bailian_(format == TraceFormat::kBailian) {}

  // Parses `line` (1-based number `line_no`). On success appends the request to
  // the trace and returns nullopt; on failure leaves the trace unchanged.
  std::optional<LineError> Parse(simdjson::padded_string_view line, uint32_t line_no) {
    const size_t first_block = trace_.hash_ids.size();
    std::optional<LineError> error = ParseFields(line);
    if (!error) error = CheckRequest(first_block);
    if (error) {
      trace_.hash_ids.resize(first_block);
      return error;
    }
    TraceRequest r;
    r.timestamp_ms = timestamp_;
    r.input_length = static_cast<uint32_t>(input_length_);
    r.output_length = static_cast<uint32_t>(output_length_);
    r.first_block = static_cast<uint32_t>(first_block);
    r.num_blocks = static_cast<uint32_t>(trace_.hash_ids.size() - first_block);
    r.line = line_no;
    r.type = type_;
    r.turn = turn_;
    r.chat_id = chat_id_;
    r.parent_chat_id = parent_chat_id_;
    trace_.requests.push_back(r);
    last_timestamp_ = timestamp_;
    return std::nullopt;
  }

 private:
  enum Field : unsigned {
    kTimestamp = 1,
    kInputLength = 2,
    kOutputLength = 4,
    kHashIds = 8,
    kChatId = 16,
    kParentChatId = 32,
    kType = 64,
    kTurn = 128,
  };

  std::optional<LineError> ParseFields(simdjson::padded_string_view line) {
    ondemand::document doc;
    if (auto error = parser_.iterate(line).get(doc)) return NotAnObject(line, Malformed(error));
    ondemand::object object;
    if (auto error = doc.get_object().get(object)) {
      if (LooksLikeCsv(line)) return NotAnObject(line, Malformed(error));
      ondemand::json_type type;
      if (error == simdjson::INCORRECT_TYPE && !doc.type().get(type)) {
        return Malformed(absl::StrCat("expected an object, got ", TypeName(type)));
      }
      return Malformed(error);
    }
    seen_ = 0;
    type_ = RequestType::kUnknown;
    turn_ = 0;
    chat_id_ = parent_chat_id_ = -1;
    for (auto field_or : object) {
      ondemand::field field;
      if (auto error = std::move(field_or).get(field)) return Malformed(error);
      const ondemand::raw_json_string key = field.key();
      ondemand::value value = field.value();
      // Keys are compared raw (unescaped bytes followed by the closing quote);
      // reading a few bytes past a short key is safe inside the padded buffer.
      std::optional<LineError> error;
      if (key.unsafe_is_equal("hash_ids")) {
        error = Seen(kHashIds, "hash_ids");
        if (!error) error = ParseHashIds(value);
      } else if (key.unsafe_is_equal("timestamp")) {
        error = Seen(kTimestamp, "timestamp");
        if (!error) {
          error = bailian_ ? ReadSeconds(value, timestamp_)
                           : ReadCount(value, "timestamp", std::numeric_limits<int64_t>::max(),
                                       timestamp_);
        }
      } else if (key.unsafe_is_equal("input_length")) {
        error = Seen(kInputLength, "input_length");
        if (!error) {
          error =
              ReadCount(value, "input_length", std::numeric_limits<uint32_t>::max(), input_length_);
        }
      } else if (key.unsafe_is_equal("output_length")) {
        error = Seen(kOutputLength, "output_length");
        if (!error) {
          error = ReadCount(value, "output_length", std::numeric_limits<uint32_t>::max(),
                            output_length_);
        }
      } else if (bailian_) {
        error = ParseBailianField(key, value);
      }
      // Other keys are ignored (ondemand skips them without validating them).
      if (error) return error;
    }
    // The object must be the whole line: ondemand stops at its closing brace.
    const char* rest;
    if (!doc.current_location().get(rest)) {
      return Malformed("unexpected content after the object");
    }
    return std::nullopt;
  }

  // Bailian's timestamp: seconds as a float (or an integer), kept in ms.
  std::optional<LineError> ReadSeconds(ondemand::value& value, int64_t& out_ms) {
    double seconds;
    if (value.get_double().get(seconds)) {
      ondemand::json_type type;
      if (auto error = value.type().get(type)) return Malformed(error);
      return LineError{"timestamp",
                       absl::StrCat("expected seconds as a number, got ", TypeName(type))};
    }
    // 9.2e15 s would overflow the milliseconds.
    if (!(seconds >= 0) || seconds > 9.2e15) {
      return LineError{"timestamp", absl::StrCat("must be seconds >= 0, got ", seconds)};
    }
    out_ms = std::llround(seconds * 1000);
    return std::nullopt;
  }

  // The fields only Bailian lines carry; each is optional.
  std::optional<LineError> ParseBailianField(ondemand::raw_json_string key,
                                             ondemand::value& value) {
    if (key.unsafe_is_equal("chat_id")) {
      if (auto error = Seen(kChatId, "chat_id")) return error;
      return ReadId(value, "chat_id", chat_id_);
    }
    if (key.unsafe_is_equal("parent_chat_id")) {
      if (auto error = Seen(kParentChatId, "parent_chat_id")) return error;
      return ReadId(value, "parent_chat_id", parent_chat_id_);
    }
    if (key.unsafe_is_equal("turn")) {
      if (auto error = Seen(kTurn, "turn")) return error;
      int64_t turn;
      if (auto error = ReadCount(value, "turn", std::numeric_limits<int64_t>::max(), turn)) {
        return error;
      }
      turn_ = static_cast<uint16_t>(std::min<int64_t>(turn, UINT16_MAX));  // saturates
      return std::nullopt;
    }
    if (key.unsafe_is_equal("type")) {
      if (auto error = Seen(kType, "type")) return error;
      std::string_view name;
      if (value.get_string().get(name)) {
        ondemand::json_type type;
        if (auto error = value.type().get(type)) return Malformed(error);
        return LineError{"type", absl::StrCat("expected a string, got ", TypeName(type))};
      }
      type_ = RequestTypeFromName(name);
      return std::nullopt;
    }
    return std::nullopt;
  }

  // A conversation id: an integer, -1 meaning none.
  static std::optional<LineError> ReadId(ondemand::value& value, const char* field, int64_t& out) {
    if (value.get_int64().get(out)) return ExplainNotInteger(value, field, "");
    if (out < -1) return LineError{field, absl::StrCat("must be >= -1, got ", out)};
    return std::nullopt;
  }

  std::optional<LineError> Seen(Field field, const char* name) {
    if (seen_ & field) return LineError{name, "appears more than once"};
    seen_ |= field;
    return std::nullopt;
  }

  std::optional<LineError> ParseHashIds(ondemand::value& value) {
    ondemand::array array;
    if (value.get_array().get(array)) {
      ondemand::json_type type;
      if (auto error = value.type().get(type)) return Malformed(error);
      return LineError{"hash_ids", absl::StrCat("expected an array, got ", TypeName(type))};
    }
    size_t index = 0;
    for (auto element_or : array) {
      ondemand::value element;
      if (auto error = std::move(element_or).get(element)) return Malformed(error);
      uint64_t id;
      if (element.get_uint64().get(id)) {
        return ExplainNotInteger(element, "hash_ids", absl::StrCat("element ", index, ": "));
      }
      trace_.hash_ids.push_back(id);
      ++index;
    }
    return std::nullopt;
  }

  // Checks that need the whole line: presence, lengths against ids, order.
  std::optional<LineError> CheckRequest(size_t first_block) {
    if (!(seen_ & kTimestamp)) return LineError{"timestamp", "missing"};
    if (!(seen_ & kInputLength)) return LineError{"input_length", "missing"};
    if (!(seen_ & kOutputLength)) return LineError{"output_length", "missing"};
    if (!(seen_ & kHashIds)) return LineError{"hash_ids", "missing"};
    if (input_length_ == 0) return LineError{"input_length", "must be > 0, got 0"};
    const std::span<const uint64_t> ids(trace_.hash_ids.data() + first_block,
                                        trace_.hash_ids.size() - first_block);
    if (ids.empty()) return LineError{"hash_ids", "is empty"};
    // 64-bit: BlocksForTokens would overflow for lengths near 2^32.
    const uint64_t expected =
        (static_cast<uint64_t>(input_length_) + block_size_ - 1) / block_size_;
    if (ids.size() != expected) {
      return LineError{"hash_ids",
                       absl::StrCat("expected ", expected, " ids (input_length ", input_length_,
                                    " at block_size ", block_size_, "), got ", ids.size())};
    }
    if (trace_.hash_ids.size() > std::numeric_limits<uint32_t>::max()) {
      return LineError{"hash_ids", "trace holds more than 2^32 block ids in total"};
    }
    if (auto error = CheckNoRepeats(ids)) return error;
    if (timestamp_ < last_timestamp_) {
      return LineError{"timestamp",
                       absl::StrCat("goes backwards from ", last_timestamp_, " to ", timestamp_)};
    }
    return std::nullopt;
  }

  // A chain cannot contain the same prefix twice. Sorting a copy is cheaper than
  // a hash set for chains of a few dozen ids.
  std::optional<LineError> CheckNoRepeats(std::span<const uint64_t> ids) {
    sorted_.assign(ids.begin(), ids.end());
    std::sort(sorted_.begin(), sorted_.end());
    const auto repeat = std::adjacent_find(sorted_.begin(), sorted_.end());
    if (repeat == sorted_.end()) return std::nullopt;
    const size_t first = std::find(ids.begin(), ids.end(), *repeat) - ids.begin();
    const size_t second = std::find(ids.begin() + first + 1, ids.end(), *repeat) - ids.begin();
    return LineError{"hash_ids", absl::StrCat("id ", *repeat, " repeats (elements ", first, " and ",
                                              second, ")")};
  }

  Trace& trace_;
  const uint32_t block_size_;
  const bool bailian_;
  ondemand::parser parser_;
  std::vector<uint64_t> sorted_;
  unsigned seen_ = 0;
  int64_t timestamp_ = 0;
  int64_t input_length_ = 0;
  int64_t output_length_ = 0;
  int64_t last_timestamp_ = std::numeric_limits<int64_t>::min();
  RequestType type_ = RequestType::kUnknown;
  uint16_t turn_ = 0;
  int64_t chat_id_ = -1;
  int64_t parent_chat_id_ = -1;
};

bool IsBlank(std::string_view line) {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

// Drops spare capacity only when it is large: on big traces the reserve above
// is mostly untouched (never paged in), while shrinking copies everything.
template <typename T>
void ShrinkIfWasteful(std::vector<T>& v) {
  if (v.capacity() > 2 * v.size() + 1024) v.shrink_to_fit();
}

// Parses `buffer`, of which the `padding` bytes after its end are readable too.
// Lines are parsed in place when enough bytes follow them to satisfy simdjson
// (the following lines count); only a line near the end of an unpadded buffer is
// copied into a padded scratch string first.
absl::StatusOr<Trace> ParseBuffer(std::string_view buffer, size_t padding, std::string_view source,
                                  const TraceReadOptions& options) {
  const TraceFormat format =
      options.format == TraceFormat::kAuto ? DetectTraceFormat(buffer) : options.format;
  const uint32_t block_size =
      options.block_size == 0 ? DefaultBlockSize(format) : options.block_size;
  Trace trace;
  trace.source = std::string(source);
  trace.block_size = block_size;
  // Lines are a few hundred bytes with ids of a few digits; reserving avoids
  // regrowing (and re-copying) large vectors.
  trace.requests.reserve(buffer.size() / 160 + 1);
  trace.hash_ids.reserve(buffer.size() / 8 + 1);
  LineParser parser(trace, block_size, format);
  simdjson::padded_string scratch;

  const char* const begin = buffer.data();
  const char* const end = begin + buffer.size();
  uint32_t line_no = 0;
  for (const char* line = begin; line < end;) {
    const char* newline = static_cast<const char*>(std::memchr(line, '\n', end - line));
    const char* line_end = newline ? newline : end;
    ++line_no;
    const std::string_view text(line, line_end - line);
    if (!text.empty() && (text[0] == '{' || !IsBlank(text))) {
      const size_t readable = (end - line) + padding;
      simdjson::padded_string_view view(line, text.size(), readable);
      if (readable < text.size() + simdjson::SIMDJSON_PADDING) {
        scratch = simdjson::padded_string(text);
        view = simdjson::padded_string_view(scratch.data(), scratch.size(),
                                            scratch.size() + simdjson::SIMDJSON_PADDING);
      }
      if (std::optional<LineError> error = parser.Parse(view, line_no)) {
        if (!options.lenient) {
          return absl::InvalidArgumentError(absl::StrCat(
              std::string(source), ":", line_no, ": field '", error->field, "': ", error->what));
        }
        ++trace.skipped_lines;
      }
    }
    line = line_end + 1;
  }
  ShrinkIfWasteful(trace.requests);
  ShrinkIfWasteful(trace.hash_ids);
  return trace;
}

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<FILE, FileCloser>;

// Reads all of `path` into a padded buffer (one read for regular files).
absl::StatusOr<simdjson::padded_string> LoadPadded(const std::string& path) {
  File file(std::fopen(path.c_str(), "rb"));
  if (!file) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  struct stat info;
  if (fstat(fileno(file.get()), &info) == 0 && S_ISREG(info.st_mode)) {
    simdjson::padded_string buffer(static_cast<size_t>(info.st_size));
    const size_t got = std::fread(buffer.data(), 1, buffer.size(), file.get());
    if (got != buffer.size() || std::ferror(file.get())) {
      return absl::DataLossError(absl::StrCat("cannot read ", path, ": short read"));
    }
    return buffer;
  }
  // Pipes and other streams: size unknown, read in chunks.
  std::string contents;
  char chunk[1 << 16];
  size_t got;
  while ((got = std::fread(chunk, 1, sizeof chunk, file.get())) > 0) contents.append(chunk, got);
  if (std::ferror(file.get())) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", path));
  }
  return simdjson::padded_string(contents);
}

void AppendNumber(std::string& out, auto value) {
  char digits[24];
  const auto [end, ec] = std::to_chars(digits, digits + sizeof digits, value);
  out.append(digits, end);
}

// Milliseconds as seconds with three decimals, exactly ("12.345").
void AppendSeconds(std::string& out, int64_t ms) {
  AppendNumber(out, ms / 1000);
  out += '.';
  const int64_t frac = ms % 1000;
  if (frac < 100) out += '0';
  if (frac < 10) out += '0';
  AppendNumber(out, frac);
}

}  // namespace

const char* TraceFormatName(TraceFormat format) {
  switch (format) {
    case TraceFormat::kAuto:
      return "auto";
    case TraceFormat::kMooncake:
      return "mooncake";
    case TraceFormat::kBailian:
      return "bailian";
  }
  return "auto";
}

std::optional<TraceFormat> TraceFormatFromName(std::string_view name) {
  for (TraceFormat f : {TraceFormat::kAuto, TraceFormat::kMooncake, TraceFormat::kBailian}) {
    if (name == TraceFormatName(f)) return f;
  }
  return std::nullopt;
}

uint32_t DefaultBlockSize(TraceFormat format) { return format == TraceFormat::kBailian ? 16 : 512; }

TraceFormat DetectTraceFormat(std::string_view jsonl) {
  while (!jsonl.empty()) {
    const size_t newline = jsonl.find('\n');
    const std::string_view line = jsonl.substr(0, newline);
    if (!IsBlank(line)) {
      // A key, not a value: a Mooncake line has no string values.
      return line.find("\"chat_id\"") != std::string_view::npos ? TraceFormat::kBailian
                                                                : TraceFormat::kMooncake;
    }
    if (newline == std::string_view::npos) break;
    jsonl.remove_prefix(newline + 1);
  }
  return TraceFormat::kMooncake;
}

absl::StatusOr<TraceFormat> PeekTraceFormat(const std::string& path) {
  File file(std::fopen(path.c_str(), "rb"));
  if (!file) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  struct stat info;
  if (fstat(fileno(file.get()), &info) != 0 || !S_ISREG(info.st_mode)) return TraceFormat::kAuto;
  // Reads until a line that is not blank is whole: the key that tells the
  // formats apart comes first in Bailian's lines, but a line may be long.
  std::string head;
  char chunk[1 << 16];
  size_t got;
  while ((got = std::fread(chunk, 1, sizeof chunk, file.get())) > 0) {
    head.append(chunk, got);
    const size_t content = head.find_first_not_of(" \t\r\n");
    if (content != std::string::npos && head.find('\n', content) != std::string::npos) break;
  }
  if (std::ferror(file.get()))
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", path));
  return DetectTraceFormat(head);
}

absl::StatusOr<Trace> ReadTrace(const std::string& path, const TraceReadOptions& options) {
  absl::StatusOr<simdjson::padded_string> buffer = LoadPadded(path);
  if (!buffer.ok()) return buffer.status();
  return ParseBuffer(std::string_view(buffer->data(), buffer->size()), simdjson::SIMDJSON_PADDING,
                     path, options);
}

absl::StatusOr<Trace> ParseTrace(std::string_view jsonl, std::string_view source,
                                 const TraceReadOptions& options) {
  return ParseBuffer(jsonl, 0, source, options);
}

absl::Status WriteTrace(const Trace& trace, const std::string& path, TraceFormat format) {
  File file(std::fopen(path.c_str(), "wb"));
  if (!file) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path, " for writing"));
  constexpr size_t kFlushAt = 1 << 20;
  std::string out;
  out.reserve(kFlushAt + 4096);
  auto flush = [&]() -> bool {
    const bool ok = std::fwrite(out.data(), 1, out.size(), file.get()) == out.size();
    out.clear();
    return ok;
  };
  const bool bailian = format == TraceFormat::kBailian;
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    const TraceRequest& r = trace.requests[i];
    // Same key order and spacing as the formats' own files.
    if (bailian) {
      out += "{\"chat_id\": ";
      AppendNumber(out, r.chat_id >= 0 ? r.chat_id : static_cast<int64_t>(i));
      out += ", \"parent_chat_id\": ";
      AppendNumber(out, r.parent_chat_id);
      out += ", \"timestamp\": ";
      AppendSeconds(out, r.timestamp_ms);
    } else {
      out += "{\"timestamp\": ";
      AppendNumber(out, r.timestamp_ms);
    }
    out += ", \"input_length\": ";
    AppendNumber(out, r.input_length);
    out += ", \"output_length\": ";
    AppendNumber(out, r.output_length);
    if (bailian) {
      out += ", \"type\": \"";
      out += r.type == RequestType::kUnknown ? "text" : RequestTypeName(r.type);
      out += "\", \"turn\": ";
      AppendNumber(out, r.turn == 0 ? 1 : r.turn);
    }
    out += ", \"hash_ids\": [";
    const std::span<const uint64_t> ids = trace.BlocksOf(r);
    for (size_t j = 0; j < ids.size(); ++j) {
      if (j > 0) out += ", ";
      AppendNumber(out, ids[j]);
    }
    out += "]}\n";
    if (out.size() >= kFlushAt && !flush()) {
      return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", path));
    }
  }
  if (!flush()) return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", path));
  if (std::fclose(file.release()) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

}  // namespace kvlearn
