#include "server/loopback_address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace kvlearn {
namespace {

bool IsLoopbackV4(const in_addr& a) { return (ntohl(a.s_addr) >> 24) == 127; }

bool IsLoopbackV6(const in6_addr& a) {
  if (IN6_IS_ADDR_LOOPBACK(&a)) return true;
  if (!IN6_IS_ADDR_V4MAPPED(&a)) return false;
  in_addr v4;
  std::memcpy(&v4, &a.s6_addr[12], sizeof(v4));
  return IsLoopbackV4(v4);
}

bool IsLoopbackSockaddr(const sockaddr* sa) {
  if (sa->sa_family == AF_INET)
    return IsLoopbackV4(reinterpret_cast<const sockaddr_in*>(sa)->sin_addr);
  if (sa->sa_family == AF_INET6) {
    return IsLoopbackV6(reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr);
  }
  return false;
}

}  // namespace

absl::Status SplitHostPort(absl::string_view listen, std::string& host, int& port,
                           absl::string_view flag) {
  const size_t colon = listen.rfind(':');
  if (colon == absl::string_view::npos || colon + 1 == listen.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": expected HOST:PORT, got '", listen, "'"));
  }
  host = std::string(listen.substr(0, colon));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (!absl::SimpleAtoi(listen.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": bad port in '", listen, "'"));
  }
  return absl::OkStatus();
}

bool IsLoopbackHost(const std::string& host) {
  if (host.empty()) return false;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return false;
  bool all_loopback = true;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    all_loopback = all_loopback && IsLoopbackSockaddr(a->ai_addr);
  }
  freeaddrinfo(found);
  return all_loopback;
}

bool IsLoopbackAddress(absl::string_view listen) {
  std::string host;
  int port = 0;
  return SplitHostPort(listen, host, port, "").ok() && IsLoopbackHost(host);
}

bool IsLoopbackPeer(absl::string_view peer) {
  if (absl::StartsWith(peer, "unix:") || absl::StartsWith(peer, "unix-abstract:")) return true;
  std::string host;
  int port = 0;
  if (absl::ConsumePrefix(&peer, "ipv4:")) {
    in_addr a;
    return SplitHostPort(peer, host, port, "").ok() && inet_pton(AF_INET, host.c_str(), &a) == 1 &&
           IsLoopbackV4(a);
  }
  if (absl::ConsumePrefix(&peer, "ipv6:")) {
    in6_addr a;
    // gRPC percent-encodes the brackets of an IPv6 peer: "ipv6:%5B::1%5D:5000".
    std::string decoded(peer);
    for (const auto& [from, to] : {std::pair{"%5B", "["}, std::pair{"%5D", "]"}}) {
      for (size_t at = decoded.find(from); at != std::string::npos; at = decoded.find(from)) {
        decoded.replace(at, 3, to);
      }
    }
    return SplitHostPort(decoded, host, port, "").ok() &&
           inet_pton(AF_INET6, host.c_str(), &a) == 1 && IsLoopbackV6(a);
  }
  return false;
}

}  // namespace kvlearn
