// Reads a live sidecar's /metrics: one unlabelled series, or every series
// (tests link cpp-httplib for the client).
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <cstdint>
#include <map>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace kvlearn {

// The value of series `name` (no labels), or UINT64_MAX (and a test
// failure) when /metrics does not answer or lacks it.
inline uint64_t ScrapeCounter(int metrics_port, const std::string& name) {
  httplib::Client http("127.0.0.1", metrics_port);
  auto res = http.Get("/metrics");
  EXPECT_TRUE(res && res->status == 200) << "GET /metrics failed";
  if (!res) return UINT64_MAX;
  const std::string line = "\n" + name + " ";
  const size_t at = res->body.find(line);
  EXPECT_NE(at, std::string::npos) << name << " missing from /metrics";
  if (at == std::string::npos) return UINT64_MAX;
  return std::stoull(res->body.substr(at + line.size()));
}

// Every series of /metrics with labels, by "name{labels}".
inline std::map<std::string, double> Scrape(int metrics_port) {
  std::map<std::string, double> out;
  httplib::Client http("127.0.0.1", metrics_port);
  auto res = http.Get("/metrics");
  EXPECT_TRUE(res && res->status == 200);
  if (!res) return out;
  for (absl::string_view line : absl::StrSplit(res->body, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    double v = 0;
    if (space == absl::string_view::npos || !absl::SimpleAtod(line.substr(space + 1), &v)) continue;
    out[std::string(line.substr(0, space))] = v;
  }
  return out;
}

// The series `key` of a scrape (a test failure, and -1, when missing).
inline double Series(const std::map<std::string, double>& m, const std::string& key) {
  auto it = m.find(key);
  EXPECT_NE(it, m.end()) << key << " missing from /metrics";
  return it == m.end() ? -1 : it->second;
}

}  // namespace kvlearn
