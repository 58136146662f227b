#include "server/metrics_http_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <list>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kvlearn {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxHeaderBytes = 8 << 10;

struct Connection {
  int fd = -1;
  Clock::time_point deadline;
  std::string in;   // the request so far
  std::string out;  // the answer, once the request is whole
  size_t sent = 0;
  bool answering() const { return !out.empty(); }
};

std::string Answer(int code, const char* reason, const char* content_type, const std::string& body,
                   bool head) {
  std::string out =
      absl::StrCat("HTTP/1.1 ", code, " ", reason, "\r\nContent-Type: ", content_type,
                   "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n");
  if (!head) out += body;
  return out;
}

void SetNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) | O_NONBLOCK); }

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const MetricsHttpOptions& options, Render render) {
  std::unique_ptr<MetricsHttpServer> s(new MetricsHttpServer(options, std::move(render)));
  const std::string where = absl::StrCat(options.host, ":", options.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(options.port);
  if (const int rc = getaddrinfo(options.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.flag, ": cannot resolve ", where, ": ", gai_strerror(rc)));
  }
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr && s->listen_fd_ < 0; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    // SO_REUSEADDR lets a restart bind while old connections sit in
    // TIME_WAIT; without SO_REUSEPORT a live listener keeps the port.
    const int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 128) == 0) {
      s->listen_fd_ = fd;
    } else {
      why = std::strerror(errno);
      close(fd);
    }
  }
  freeaddrinfo(found);
  if (s->listen_fd_ < 0) {
    return absl::UnavailableError(absl::StrCat(options.flag, ": cannot listen on ", where, ": ",
                                               why, " (another process may hold the port)"));
  }
  SetNonBlocking(s->listen_fd_);
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(s->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  s->port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  s->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s->wake_fd_ < 0) {
    return absl::InternalError(absl::StrCat(options.flag, ": eventfd: ", std::strerror(errno)));
  }
  MetricsHttpServer* self = s.get();
  s->thread_ = std::thread([self] { self->Loop(); });
  return s;
}

MetricsHttpServer::~MetricsHttpServer() {
  Stop();
  if (listen_fd_ >= 0) close(listen_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

void MetricsHttpServer::Stop() {
  if (stopping_.exchange(true)) {
    if (thread_.joinable()) thread_.join();
    return;
  }
  const uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
}

void MetricsHttpServer::Loop() {
  const auto timeout = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options_.request_timeout_seconds));
  // Oldest first: the deadlines increase along the list.
  std::list<Connection> connections;
  std::vector<pollfd> polled;
  std::vector<std::list<Connection>::iterator> polled_connection;
  auto drop = [&](std::list<Connection>::iterator it) {
    close(it->fd);
    return connections.erase(it);
  };
  while (!stopping_.load(std::memory_order_acquire)) {
    polled.clear();
    polled_connection.clear();
    polled.push_back({wake_fd_, POLLIN, 0});
    polled.push_back({listen_fd_, POLLIN, 0});
    for (auto it = connections.begin(); it != connections.end(); ++it) {
      polled.push_back({it->fd, static_cast<short>(it->answering() ? POLLOUT : POLLIN), 0});
      polled_connection.push_back(it);
    }
    int wait_ms = 1000;
    if (!connections.empty()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          connections.front().deadline - Clock::now());
      wait_ms = static_cast<int>(std::clamp<int64_t>(left.count() + 1, 0, 1000));
    }
    if (poll(polled.data(), polled.size(), wait_ms) < 0 && errno != EINTR) break;
    if (stopping_.load(std::memory_order_acquire)) break;

    for (size_t i = 2; i < polled.size(); ++i) {
      if (polled[i].revents == 0) continue;
      Connection& c = *polled_connection[i - 2];
      if (!c.answering()) {
        char buf[4096];
        const ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
          c.deadline = Clock::time_point::min();  // gone: closed below, not counted
          continue;
        }
        if (n > 0) c.in.append(buf, static_cast<size_t>(n));
        const size_t end = c.in.find("\r\n\r\n");
        if (end == std::string::npos) {
          if (c.in.size() > kMaxHeaderBytes) {
            c.out = Answer(431, "Request Header Fields Too Large", "text/plain", "", false);
          }
        } else {
          const std::string_view line(c.in.data(), c.in.find("\r\n"));
          const size_t sp1 = line.find(' ');
          const size_t sp2 = line.find(' ', sp1 == std::string_view::npos ? 0 : sp1 + 1);
          const std::string_view method = line.substr(0, sp1);
          std::string_view target = sp1 == std::string_view::npos
                                        ? std::string_view()
                                        : line.substr(sp1 + 1, sp2 - sp1 - 1);
          target = target.substr(0, target.find('?'));
          const bool head = method == "HEAD";
          if (method != "GET" && !head) {
            c.out = Answer(405, "Method Not Allowed", "text/plain", "", false);
          } else if (target != "/metrics") {
            c.out = Answer(404, "Not Found", "text/plain", "", head);
          } else {
            c.out =
                Answer(200, "OK", "text/plain; version=0.0.4; charset=utf-8", render_(*this), head);
          }
        }
      }
      if (c.answering()) {
        const ssize_t n = send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
        if (n > 0) c.sent += static_cast<size_t>(n);
        if (c.sent == c.out.size()) {
          answered_.fetch_add(1, std::memory_order_relaxed);
          c.deadline = Clock::time_point::min();  // done: closed below
        } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
          c.deadline = Clock::time_point::min();
        }
      }
    }
    // Closed, finished and late connections go; only the late are counted.
    const auto now = Clock::now();
    for (auto it = connections.begin(); it != connections.end();) {
      if (it->deadline == Clock::time_point::min()) {
        it = drop(it);
      } else if (it->deadline <= now) {
        cut_.fetch_add(1, std::memory_order_relaxed);
        it = drop(it);
      } else {
        ++it;
      }
    }

    if (polled[1].revents != 0) {
      for (;;) {
        const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        if (static_cast<int>(connections.size()) >= options_.max_connections) {
          // Room for the newcomer: the oldest still sending its request.
          auto oldest = std::find_if(connections.begin(), connections.end(),
                                     [](const Connection& c) { return !c.answering(); });
          if (oldest == connections.end()) {
            close(fd);  // all being answered: they finish soon
            cut_.fetch_add(1, std::memory_order_relaxed);
            continue;
          }
          drop(oldest);
          cut_.fetch_add(1, std::memory_order_relaxed);
        }
        connections.push_back({fd, Clock::now() + timeout, {}, {}, 0});
      }
    }
  }
  for (auto it = connections.begin(); it != connections.end();) it = drop(it);
}

}  // namespace kvlearn
