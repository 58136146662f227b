#include "models/model_metadata_json.h"

#include <simdjson.h>

#include <cmath>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "features/feature_schema.h"

namespace kvlearn {

std::string ModelMetadataJson(const ModelMetadata& m) {
  const auto floats = [](const auto& v) {
    return absl::StrJoin(
        v, ", ", [](std::string* out, double x) { out->append(absl::StrFormat("%.9g", x)); });
  };
  const auto escaped = [](std::string_view text) {
    std::string out;
    for (char c : text) {
      if (c == '"' || c == '\\') out += '\\';
      if (static_cast<unsigned char>(c) >= 0x20) out += c;
    }
    return out;
  };
  // This build's names unless the metadata says otherwise (tests write others).
  std::vector<std::string> names;
  if (m.feature_names.empty()) {
    for (const auto n : kFeatureNames) names.push_back(absl::StrCat("\"", escaped(n), "\""));
  } else {
    for (const auto& n : m.feature_names) names.push_back(absl::StrCat("\"", escaped(n), "\""));
  }
  const std::string created_by = escaped(m.created_by);
  return absl::StrCat("{\"schema_version\": ", m.schema_version, ",\n \"label\": \"",
                      "P(next use of the block within horizons_seconds[k]) per output k",
                      "\",\n \"horizons_seconds\": [", floats(m.horizons_seconds),
                      "],\n \"feature_names\": [", absl::StrJoin(names, ", "),
                      "],\n \"feature_mean\": [", floats(m.feature_mean), "],\n \"feature_std\": [",
                      floats(m.feature_std), "],\n \"trace_fingerprint\": \"", m.trace_fingerprint,
                      "\",\n \"created_by\": \"", created_by, "\"}\n");
}

absl::StatusOr<ModelMetadata> ParseModelMetadata(std::string_view json, const std::string& path) {
  const auto bad = [&](std::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", kMetadataFile, ": ", std::string(what)));
  };
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(json.data(), json.size()).get(doc)) return bad("not valid JSON");
  ModelMetadata m;
  int64_t version = 0;
  if (doc["schema_version"].get(version)) return bad("field 'schema_version' missing");
  m.schema_version = static_cast<uint32_t>(version);
  const auto read_doubles = [&](const char* key, auto& out) -> absl::Status {
    simdjson::dom::array a;
    if (doc[key].get(a)) return bad(absl::StrCat("field '", key, "' missing"));
    for (auto v : a) {
      double d;
      if (v.get(d)) return bad(absl::StrCat("field '", key, "' holds a non-number"));
      out.push_back(static_cast<typename std::decay_t<decltype(out)>::value_type>(d));
    }
    return absl::OkStatus();
  };
  if (auto s = read_doubles("horizons_seconds", m.horizons_seconds); !s.ok()) return s;
  if (auto s = read_doubles("feature_mean", m.feature_mean); !s.ok()) return s;
  if (auto s = read_doubles("feature_std", m.feature_std); !s.ok()) return s;
  // The learned policy interpolates in log-time between rungs.
  if (m.horizons_seconds.empty()) return bad("field 'horizons_seconds' is empty");
  for (size_t k = 0; k < m.horizons_seconds.size(); ++k) {
    const double h = m.horizons_seconds[k];
    if (!(std::isfinite(h) && h > 0 && (k == 0 || h > m.horizons_seconds[k - 1]))) {
      return bad(absl::StrCat("field 'horizons_seconds': entry ", k, " (", h,
                              ") is not a finite number above the one before and 0"));
    }
  }
  simdjson::dom::array names;
  if (doc["feature_names"].get(names)) return bad("field 'feature_names' missing");
  for (auto v : names) {
    std::string_view name;
    if (v.get(name)) return bad("field 'feature_names' holds a non-string");
    m.feature_names.emplace_back(name);
  }
  std::string_view text;
  if (!doc["trace_fingerprint"].get(text)) m.trace_fingerprint = std::string(text);
  if (!doc["created_by"].get(text)) m.created_by = std::string(text);
  return m;
}

}  // namespace kvlearn
