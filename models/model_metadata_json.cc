#include "models/model_metadata_json.h"

#include <simdjson.h>

#include <cmath>
#include <functional>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "features/feature_schema.h"

namespace kvlearn {

std::string JsonEscaped(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out;
}

namespace {

// Doubles that read back to the same value.
std::string Exact(double x) { return absl::StrFormat("%.17g", x); }

std::string TrainingTrafficJson(const ModelMetadata& m) {
  if (!m.training_traffic.has_value()) return "";
  const TrafficSummary& t = *m.training_traffic;
  return absl::StrCat(",\n \"training_traffic\": {\"requests\": ", t.requests,
                      ", \"request_rate_per_s\": ", Exact(t.request_rate_per_s),
                      ", \"mean_prompt_blocks\": ", Exact(t.mean_prompt_blocks),
                      ", \"block_reuse_ratio\": ", Exact(t.block_reuse_ratio),
                      ", \"block_size_tokens\": ", t.block_size_tokens, "}");
}

std::string JudgementJson(const ModelMetadata& m) {
  if (!m.judgement.has_value()) return "";
  const ModelJudgement& j = *m.judgement;
  std::string pools;
  for (const PoolJudgement& p : j.pools) {
    absl::StrAppend(
        &pools, pools.empty() ? "" : ", ", "{\"pool_fraction\": ", Exact(p.pool_fraction),
        ", \"pool_bytes\": ", p.pool_bytes, ", \"learned_cost_s\": ", Exact(p.learned_cost_s),
        ", \"lru_cost_s\": ", Exact(p.lru_cost_s), ", \"best_heuristic\": \"",
        JsonEscaped(p.best_heuristic),
        "\", \"best_heuristic_cost_s\": ", Exact(p.best_heuristic_cost_s),
        p.no_model_cost_s < 0 ? std::string()
                              : absl::StrCat(", \"no_model_cost_s\": ", Exact(p.no_model_cost_s)),
        "}");
  }
  return absl::StrCat(",\n \"judgement\": {\"verdict\": \"", j.fit() ? "fit" : "unfit",
                      "\", \"validation_requests\": [", j.first_request, ", ", j.end_request,
                      "], \"weights_fingerprint\": \"", JsonEscaped(j.weights_fingerprint),
                      "\", \"pools\": [", pools, "]}");
}

// The optional sections (absent in files written before them): parsed into
// `m` when present; `bad(what)` makes the error naming the file and field.
using BadField = std::function<absl::Status(std::string_view)>;

absl::Status ParseTrainingTraffic(simdjson::dom::element doc, ModelMetadata& m,
                                  const BadField& bad) {
  simdjson::dom::object t;
  if (doc["training_traffic"].get(t)) return absl::OkStatus();
  TrafficSummary s;
  uint64_t block_size = 0;
  if (t["requests"].get(s.requests) || t["request_rate_per_s"].get(s.request_rate_per_s) ||
      t["mean_prompt_blocks"].get(s.mean_prompt_blocks) ||
      t["block_reuse_ratio"].get(s.block_reuse_ratio) || t["block_size_tokens"].get(block_size) ||
      block_size > UINT32_MAX) {
    return bad(
        "field 'training_traffic' needs requests, request_rate_per_s, mean_prompt_blocks, "
        "block_reuse_ratio and block_size_tokens, each a non-negative number");
  }
  if (!(s.request_rate_per_s >= 0 && s.mean_prompt_blocks >= 0 && s.block_reuse_ratio >= 0 &&
        s.block_reuse_ratio <= 1 && std::isfinite(s.request_rate_per_s) &&
        std::isfinite(s.mean_prompt_blocks))) {
    return bad(
        "field 'training_traffic' holds a negative or non-finite number, or a "
        "block_reuse_ratio outside [0, 1]");
  }
  s.block_size_tokens = static_cast<uint32_t>(block_size);
  m.training_traffic = s;
  return absl::OkStatus();
}

absl::Status ParseJudgement(simdjson::dom::element doc, ModelMetadata& m, const BadField& bad) {
  simdjson::dom::object j;
  if (doc["judgement"].get(j)) return absl::OkStatus();
  ModelJudgement out;
  std::string_view verdict, fingerprint;
  simdjson::dom::array split, pools;
  if (j["verdict"].get(verdict) || (verdict != "fit" && verdict != "unfit")) {
    return bad("field 'judgement.verdict' must be \"fit\" or \"unfit\"");
  }
  uint64_t first = 0, end = 0;
  if (j["validation_requests"].get(split) || split.size() != 2 || split.at(0).get(first) ||
      split.at(1).get(end) || first >= end || end > UINT32_MAX) {
    return bad("field 'judgement.validation_requests' must be [first, end) request indices");
  }
  out.first_request = static_cast<uint32_t>(first);
  out.end_request = static_cast<uint32_t>(end);
  if (j["weights_fingerprint"].get(fingerprint)) {
    return bad("field 'judgement.weights_fingerprint' missing");
  }
  out.weights_fingerprint = std::string(fingerprint);
  if (j["pools"].get(pools) || pools.size() == 0) {
    return bad("field 'judgement.pools' must be a non-empty array");
  }
  for (simdjson::dom::element e : pools) {
    PoolJudgement p;
    std::string_view best;
    if (e["pool_fraction"].get(p.pool_fraction) || e["pool_bytes"].get(p.pool_bytes) ||
        e["learned_cost_s"].get(p.learned_cost_s) || e["lru_cost_s"].get(p.lru_cost_s) ||
        e["best_heuristic"].get(best) || e["best_heuristic_cost_s"].get(p.best_heuristic_cost_s)) {
      return bad(absl::StrCat("field 'judgement.pools[", out.pools.size(),
                              "]' needs pool_fraction, pool_bytes, learned_cost_s, lru_cost_s, "
                              "best_heuristic and best_heuristic_cost_s"));
    }
    p.best_heuristic = std::string(best);
    // Optional: files judged before learned without a model was priced lack it.
    if (double no_model; !e["no_model_cost_s"].get(no_model)) {
      if (!(no_model >= 0)) {
        return bad(absl::StrCat("field 'judgement.pools[", out.pools.size(),
                                "].no_model_cost_s' must be a cost, at least 0"));
      }
      p.no_model_cost_s = no_model;
    }
    out.pools.push_back(std::move(p));
  }
  // The verdict is the costs' to give: one edited by hand must not say fit.
  if ((verdict == "fit") != out.fit()) {
    return bad(absl::StrCat("field 'judgement.verdict' says ", std::string(verdict),
                            " but its pools' costs say ", out.fit() ? "fit" : "unfit"));
  }
  m.judgement = std::move(out);
  return absl::OkStatus();
}

}  // namespace

std::string ModelMetadataJson(const ModelMetadata& m) {
  const auto floats = [](const auto& v) {
    return absl::StrJoin(
        v, ", ", [](std::string* out, double x) { out->append(absl::StrFormat("%.9g", x)); });
  };
  // This build's names unless the metadata says otherwise (tests write others).
  std::vector<std::string> names;
  if (m.feature_names.empty()) {
    for (const auto n : kFeatureNames) names.push_back(absl::StrCat("\"", JsonEscaped(n), "\""));
  } else {
    for (const auto& n : m.feature_names) names.push_back(absl::StrCat("\"", JsonEscaped(n), "\""));
  }
  const std::string created_by = JsonEscaped(m.created_by);
  return absl::StrCat(
      "{\"schema_version\": ", m.schema_version, ",\n \"label\": \"",
      "P(next use of the block within horizons_seconds[k]) per output k",
      "\",\n \"horizons_seconds\": [", floats(m.horizons_seconds), "],\n \"feature_names\": [",
      absl::StrJoin(names, ", "), "],\n \"feature_mean\": [", floats(m.feature_mean),
      "],\n \"feature_std\": [", floats(m.feature_std), "],\n \"trace_fingerprint\": \"",
      m.trace_fingerprint, "\",\n \"created_by\": \"", created_by, "\"",
      m.training_blas.empty()
          ? std::string()
          : absl::StrCat(",\n \"training_blas\": \"", JsonEscaped(m.training_blas), "\""),
      TrainingTrafficJson(m), JudgementJson(m), "}\n");
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
  if (!doc["training_blas"].get(text)) m.training_blas = std::string(text);
  if (auto s = ParseTrainingTraffic(doc, m, bad); !s.ok()) return s;
  if (auto s = ParseJudgement(doc, m, bad); !s.ok()) return s;
  return m;
}

}  // namespace kvlearn
