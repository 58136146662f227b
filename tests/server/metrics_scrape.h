// Reads one unlabelled series of a live sidecar's /metrics (tests link
// cpp-httplib for the client).
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <cstdint>
#include <string>

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

}  // namespace kvlearn
