// ReuseLabels: see reuse_labels.h.
#include "policies/kvlearn_cars/reuse_labels.h"

namespace kvlearn {
namespace {

// The FIFO drops its handled prefix once that is at least this long and half
// the queue, so memory stays proportional to the windows opened within H.
constexpr size_t kCompactOpeningsAt = 4096;

}  // namespace

ReuseLabels::ReuseLabels(const BlockCatalog& catalog, int64_t horizon_ms)
    : catalog_(catalog), horizon_ms_(horizon_ms) {
  GrowToCatalog();
}

void ReuseLabels::GrowToCatalog() {
  const size_t n = catalog_.size();
  if (n <= open_.size()) return;
  inputs_.resize(n);
  predicted_.resize(n, 0);
  generation_.resize(n, 0);
  open_.resize(n, 0);
}

void ReuseLabels::Open(BlockIndex b, const CarsRawInputs& inputs, float predicted, int64_t now_ms) {
  if (!open_[b]) {
    open_[b] = 1;
    open_bytes_ += catalog_[b].bytes;
  }
  inputs_[b] = inputs;
  predicted_[b] = predicted;
  openings_.push_back({now_ms, b, ++generation_[b]});
}

ReuseLabels::Label ReuseLabels::Close(BlockIndex b, bool reused) {
  open_[b] = 0;
  open_bytes_ -= catalog_[b].bytes;
  return {b, inputs_[b], predicted_[b], reused};
}

std::optional<ReuseLabels::Label> ReuseLabels::CloseNextExpired(int64_t now_ms) {
  while (head_ < openings_.size()) {
    const Opening o = openings_[head_];
    if (now_ms - o.start_ms <= horizon_ms_) break;
    ++head_;
    if (!open_[o.block] || generation_[o.block] != o.generation) continue;
    return Close(o.block, false);
  }
  if (head_ >= kCompactOpeningsAt && 2 * head_ >= openings_.size()) {
    openings_.erase(openings_.begin(), openings_.begin() + static_cast<ptrdiff_t>(head_));
    head_ = 0;
  }
  return std::nullopt;
}

}  // namespace kvlearn
