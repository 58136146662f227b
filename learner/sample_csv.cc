#include "learner/sample_csv.h"

#include <cmath>
#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "features/feature_schema.h"

namespace kvlearn {

absl::Status WriteSamplesCsv(const std::string& path, const SampleSet& samples,
                             std::span<const double> horizons_seconds, uint32_t train_end,
                             const std::function<void(size_t rows)>& progress) {
  if (horizons_seconds.size() != samples.num_horizons) {
    return absl::InvalidArgumentError(absl::StrCat(horizons_seconds.size(), " horizons for ",
                                                   samples.num_horizons, " labels per sample"));
  }
  const std::string partial = path + ".partial";
  std::ofstream out(partial, std::ios::binary | std::ios::trunc);
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", partial));
  std::string buffer = "request,split";
  for (std::string_view name : kFeatureNames) absl::StrAppend(&buffer, ",", std::string(name));
  for (double h : horizons_seconds) absl::StrAppendFormat(&buffer, ",reused_within_%gs", h);
  buffer += ",next_use_seconds,saved_ms\n";
  const size_t horizons = samples.num_horizons;
  for (size_t i = 0; i < samples.size(); ++i) {
    absl::StrAppend(&buffer, samples.request[i],
                    samples.request[i] < train_end ? ",train" : ",valid");
    for (size_t k = 0; k < kNumFeatures; ++k) {
      absl::StrAppendFormat(&buffer, ",%.9g", samples.features[i * kNumFeatures + k]);
    }
    for (size_t k = 0; k < horizons; ++k) {
      const size_t at = i * horizons + k;
      buffer += !samples.known[at] ? "," : samples.reused[at] > 0 ? ",1" : ",0";
    }
    const double next = samples.next_use_seconds[i];
    if (std::isfinite(next)) {
      absl::StrAppendFormat(&buffer, ",%.9g", next);
    } else {
      buffer += ",";
    }
    absl::StrAppendFormat(&buffer, ",%.9g\n", samples.saved_ms[i]);
    if (buffer.size() > (1 << 20)) {
      out.write(buffer.data(), static_cast<std::streamsize>(buffer.size()));
      buffer.clear();
      if (progress) progress(i + 1);
    }
  }
  out.write(buffer.data(), static_cast<std::streamsize>(buffer.size()));
  out.close();
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", partial));
  if (std::rename(partial.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot rename ", partial, " to ", path));
  }
  return absl::OkStatus();
}

}  // namespace kvlearn
