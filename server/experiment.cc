#include "server/experiment.h"

#include <simdjson.h>

#include <cmath>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/fnv1a.h"
#include "core/splitmix64.h"

namespace kvlearn {
namespace {

// Names become Prometheus label values and log lines: kept plain.
bool PlainName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

class Parser {
 public:
  explicit Parser(std::string_view source) : source_(source) {}

  absl::Status Bad(std::string_view field, std::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(source_), ": ", std::string(field), ": ", std::string(what)));
  }

  absl::StatusOr<std::string> String(simdjson::dom::element e, std::string_view field) const {
    std::string_view s;
    if (e.get(s)) return Bad(field, "not a string");
    return std::string(s);
  }

  // One arm or shadow object: name, policy, model, and share when `arm`.
  absl::Status Entry(simdjson::dom::element e, const std::string& field, bool arm,
                     ExperimentArm& out) const {
    simdjson::dom::object o;
    if (e.get(o)) return Bad(field, "not an object");
    bool has_share = false;
    for (auto [key, value] : o) {
      const std::string f = absl::StrCat(field, ".", std::string(key));
      if (key == "name" || key == "policy" || key == "model") {
        auto s = String(value, f);
        if (!s.ok()) return s.status();
        (key == "name" ? out.name : key == "policy" ? out.policy : out.model) = *s;
      } else if (key == "share" && arm) {
        if (value.get(out.share)) return Bad(f, "not a number");
        if (!(std::isfinite(out.share) && out.share > 0 && out.share <= 1)) {
          return Bad(f, absl::StrCat(out.share, " is not in (0, 1]"));
        }
        has_share = true;
      } else {
        return Bad(f, arm ? "unknown key (known: name, policy, model, share)"
                          : "unknown key (known: name, policy, model)");
      }
    }
    if (out.name.empty()) return Bad(absl::StrCat(field, ".name"), "missing");
    if (!PlainName(out.name)) {
      return Bad(absl::StrCat(field, ".name"),
                 absl::StrCat("'", out.name, "' is not 1 to 64 of [A-Za-z0-9_.-]"));
    }
    if (out.policy.empty()) return Bad(absl::StrCat(field, ".policy"), "missing");
    if (arm && !has_share) return Bad(absl::StrCat(field, ".share"), "missing");
    return absl::OkStatus();
  }

 private:
  std::string_view source_;
};

}  // namespace

double NodeHashUnit(std::string_view node_id) {
  Fnv1a h(Fnv1a::kPublishedBasis);
  h.Bytes(node_id);
  uint64_t state = h.value();
  return SplitMix64Uniform(state);
}

size_t Experiment::ArmOf(std::string_view node_id) const {
  const double u = NodeHashUnit(node_id);
  double cumulative = 0;
  for (size_t i = 0; i + 1 < arms.size(); ++i) {
    cumulative += arms[i].share;
    if (u < cumulative) return i;
  }
  return arms.size() - 1;  // the last arm takes the rest (rounding included)
}

absl::StatusOr<Experiment> ParseExperiment(std::string_view json, std::string_view source) {
  const Parser p(source);
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (auto error = parser.parse(json.data(), json.size()).get(doc); error) {
    return p.Bad("(file)", absl::StrCat("not valid JSON: ", simdjson::error_message(error)));
  }
  simdjson::dom::object top;
  if (doc.get(top)) return p.Bad("(file)", "not a JSON object");
  Experiment x;
  bool has_arms = false;
  for (auto [key, value] : top) {
    if (key != "arms" && key != "shadows") {
      return p.Bad(key, "unknown key (known: arms, shadows)");
    }
    const bool arms = key == "arms";
    has_arms |= arms;
    simdjson::dom::array list;
    if (value.get(list)) return p.Bad(key, "not an array");
    size_t i = 0;
    for (simdjson::dom::element e : list) {
      ExperimentArm entry;
      if (auto st = p.Entry(e, absl::StrCat(std::string(key), "[", i, "]"), arms, entry); !st.ok())
        return st;
      if (arms) {
        x.arms.push_back(std::move(entry));
      } else {
        x.shadows.push_back(ExperimentPolicy(std::move(entry)));
      }
      ++i;
    }
  }
  if (!has_arms || x.arms.empty()) return p.Bad("arms", "missing or empty (at least one arm)");
  const auto distinct = [&](const auto& list, std::string_view field) -> absl::Status {
    absl::flat_hash_set<std::string> seen;
    for (size_t i = 0; i < list.size(); ++i) {
      if (!seen.insert(list[i].name).second) {
        return p.Bad(absl::StrCat(std::string(field), "[", i, "].name"),
                     absl::StrCat("'", list[i].name, "' names an earlier entry too"));
      }
    }
    return absl::OkStatus();
  };
  if (auto st = distinct(x.arms, "arms"); !st.ok()) return st;
  if (auto st = distinct(x.shadows, "shadows"); !st.ok()) return st;
  double sum = 0;
  for (const ExperimentArm& a : x.arms) sum += a.share;
  if (std::abs(sum - 1) > kShareTolerance) {
    return p.Bad("arms[].share", absl::StrCat("the shares sum to ", sum, ", not 1"));
  }
  return x;
}

Experiment SingleArmExperiment(const std::string& policy,
                               std::shared_ptr<const LearnedModel> model) {
  Experiment x;
  ExperimentArm arm;
  arm.name = policy;
  arm.policy = policy;
  arm.loaded_model = std::move(model);
  arm.share = 1;
  x.arms.push_back(std::move(arm));
  return x;
}

}  // namespace kvlearn
