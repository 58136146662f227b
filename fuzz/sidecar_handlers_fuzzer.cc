// Fuzzes the sidecar's handlers without gRPC: the input is a policy selector
// and a sequence of records, each a kind byte, a 2-byte length and that many
// bytes parsed as the kind's protobuf message:
//
//   byte 0             policy: lru, learned, lfu, fifo, gdsf, s3fifo,
//                      kvlearn-cars, no-cache, sieve, arc,
//                      learned-model (mod 11)
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

#include "fuzz_support.h"
#include "kvlearn/v1/retention.pb.h"
#include "server/node_pools.h"

namespace {

using kvlearn::fuzz::Check;
using kvlearn::fuzz::CheckCounters;

// The seeds' selector bytes (0 to 7) name the first eight; later policies
// are appended so those bytes keep their policy.
constexpr const char* kPolicies[] = {"lru",   "learned", "lfu",          "fifo",
                                     "gdsf",  "s3fifo",  "kvlearn-cars", "no-cache",
                                     "sieve", "arc",     "learned-model"};
constexpr size_t kPolicyCount = sizeof(kPolicies) / sizeof(kPolicies[0]);

}  // namespace

// Protobuf logs every string field that is not UTF-8; quiet, or the log is
// all the fuzzer prints.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  kvlearn::NodePoolsOptions options = kvlearn::fuzz::Options(kPolicies[data[0] % kPolicyCount]);
  options.default_pool_bytes = (data[0] & 0x80) ? (uint64_t{1} << 32) : 0;
  kvlearn::NodePools pools(options);
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
      if (response.ok()) kvlearn::fuzz::CheckVictimsAddUp(*response);
    }
    CheckCounters(pools);
  }
  return 0;
}
