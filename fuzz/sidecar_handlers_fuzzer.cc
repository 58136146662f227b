// Fuzzes the sidecar's handlers without gRPC: the input is a policy selector
// and a sequence of records, each a kind byte, a 2-byte length and that many
// bytes parsed as the kind's protobuf message:
//
//   byte 0             policy: lru, learned, lfu, fifo, gdsf, s3fifo,
//                      kvlearn-cars, no-cache (mod 8)
//   then per record    kind (mod 3: EventBatch, AdmitRequest, RankRequest),
//                      length (little-endian uint16), message bytes
//
// Each parsed message goes to one NodePools (the sidecar's state), exactly as
// the RPC handlers hand it over: every event of a batch to Apply, the others
// to Admit / RankEviction. Bytes that do not parse are skipped. Whatever the
// input, nothing may crash, and after every record the counters /metrics
// reads must equal the pools' own totals (GetStatus).
#include <google/protobuf/stubs/logging.h>

#include <cstdint>
#include <cstdlib>
#include <memory>

#include "core/cost_model.h"
#include "kvlearn/v1/retention.pb.h"
#include "server/node_pools.h"
#include "tests/support/test_model.h"

namespace {

using kvlearn::NodePools;
using kvlearn::NodePoolsOptions;

constexpr const char* kPolicies[] = {"lru",  "learned", "lfu",          "fifo",
                                     "gdsf", "s3fifo",  "kvlearn-cars", "no-cache"};

void Check(bool ok) {
  if (!ok) std::abort();
}

const std::shared_ptr<const kvlearn::CostModel>& Cost() {
  static const auto* cost =
      new std::shared_ptr<const kvlearn::CostModel>(std::make_shared<kvlearn::CostModel>(
          *kvlearn::FindModelProfile("llama3-8b"), *kvlearn::FindHardwareProfile("a100")));
  return *cost;
}

const std::shared_ptr<const kvlearn::LearnedModel>& Model() {
  static const auto* model =
      new std::shared_ptr<const kvlearn::LearnedModel>(kvlearn::MakeTestModel());
  return *model;
}

// The counters behind /metrics agree with what the pools report.
void CheckCounters(const NodePools& pools) {
  kvlearn::v1::GetStatusResponse status;
  pools.FillStatus(status);
  uint64_t tracked = 0, resident = 0, bytes = 0;
  for (const auto& p : status.pools()) {
    tracked += p.blocks_tracked();
    resident += p.resident_blocks();
    bytes += p.resident_bytes();
  }
  const kvlearn::PoolCounters& c = pools.counters();
  Check(c.shards.load() == static_cast<uint64_t>(status.pools_size()));
  Check(c.blocks_tracked.load() == tracked);
  Check(c.resident_blocks.load() == resident);
  Check(c.resident_bytes.load() == bytes);
}

}  // namespace

// Protobuf logs every string field that is not UTF-8; quiet, or the log is
// all the fuzzer prints.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  NodePoolsOptions options;
  options.policy = kPolicies[data[0] % 8];
  options.model = Model();
  options.cost = Cost();
  options.max_candidates = 64;
  options.default_pool_bytes = (data[0] & 0x80) ? (uint64_t{1} << 32) : 0;
  NodePools pools(options);
  size_t at = 1;
  while (at + 3 <= size) {
    const int kind = data[at] % 3;
    const size_t length = data[at + 1] | (size_t{data[at + 2]} << 8);
    at += 3;
    const size_t n = length < size - at ? length : size - at;
    const uint8_t* bytes = data + at;
    at += n;
    if (kind == 0) {
      kvlearn::v1::EventBatch batch;
      if (!batch.ParseFromArray(bytes, static_cast<int>(n))) continue;
      for (const auto& e : batch.events()) {
        const absl::Status s = pools.Apply(e);
        Check(s.ok() || !s.message().empty());
      }
    } else if (kind == 1) {
      kvlearn::v1::AdmitRequest request;
      if (!request.ParseFromArray(bytes, static_cast<int>(n))) continue;
      auto response = pools.Admit(request);
      if (response.ok()) Check(response->decisions_size() == request.candidates_size());
    } else {
      kvlearn::v1::RankRequest request;
      if (!request.ParseFromArray(bytes, static_cast<int>(n))) continue;
      auto response = pools.RankEviction(request);
      if (response.ok()) {
        int64_t freed = 0;
        for (const auto& v : response->victims()) freed += v.bytes();
        Check(freed == response->bytes_freed());
      }
    }
    CheckCounters(pools);
  }
  return 0;
}
