// The sidecar's /metrics endpoint: a small HTTP/1.1 server on one thread that
// answers `GET /metrics` with the text its Render callback returns, and
// nothing else (404 for other paths, 405 for other methods).
//
// Why not cpp-httplib: it serves a connection on one worker thread from
// accept to close and bounds each read, not the request, so a client sending
// a header byte every 1.5 s kept a worker for as long as it liked, and 32 of
// them kept every scrape waiting (with its 32 workers). Here no connection
// holds a thread: one poll() loop serves every connection with non-blocking
// sockets, and each is bounded:
//  - a connection lives at most `request_timeout_seconds` from accept to the
//    last byte of its answer, then is closed (counted in connections_cut);
//  - at most `max_connections` are open; one more closes the oldest one
//    still sending its request (counted), so slow clients cannot keep a new
//    scrape out; a connection being answered is never closed for room;
//  - a request's header is at most 8 KiB (431 past it);
//  - one request per connection (`Connection: close`), as Prometheus expects
//    of a target that says so.
// The listening socket sets SO_REUSEADDR only (httplib set SO_REUSEPORT, so a
// second server bound the same port and took half the scrapes): a port
// another process listens on is refused at Start, naming it.
//
// Thread-safety: Start, Stop and the counters may be called from any thread;
// Render is called on the server's thread, one call at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace kvlearn {

struct MetricsHttpOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0 picks a free one
  // For the error messages ("--metrics-listen: ...").
  std::string flag = "--metrics-listen";
  int max_connections = 64;
  double request_timeout_seconds = 5;
};

class MetricsHttpServer {
 public:
  // The body of a GET /metrics; gets the server itself (its counters are
  // part of the answer, and the call can come before Start returns).
  using Render = std::function<std::string(const MetricsHttpServer& server)>;

  // Binds and starts serving. UNAVAILABLE naming the flag and HOST:PORT when
  // the port cannot be bound (another process holds it, say).
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const MetricsHttpOptions& options,
                                                                  Render render);
  ~MetricsHttpServer();  // Stop()

  int port() const { return port_; }
  // Closes the listening socket and every connection; returns once the
  // server's thread has ended. Idempotent.
  void Stop();

  // Connections closed at their deadline or to make room for a new one.
  uint64_t connections_cut() const { return cut_.load(std::memory_order_relaxed); }
  // Requests answered (any status).
  uint64_t requests_answered() const { return answered_.load(std::memory_order_relaxed); }
  int max_connections() const { return options_.max_connections; }

 private:
  MetricsHttpServer(MetricsHttpOptions options, Render render)
      : options_(std::move(options)), render_(std::move(render)) {}
  void Loop();

  const MetricsHttpOptions options_;
  const Render render_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: Stop wakes the loop
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> cut_{0};
  std::atomic<uint64_t> answered_{0};
  std::thread thread_;
};

}  // namespace kvlearn
