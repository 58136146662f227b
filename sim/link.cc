#include "sim/link.h"

#include <algorithm>

namespace kvlearn {

void Link::AdvanceTo(double t) {
  if (t <= now_ms_) return;
  if (!heap_.empty()) virtual_bytes_ += (t - now_ms_) * bytes_per_ms_ / heap_.size();
  now_ms_ = t;
}

void Link::Start(double now_ms, uint64_t bytes, uint64_t tag) {
  AdvanceTo(now_ms);
  heap_.push({virtual_bytes_ + static_cast<double>(bytes), transfers_++, bytes, tag});
  started_bytes_ += bytes;
}

double Link::NextCompletionMs() const {
  if (heap_.empty()) return std::numeric_limits<double>::infinity();
  const double left = std::max(0.0, heap_.top().finish_v - virtual_bytes_);
  return now_ms_ + left * heap_.size() / bytes_per_ms_;
}

uint64_t Link::PopCompletion() {
  const Pending done = heap_.top();
  const double t = NextCompletionMs();
  AdvanceTo(t);
  // Pin virtual time to the tag so rounding cannot leave a sliver behind.
  virtual_bytes_ = std::max(virtual_bytes_, done.finish_v);
  heap_.pop();
  completed_bytes_ += done.bytes;
  return done.tag;
}

}  // namespace kvlearn
