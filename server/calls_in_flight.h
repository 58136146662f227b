// The RPC handlers and ReportEvents streams that may still touch the
// server's objects (pools, event log, metrics, counters, access control),
// so that SidecarServer::Shutdown destroys those only after the last call
// has let go of them.
//
// grpc::Server::Shutdown already waits for every call, but it waits inside
// libgrpc, which Debian does not build with ThreadSanitizer: that order is
// invisible to it, and each destruction after Shutdown was reported as a
// race with the handler's last access. Leave and WaitUntilNone meet on a
// std::mutex, which ThreadSanitizer intercepts, so the handler's accesses
// are seen to happen before the destruction. The wait also covers what
// gRPC's wait does not promise: a stream's work around its Finish.
//
// A unary handler is one Scope; a stream enters when its reactor is made
// and leaves after its last use of the server's objects (End).
//
// Thread-safety: every method may be called concurrently.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace kvlearn {

class CallsInFlight {
 public:
  void Enter();
  // The caller's last access to the server's objects; after it the
  // caller touches nothing of this object either (the server may then
  // destroy it).
  void Leave();
  // True once none is in flight; false if `timeout` passed first.
  bool WaitUntilNone(std::chrono::milliseconds timeout);
  uint64_t in_flight() const;

  // Enter for a scope's lifetime.
  class Scope {
   public:
    explicit Scope(CallsInFlight* calls) : calls_(calls) {
      if (calls_ != nullptr) calls_->Enter();
    }
    ~Scope() {
      if (calls_ != nullptr) calls_->Leave();
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    CallsInFlight* const calls_;
  };

 private:
  mutable std::mutex mu_;
  std::condition_variable none_;
  uint64_t in_flight_ = 0;  // guarded by mu_
};

}  // namespace kvlearn
