// A sidecar's /metrics as numbers, for tests that check its series.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <map>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace kvlearn {

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
