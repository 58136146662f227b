// The cluster output keeps `kvlearn compare`'s JSON schema and adds the
// cluster fields.
#include "sim/cluster_report.h"

#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "sim/comparison_report.h"

namespace kvlearn {
namespace {

std::set<std::string> Keys(const std::string& json, const std::string& after) {
  std::set<std::string> keys;
  const std::string rows = json.substr(json.find(after));
  const std::regex key("\"([a-z_0-9]+)\": ");
  for (auto it = std::sregex_iterator(rows.begin(), rows.end(), key); it != std::sregex_iterator();
       ++it) {
    keys.insert((*it)[1]);
  }
  return keys;
}

TEST(ClusterReportTest, JsonRowsHavePoolFieldsPlusClusterFields) {
  ReplayResult r;
  r.policy = "lru";
  Comparison pool;
  pool.results.push_back(r);
  ClusterResult c;
  c.replay = r;
  c.router = "burst-replicate:4";
  c.replication_bytes = 123;
  c.replay.requests = 12;
  c.routed_to_busier = 3;
  c.routed_excess_requests = 9;
  ClusterComparison cluster;
  cluster.prefill_nodes = 4;
  cluster.results.push_back(c);

  const std::string json = FormatClusterJson(cluster);
  const std::set<std::string> pool_keys = Keys(FormatJson(pool), "\"results\"");
  const std::set<std::string> cluster_keys = Keys(json, "\"results\"");
  for (const std::string& k : pool_keys) EXPECT_TRUE(cluster_keys.count(k)) << k;
  for (const char* k : {"router", "queue_mean_ms", "load_mean_ms", "prefill_mean_ms",
                        "hbm_hit_ratio", "replication_bytes", "burst_triggers", "link_bytes"}) {
    EXPECT_TRUE(cluster_keys.count(k)) << k;
  }
  EXPECT_NE(json.find("\"router\": \"burst-replicate:4\""), std::string::npos);
  EXPECT_NE(json.find("\"replication_bytes\": 123"), std::string::npos);
  EXPECT_NE(json.find("\"prefill_nodes\": 4"), std::string::npos);
  // Shares of the 12 evaluated requests: 3 sent past a less loaded node,
  // 9 requests' excess in all.
  EXPECT_NE(json.find("\"routed_to_busier_ratio\": 0.25"), std::string::npos);
  EXPECT_NE(json.find("\"routed_excess_mean\": 0.75"), std::string::npos);
  for (const char* k : {"transfer_seconds", "cost_seconds", "utilization"}) {
    EXPECT_TRUE(cluster_keys.count(k)) << k;
  }
  EXPECT_NE(json.find("\"saturated\": false"), std::string::npos);

  const std::string csv = FormatClusterCsv(cluster);
  EXPECT_EQ(csv.substr(0, csv.find(',')), "router");
  EXPECT_NE(csv.find("\nburst-replicate:4,lru,"), std::string::npos);
}

// A cache-aware row of `policy` on `nodes` nodes busy `busy_s` seconds of
// a window of `window_ms`.
ClusterResult BusyRow(const char* policy, uint32_t nodes, double window_ms, double busy_s) {
  ClusterResult c;
  c.router = "cache-aware";
  c.replay.policy = policy;
  c.replay.prefill_nodes = nodes;
  c.replay.first_arrival_ms = 0;
  c.replay.last_arrival_ms = window_ms;
  c.replay.busy_seconds = busy_s;
  return c;
}

// One node busy 1 s of a 1 s window: 100%, saturated; the table names it.
TEST(ClusterReportTest, SaturatedRowIsFlagged) {
  const ClusterResult c = BusyRow("lru", 1, 1000, 1);
  ClusterComparison cluster;
  cluster.results.push_back(c);
  cluster.results.push_back(BusyRow("gdsf", 1, 1000, 0.9));  // 90%: not saturated
  EXPECT_TRUE(AnyClusterSaturated(cluster));
  EXPECT_EQ(SaturatedRows(cluster), "cache-aware/lru (100%)");
  EXPECT_NE(FormatClusterJson(cluster).find("\"saturated\": true"), std::string::npos);
  EXPECT_NE(FormatClusterTable(cluster).find("saturated: cache-aware/lru (100%)"),
            std::string::npos);
}

// Names longer than the columns' minimum widths ("kvlearn-cars", a router
// with a parameter) widen them for every line, so each line of the table has
// the same length and every number sits under its header.
TEST(ClusterReportTest, ColumnsWidenToTheLongestNames) {
  ClusterComparison cluster;
  cluster.results.push_back(BusyRow("lru", 1, 1000, 0.5));
  cluster.results.push_back(BusyRow("kvlearn-cars", 1, 1000, 0.5));
  cluster.results.back().router = "burst-replicate:16-and-a-long-name";
  const std::string table = FormatClusterTable(cluster);
  const std::vector<std::string> lines = absl::StrSplit(table, '\n');
  // The two header lines and the two rows follow the line naming the trace
  // and a blank one.
  ASSERT_GE(lines.size(), 6u);
  for (size_t i = 2; i < 6; ++i) {
    EXPECT_EQ(lines[i].size(), lines[2].size()) << lines[i];
  }
  EXPECT_EQ(lines[5].find("kvlearn-cars"), lines[4].find("lru"));
}

// Two nodes busy 60% of a 10 s window have 4 s of idle time each: a
// backlog of 4 s per node at the window's start fits in it, 4.001 s does
// not. The recompute bound is never flagged.
TEST(ClusterReportTest, BacklogBeyondTheWindowsIdleTimeIsFlagged) {
  ClusterResult c = BusyRow("kvlearn-cars", 2, 10'000, 12);
  c.backlog_at_eval_ms = 4000;
  EXPECT_FALSE(CarriesBacklog(c));
  c.backlog_at_eval_ms = 4001;
  EXPECT_TRUE(CarriesBacklog(c));
  ClusterComparison cluster;
  cluster.results.push_back(c);
  EXPECT_EQ(BackloggedRows(cluster), "cache-aware/kvlearn-cars (4 s per node)");
  EXPECT_NE(FormatClusterTable(cluster).find(
                "\n" + BackloggedLine("cache-aware/kvlearn-cars (4 s per node)") + "\n"),
            std::string::npos);
  EXPECT_NE(FormatClusterTable(cluster).find("backlog: cache-aware/kvlearn-cars (4 s per node)"),
            std::string::npos);
  EXPECT_NE(FormatClusterJson(cluster).find("\"backlog_at_eval_ms\": 4001"), std::string::npos);
  cluster.results[0].replay.policy = "no-cache";
  EXPECT_FALSE(CarriesBacklog(cluster.results[0]));
  EXPECT_EQ(BackloggedRows(cluster), "");
}

TEST(ClusterReportTest, SamplesFileListsEveryTtft) {
  ClusterResult c;
  c.router = "least-load";
  c.replay.policy = "lru";
  c.ttft_samples_ms = {1.5, 20};
  ClusterComparison cluster;
  cluster.trace = "t.jsonl";
  cluster.results.push_back(c);
  EXPECT_EQ(FormatTtftSamplesJson(cluster),
            "{\"trace\": \"t.jsonl\", \"samples\": [{\"router\": \"least-load\", \"policy\": "
            "\"lru\", \"ttft_ms\": [1.5,20]}]}\n");
}

}  // namespace
}  // namespace kvlearn
