#include "server/calls_in_flight.h"

namespace kvlearn {

void CallsInFlight::Enter() {
  std::lock_guard<std::mutex> lock(mu_);
  ++in_flight_;
}

void CallsInFlight::Leave() {
  std::lock_guard<std::mutex> lock(mu_);
  // Notified under the lock: once the waiter can return (and the server
  // destroy this object), this call no longer touches it.
  if (--in_flight_ == 0) none_.notify_all();
}

bool CallsInFlight::WaitUntilNone(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return none_.wait_for(lock, timeout, [this] { return in_flight_ == 0; });
}

uint64_t CallsInFlight::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}

}  // namespace kvlearn
