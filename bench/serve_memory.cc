// Memory of the sidecar's pools under an unbounded stream of new block ids
// (issue 13: the catalog used to grow with every id ever seen).
//
//   build/bench/serve_memory --kvlearn build/cli/kvlearn [--ids 50000000]
//
// Part 1, bytes per tracked block: NodePools in this process, one pool, a
// million distinct ids (chains of 16, the first block of each stored), a
// ghost bound above that so nothing is forgotten; the growth of the heap in
// use (mallinfo2: arena chunks plus mmapped blocks) divided by the blocks
// tracked, per policy (learned with the tests' small model), and whether it
// meets issue 13's goal of at most 128 B per block. Part 1b: the
// heap in use of one such lru pool with the default ghost bound over
// --heap-ids (20,000,000) ids, every 2,000,000.
//
// Part 2, RSS over time: a real `kvlearn serve` (spawned, --policy lru unless
// given, with --model for learned; default --ghost-blocks unless given) fed
// --ids distinct ids over one ReportEvents
// stream: per 16 new ids one request_arrival chain, a block_stored of its
// first block and, once --resident blocks are stored, a block_removed of the
// oldest; the event log is bounded by --log-max-bytes. Every --sample-every
// ids it prints the ids sent, the server's VmRSS (/proc/PID/status) and the
// blocks tracked (GetStatus). Ends with the smallest and largest RSS after
// the first sample, then the verdict on flatness (FlatVerdict below; the
// definition is in docs/performance.md, "Memory"): after the warm-up (the
// first fifth of the ids: the pool's first compaction cycles, memtables and
// the block cache filling) every sample within the band of their median
// and a least-squares slope under kFlatSlopeMib per 10 M ids. The band is
// --band-mib if given, else derived for the policy (FlatBandMib). Exits 3
// when RSS is not flat. --part2-only skips parts 1 and 1b.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kvlearn/v1/retention.grpc.pb.h"
#include "server/node_pools.h"
#include "tests/support/heap_per_block.h"
#include "tests/support/test_model.h"

namespace kvlearn {
namespace {

constexpr uint64_t kChain = kMemoryChainBlocks;
// "Flat" RSS (docs/performance.md, "Memory"): the bound on each sample's
// distance from the median after the warm-up covers the event log's two
// 16 MiB memtables (kMemtablesMib) and a compaction, which builds the new
// pool beside the old one, so that a sample taken during one reads up to
// (resident + ghost bound) blocks' worth more (FlatBandMib). The slope bound
// allows 25 MiB over 50 M ids: a leak of 1 byte per id (48 MiB over 50 M)
// fails it.
constexpr double kMemtablesMib = 32;
constexpr double kFlatSlopeMib = 5;

constexpr const char* kUsage =
    "usage: serve_memory --kvlearn PATH [--ids N] [--resident N] [--sample-every N]\n"
    "         [--ghost-blocks N] [--log-max-bytes N] [--heap-ids N] [--policy P]\n"
    "         [--model FILE] [--band-mib N] [--part1-only | --part2-only]\n"
    "Part 1: heap bytes per tracked block per policy (bytes_per_block, B; within_128: at\n"
    "most issue 13's 128 B). Part 1b: heap in use (heap_mib, MiB) of one lru pool every\n"
    "2,000,000 ids. Part 2: a real `kvlearn serve` fed --ids distinct ids (default\n"
    "50,000,000); every --sample-every ids its VmRSS (rss_mib, MiB) and the blocks its\n"
    "pools track. Flat when every sample after the first fifth of the ids is within the\n"
    "band of their median (--band-mib, else 32 MiB of memtables plus one pool's\n"
    "(resident + ghost bound) blocks at part 1's bytes per block for the policy) and the\n"
    "slope is under 5 MiB per 10 M ids; exits 3 when not. docs/performance.md, Memory.\n";

struct Flags {
  std::string kvlearn;
  uint64_t ids = 50'000'000;
  uint64_t resident = 16'384;
  uint64_t sample_every = 2'000'000;
  uint64_t ghost_blocks = 0;  // 0: the server's default
  uint64_t log_max_bytes = 256ull << 20;
  uint64_t heap_ids = 20'000'000;  // part 1b
  std::string policy = "lru";      // part 2's server
  std::string model;               // its --model, for learned
  uint64_t band_mib = 0;           // 0: FlatBandMib
};

// Part 1's measurement for one policy in one tier (tests/support/heap_per_block.h).
std::pair<uint64_t, double> MeasureBytesPerBlock(const std::string& policy, v1::Tier tier) {
  const auto m = MeasureHeapPerBlock(policy, tier);
  if (!m.ok()) {
    std::fprintf(stderr, "serve_memory: %s\n", std::string(m.status().message()).c_str());
    std::exit(1);
  }
  return {m->blocks_tracked, m->bytes_per_block};
}

void BytesPerBlock() {
  std::printf("part 1: heap bytes per tracked block (1,000,000 ids, nothing forgotten)\n");
  std::printf("%-12s %14s %16s %12s\n", "policy", "blocks_tracked", "bytes_per_block",
              "within_128");
  // learned/hbm: learned in a node's HBM, which keeps no ARC expert.
  for (const std::string row : {"lru", "lfu", "fifo", "gdsf", "s3fifo", "sieve", "arc",
                                "kvlearn-cars", "learned", "learned/hbm"}) {
    const std::string policy = row.substr(0, row.find('/'));
    const v1::Tier tier = row.ends_with("/hbm") ? v1::TIER_HBM : v1::TIER_POOL;
    const auto [tracked, per_block] = MeasureBytesPerBlock(policy, tier);
    std::printf("%-12s %14llu %16.1f %12s\n", row.c_str(), static_cast<unsigned long long>(tracked),
                per_block, per_block <= 128 ? "yes" : "no");
  }
}

// Part 1b: the heap in use of one in-process lru pool with the default
// --ghost-blocks over `ids` distinct ids (same events as part 2), every
// 2,000,000 ids: flat if compactions free what they forget.
void HeapOverTime(uint64_t ids) {
  std::printf("part 1b: heap in use of one lru pool (default ghost bound) over %llu ids\n",
              static_cast<unsigned long long>(ids));
  std::printf("%14s %10s %14s\n", "ids_sent", "heap_mib", "blocks_tracked");
  NodePoolsOptions o;
  o.cost =
      std::make_shared<CostModel>(*FindModelProfile("llama3-8b"), *FindHardwareProfile("a100"));
  const size_t before = HeapInUse();
  NodePools pools(o);
  for (uint64_t c = 0; c < ids / kChain; ++c) {
    v1::EventBatch batch;
    AddMemoryChain(batch, c, 16'384);
    for (const auto& e : batch.events()) pools.Apply(e).IgnoreError();
    if ((c + 1) % (2'000'000 / kChain) == 0) {
      std::printf("%14llu %10.1f %14llu\n", static_cast<unsigned long long>((c + 1) * kChain),
                  static_cast<double>(HeapInUse() - before) / (1 << 20),
                  static_cast<unsigned long long>(pools.counters().blocks_tracked.load()));
    }
  }
}

// The flatness band for part 2's server: the memtables, plus one pool's
// worth of (resident + ghost bound) blocks at the bytes per block part 1
// measures for the policy (lru about 21 MiB, learned about 81 MiB).
double FlatBandMib(const Flags& f) {
  const uint64_t ghosts = f.ghost_blocks > 0 ? f.ghost_blocks : NodePoolsOptions{}.ghost_blocks;
  const double per_block = MeasureBytesPerBlock(f.policy, v1::TIER_POOL).second;
  const double band =
      kMemtablesMib + static_cast<double>(f.resident + ghosts) * per_block / (1 << 20);
  std::printf(
      "band: %.0f MiB = %.0f (memtables) + (%llu resident + %llu ghost bound) blocks x %.1f B "
      "(%s, measured as in part 1)\n",
      band, kMemtablesMib, static_cast<unsigned long long>(f.resident),
      static_cast<unsigned long long>(ghosts), per_block, f.policy.c_str());
  return band;
}

uint64_t RssKib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  while (in >> key) {
    if (key == "VmRSS:") {
      uint64_t kib = 0;
      in >> kib;
      return kib;
    }
    std::getline(in, key);
  }
  return 0;
}

// Prints whether the RSS samples taken after `warmup` ids are flat (see
// the band, kFlatSlopeMib) and returns it.
bool FlatVerdict(const std::vector<std::pair<uint64_t, double>>& samples, uint64_t warmup,
                 double band_mib) {
  if (samples.size() < 3) {
    std::printf("flat: not judged (fewer than 3 samples after the warm-up)\n");
    return true;
  }
  std::vector<double> rss;
  for (const auto& [ids, mib] : samples) rss.push_back(mib);
  std::sort(rss.begin(), rss.end());
  const size_t n = rss.size();
  const double median = n % 2 ? rss[n / 2] : (rss[n / 2 - 1] + rss[n / 2]) / 2;
  const double farthest = std::max(median - rss.front(), rss.back() - median);
  // Least squares of RSS on ids, in MiB per 10 M ids.
  double mean_x = 0, mean_y = 0;
  for (const auto& [ids, mib] : samples) {
    mean_x += static_cast<double>(ids) / 1e7;
    mean_y += mib;
  }
  mean_x /= static_cast<double>(n);
  mean_y /= static_cast<double>(n);
  double sxy = 0, sxx = 0;
  for (const auto& [ids, mib] : samples) {
    const double dx = static_cast<double>(ids) / 1e7 - mean_x;
    sxy += dx * (mib - mean_y);
    sxx += dx * dx;
  }
  const double slope = sxy / sxx;
  const bool flat = farthest <= band_mib && slope < kFlatSlopeMib;
  std::printf(
      "flat: %s (%zu samples after the first %llu ids: median %.1f MiB, farthest %.1f MiB "
      "from it, bound %.0f; slope %+.2f MiB per 10 M ids, bound %.0f)\n",
      flat ? "yes" : "no", n, static_cast<unsigned long long>(warmup), median, farthest, band_mib,
      slope, kFlatSlopeMib);
  return flat;
}

int RssOverTime(const Flags& f) {
  const double band_mib = f.band_mib > 0 ? static_cast<double>(f.band_mib) : FlatBandMib(f);
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("kvlearn_serve_memory_" + std::to_string(getpid())))
                              .string();
  std::filesystem::remove_all(dir);
  std::vector<std::string> args = {
      f.kvlearn, "serve",      "--listen", "127.0.0.1:0",     "--metrics-listen",
      "",        "--data-dir", dir,        "--log-max-bytes", std::to_string(f.log_max_bytes)};
  if (f.ghost_blocks > 0) {
    args.push_back("--ghost-blocks");
    args.push_back(std::to_string(f.ghost_blocks));
  }
  args.insert(args.end(), {"--policy", f.policy});
  if (!f.model.empty()) args.insert(args.end(), {"--model", f.model});
  int out[2];
  if (pipe(out) != 0) return 1;
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, STDERR_FILENO);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(f.kvlearn.c_str(), argv.data());
    _exit(127);
  }
  close(out[1]);
  std::string line;
  char ch;
  pollfd p{out[0], POLLIN, 0};
  while (line.find('\n') == std::string::npos && poll(&p, 1, 60'000) > 0 &&
         read(out[0], &ch, 1) == 1) {
    line += ch;
  }
  int port = 0;
  if (std::sscanf(line.c_str(), "port %d", &port) != 1) {
    std::fprintf(stderr, "serve_memory: %s serve did not start\n", f.kvlearn.c_str());
    return 1;
  }
  auto stub = v1::Retention::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  auto tracked = [&stub] {
    grpc::ClientContext ctx;
    v1::GetStatusResponse st;
    stub->GetStatus(&ctx, {}, &st);
    uint64_t n = 0;
    for (const auto& pool : st.pools()) n += pool.blocks_tracked();
    return n;
  };
  std::printf("part 2: kvlearn serve (%s), %llu distinct ids, %llu blocks resident\n",
              f.policy.c_str(), static_cast<unsigned long long>(f.ids),
              static_cast<unsigned long long>(f.resident));
  std::printf("%14s %10s %14s\n", "ids_sent", "rss_mib", "blocks_tracked");
  std::printf("%14d %10.1f %14d\n", 0, RssKib(pid) / 1024.0, 0);
  grpc::ClientContext ctx;
  v1::ReportSummary summary;
  auto writer = stub->ReportEvents(&ctx, &summary);
  const uint64_t chains = f.ids / kChain;
  const uint64_t chains_per_sample = std::max<uint64_t>(1, f.sample_every / kChain);
  std::vector<double> samples;
  std::vector<std::pair<uint64_t, double>> after_warmup;  // (ids sent, RSS MiB)
  v1::EventBatch batch;
  for (uint64_t c = 0; c < chains; ++c) {
    AddMemoryChain(batch, c, f.resident);
    if (batch.events_size() >= 3000 || c + 1 == chains || (c + 1) % chains_per_sample == 0) {
      if (!writer->Write(batch)) break;
      batch.Clear();
    }
    if ((c + 1) % chains_per_sample == 0 || c + 1 == chains) {
      // Writes are acknowledged per message, not applied: wait for the pool
      // to catch up (GetStatus counts requests) before sampling.
      const uint64_t want = c + 1;
      for (int i = 0; i < 10'000; ++i) {
        grpc::ClientContext sctx;
        v1::GetStatusResponse st;
        stub->GetStatus(&sctx, {}, &st);
        if (st.pools_size() > 0 && st.pools(0).requests() >= want) break;
        usleep(1000);
      }
      const double rss = RssKib(pid) / 1024.0;
      samples.push_back(rss);
      if ((c + 1) * kChain > f.ids / 5) after_warmup.emplace_back((c + 1) * kChain, rss);
      std::printf("%14llu %10.1f %14llu\n", static_cast<unsigned long long>((c + 1) * kChain), rss,
                  static_cast<unsigned long long>(tracked()));
      std::fflush(stdout);
    }
  }
  writer->WritesDone();
  const grpc::Status done = writer->Finish();
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  std::filesystem::remove_all(dir);
  if (!done.ok()) {
    std::fprintf(stderr, "serve_memory: ReportEvents: %s\n", done.error_message().c_str());
    return 1;
  }
  if (samples.size() >= 2) {
    const auto [low, high] = std::minmax_element(samples.begin() + 1, samples.end());
    std::printf(
        "rss after the warm-up sample: %.1f to %.1f MiB (last %.1f); %llu events "
        "accepted, %llu refused\n",
        *low, *high, samples.back(), static_cast<unsigned long long>(summary.accepted()),
        static_cast<unsigned long long>(summary.rejected()));
  }
  return FlatVerdict(after_warmup, f.ids / 5, band_mib) ? 0 : 3;
}

}  // namespace
}  // namespace kvlearn

int main(int argc, char** argv) {
  kvlearn::Flags f;
  bool only_part1 = false;
  bool only_part2 = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](uint64_t& v) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "serve_memory: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      v = std::stoull(argv[++i]);
    };
    if (a == "--kvlearn" && i + 1 < argc) {
      f.kvlearn = argv[++i];
    } else if (a == "--ids") {
      value(f.ids);
    } else if (a == "--resident") {
      value(f.resident);
    } else if (a == "--sample-every") {
      value(f.sample_every);
    } else if (a == "--ghost-blocks") {
      value(f.ghost_blocks);
    } else if (a == "--log-max-bytes") {
      value(f.log_max_bytes);
    } else if (a == "--band-mib") {
      value(f.band_mib);
    } else if (a == "--heap-ids") {
      value(f.heap_ids);
    } else if (a == "--policy" && i + 1 < argc) {
      f.policy = argv[++i];
    } else if (a == "--model" && i + 1 < argc) {
      f.model = argv[++i];
    } else if (a == "--part1-only") {
      only_part1 = true;
    } else if (a == "--part2-only") {
      only_part2 = true;
    } else if (a == "--help" || a == "-h") {
      std::printf("%s", kvlearn::kUsage);
      return 0;
    } else {
      std::fprintf(stderr, "serve_memory: unknown flag %s\n%s", a.c_str(), kvlearn::kUsage);
      return 2;
    }
  }
  if (!only_part2) {
    kvlearn::BytesPerBlock();
    kvlearn::HeapOverTime(f.heap_ids);
  }
  if (only_part1) return 0;
  if (f.kvlearn.empty()) {
    std::fprintf(stderr, "serve_memory: --kvlearn PATH (the kvlearn binary) is required\n");
    return 2;
  }
  return kvlearn::RssOverTime(f);
}
