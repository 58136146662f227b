#include "server/model_swap_record.h"

#include "core/varint.h"

namespace kvlearn {
namespace {

void PutString(std::string& out, std::string_view s) {
  PutVarint(out, s.size());
  out.append(s);
}

bool GetString(std::string_view& in, std::string& out) {
  uint64_t n = 0;
  if (!GetVarint(in, n) || n > in.size()) return false;
  out.assign(in.data(), n);
  in.remove_prefix(n);
  return true;
}

}  // namespace

std::string EncodeModelSwap(const ModelSwapRecord& swap) {
  std::string out(1, kModelSwapRecord);
  PutString(out, swap.path);
  PutString(out, swap.version);
  PutVarint(out, swap.pools.size());
  for (const auto& p : swap.pools) {
    PutString(out, p.node);
    PutVarint(out, static_cast<uint64_t>(p.tier));
    PutVarint(out, p.events_applied);
  }
  return out;
}

absl::StatusOr<ModelSwapRecord> DecodeModelSwap(std::string_view in) {
  const auto bad = [] { return absl::DataLossError("model-swap record is malformed"); };
  if (in.empty() || in[0] != kModelSwapRecord) return bad();
  in.remove_prefix(1);
  ModelSwapRecord swap;
  uint64_t pools = 0;
  if (!GetString(in, swap.path) || !GetString(in, swap.version) || !GetVarint(in, pools) ||
      pools > in.size()) {
    return bad();
  }
  swap.pools.resize(pools);
  for (auto& p : swap.pools) {
    uint64_t tier = 0;
    if (!GetString(in, p.node) || !GetVarint(in, tier) || !GetVarint(in, p.events_applied) ||
        !v1::Tier_IsValid(static_cast<int>(tier))) {
      return bad();
    }
    p.tier = static_cast<v1::Tier>(tier);
  }
  if (!in.empty()) return bad();
  return swap;
}

}  // namespace kvlearn
