#include "sim/comparison_report.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sim/json_text.h"

namespace kvlearn {
namespace {

const ReplayResult* FindRow(const Comparison& c, std::string_view policy) {
  for (const auto& r : c.results) {
    if (r.policy == policy) return &r;
  }
  return nullptr;
}

std::string OptionalNumber(const std::optional<double>& v) { return v ? JsonNumber(*v) : "null"; }

}  // namespace

void FillGapClosed(Comparison& comparison) {
  const ReplayResult* lru = FindRow(comparison, "lru");
  const ReplayResult* oracle = FindRow(comparison, "belady");
  for (auto& r : comparison.results) {
    r.gap_closed = lru && oracle ? GapClosed(r, *lru, *oracle) : std::nullopt;
  }
}

std::string FormatJson(const Comparison& c) {
  std::string out =
      absl::StrCat("{\"trace\": ", JsonString(c.trace), ", \"requests\": ", c.requests,
                   ", \"block_accesses\": ", c.block_accesses, ", \"pool_bytes\": ", c.pool_bytes,
                   ", \"results\": [");
  for (size_t i = 0; i < c.results.size(); ++i) {
    const ReplayResult& r = c.results[i];
    absl::StrAppend(&out, i ? ", " : "", "{\"policy\": ", JsonString(r.policy),
                    ", \"block_hit_ratio\": ", JsonNumber(r.block_hit_ratio()),
                    ", \"token_hit_ratio\": ", JsonNumber(r.token_hit_ratio()),
                    ", \"loaded_bytes\": ", r.loaded_bytes,
                    ", \"admitted_bytes\": ", r.admitted_bytes,
                    ", \"transfer_bytes\": ", r.transfer_bytes(),
                    ", \"recomputed_tokens\": ", r.recomputed_tokens,
                    ", \"prefill_gpu_seconds\": ", JsonNumber(r.prefill_gpu_seconds),
                    ", \"ttft_mean_ms\": ", JsonNumber(r.ttft_ms.mean),
                    ", \"ttft_p50_ms\": ", JsonNumber(r.ttft_ms.p50),
                    ", \"ttft_p95_ms\": ", JsonNumber(r.ttft_ms.p95),
                    ", \"ttft_p99_ms\": ", JsonNumber(r.ttft_ms.p99),
                    ", \"accesses_per_second\": ", JsonNumber(r.accesses_per_second()),
                    ", \"gap_closed\": ", OptionalNumber(r.gap_closed), "}");
  }
  return out + "]}\n";
}

std::string FormatCsv(const Comparison& c) {
  std::string out =
      "policy,block_hit_ratio,token_hit_ratio,loaded_bytes,admitted_bytes,transfer_bytes,"
      "recomputed_tokens,prefill_gpu_seconds,ttft_mean_ms,ttft_p50_ms,ttft_p95_ms,ttft_p99_ms,"
      "accesses_per_second,gap_closed\n";
  for (const ReplayResult& r : c.results) {
    absl::StrAppend(&out, r.policy, ",", JsonNumber(r.block_hit_ratio()), ",",
                    JsonNumber(r.token_hit_ratio()), ",", r.loaded_bytes, ",", r.admitted_bytes,
                    ",", r.transfer_bytes(), ",", r.recomputed_tokens, ",",
                    JsonNumber(r.prefill_gpu_seconds), ",", JsonNumber(r.ttft_ms.mean), ",",
                    JsonNumber(r.ttft_ms.p50), ",", JsonNumber(r.ttft_ms.p95), ",",
                    JsonNumber(r.ttft_ms.p99), ",", JsonNumber(r.accesses_per_second()), ",",
                    r.gap_closed ? JsonNumber(*r.gap_closed) : "", "\n");
  }
  return out;
}

std::string FormatTable(const Comparison& c) {
  // The first column is as wide as the longest policy name.
  size_t width = 10;
  for (const ReplayResult& r : c.results) width = std::max(width, r.policy.size());
  const auto name = [width](std::string_view n) {
    std::string padded(n);
    padded.resize(width, ' ');
    return padded;
  };
  std::string out =
      absl::StrFormat("trace %s: %d requests, %d block accesses evaluated; pool %.1f GB\n\n",
                      c.trace, c.requests, c.block_accesses, Gb(c.pool_bytes));
  absl::StrAppend(
      &out,
      absl::StrFormat("%s %8s %8s %10s %10s %10s %10s %9s %9s %9s %9s %9s "
                      "%9s %7s\n",
                      name("policy"), "blk hit", "tok hit", "loaded", "admitted", "transfer",
                      "recompute", "prefill", "TTFT", "TTFT", "TTFT", "TTFT", "replay", "gap"),
      absl::StrFormat("%s %8s %8s %10s %10s %10s %10s %9s %9s %9s %9s %9s "
                      "%9s %7s\n",
                      name(""), "%", "%", "GB", "GB", "GB", "Mtokens", "GPU-s", "mean ms", "p50 ms",
                      "p95 ms", "p99 ms", "Macc/s", "closed"));
  for (const ReplayResult& r : c.results) {
    absl::StrAppend(
        &out,
        absl::StrFormat("%s %8.2f %8.2f %10.1f %10.1f %10.1f %10.2f %9.1f %9.1f %9.1f %9.1f %9.1f "
                        "%9.2f %7s\n",
                        name(r.policy), 100 * r.block_hit_ratio(), 100 * r.token_hit_ratio(),
                        Gb(r.loaded_bytes), Gb(r.admitted_bytes), Gb(r.transfer_bytes()),
                        r.recomputed_tokens / 1e6, r.prefill_gpu_seconds, r.ttft_ms.mean,
                        r.ttft_ms.p50, r.ttft_ms.p95, r.ttft_ms.p99, r.accesses_per_second() / 1e6,
                        r.gap_closed ? absl::StrFormat("%.1f%%", 100 * *r.gap_closed) : "-"));
  }
  return out;
}

}  // namespace kvlearn
