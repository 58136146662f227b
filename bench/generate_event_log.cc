// Writes a synthetic sidecar event log of N request arrivals, streaming (its
// memory does not grow with N), to measure `kvlearn train --data-dir` on logs
// larger than any trace file: scripts/bench_train_log.sh, docs/training.md
// ("Sampling").
//
// Traffic: conversations. Each starts on one of 16 one-block system prompts
// and re-reads its whole prompt at every turn, which adds 1 to 3 blocks (the
// first turn 1 to 6); after a turn it ends with probability 1/4, or at 24
// blocks. --active conversations run at once, each event picks one of them
// uniformly, and arrivals come at --rate per second (exponential gaps), so a
// conversation's turns are about active / rate seconds apart.
//
// usage: generate_event_log --dir D --events N [--seed 1] [--active 20000] [--rate 500]
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "kvlearn/v1/retention.pb.h"
#include "server/event_log.h"

namespace {

constexpr uint64_t kSystemPrompts = 16;
constexpr uint32_t kMaxBlocks = 24;
// Conversation c's block at depth d (>= 1) is c * kIdStride + d: ids stay
// small (short varints) and never collide with the prompts' 1..16.
constexpr uint64_t kIdStride = 32;

struct Conversation {
  uint64_t id = 0;
  uint64_t prompt = 0;
  uint32_t blocks = 0;  // read so far, the prompt included
};

int Usage() {
  std::cerr << "usage: generate_event_log --dir D --events N [--seed 1] [--active 20000] "
               "[--rate 500]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  uint64_t events = 0, seed = 1, active = 20000;
  double rate = 500;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view flag = argv[i];
    const char* value = argv[i + 1];
    if (flag == "--dir") {
      dir = value;
    } else if (flag == "--events") {
      events = std::strtoull(value, nullptr, 10);
    } else if (flag == "--seed") {
      seed = std::strtoull(value, nullptr, 10);
    } else if (flag == "--active") {
      active = std::strtoull(value, nullptr, 10);
    } else if (flag == "--rate") {
      rate = std::strtod(value, nullptr);
    } else {
      return Usage();
    }
  }
  if (dir.empty() || events == 0 || active == 0 || !(rate > 0) || argc % 2 == 0) return Usage();
  auto log = kvlearn::EventLog::Open(dir, {});
  if (!log.ok()) {
    std::cerr << log.status() << "\n";
    return 1;
  }
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap_s(rate);
  std::uniform_int_distribution<uint64_t> pick(0, active - 1);
  uint64_t next_conversation = 1;
  const auto start = [&] {
    Conversation c;
    c.id = next_conversation++;
    c.prompt = 1 + rng() % kSystemPrompts;
    return c;
  };
  std::vector<Conversation> running(active);
  for (auto& c : running) c = start();

  constexpr size_t kBatch = 1000;
  std::vector<std::string> batch;
  batch.reserve(kBatch);
  kvlearn::v1::Event e;
  e.set_node_id("gen-0");
  double now_s = 0;
  for (uint64_t n = 0; n < events; ++n) {
    Conversation& c = running[pick(rng)];
    const uint32_t added = c.blocks == 0 ? 1 + rng() % 6 : 1 + rng() % 3;
    const uint32_t blocks = std::min(kMaxBlocks, (c.blocks == 0 ? 1 : c.blocks) + added);
    now_s += gap_s(rng);
    e.set_timestamp_us(static_cast<int64_t>(now_s * 1e6));
    auto* arrival = e.mutable_request_arrival();
    arrival->Clear();
    arrival->add_block_ids(c.prompt);
    for (uint32_t d = 1; d < blocks; ++d) arrival->add_block_ids(c.id * kIdStride + d);
    arrival->set_input_length(int64_t{blocks} * 512);
    arrival->set_output_length(200);
    batch.push_back(e.SerializeAsString());
    c.blocks = blocks;
    if (blocks == kMaxBlocks || rng() % 4 == 0) c = start();
    if (batch.size() == kBatch || n + 1 == events) {
      if (auto s = (*log)->Append(batch); !s.ok()) {
        std::cerr << s.status() << "\n";
        return 1;
      }
      batch.clear();
    }
    if ((n + 1) % 10'000'000 == 0) std::cerr << (n + 1) << " events written\n";
  }
  std::cout << "wrote " << events << " request arrivals (" << next_conversation - 1
            << " conversations, " << now_s << " s of traffic) to " << dir << "\n";
  return 0;
}
