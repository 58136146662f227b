// The loopback check resolves the host and requires every address to be
// loopback; it is not a text match ("127.evil.example" used to pass as text).
#include "server/loopback_address.h"

#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <unistd.h>

#include <string>

namespace kvlearn {
namespace {

TEST(LoopbackAddressTest, LoopbackAddressesAndLocalhostPass) {
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1:50051"));
  EXPECT_TRUE(IsLoopbackAddress("127.1.2.3:0"));
  EXPECT_TRUE(IsLoopbackAddress("[::1]:1"));
  EXPECT_TRUE(IsLoopbackAddress("[::ffff:127.0.0.1]:1"));
  EXPECT_TRUE(IsLoopbackAddress("localhost:1"));  // resolves to 127.0.0.1 (and ::1)
}

TEST(LoopbackAddressTest, EverythingElseIsRefused) {
  for (const char* listen : {"0.0.0.0:1", "[::]:1", ":1", "10.0.0.1:1", "128.0.0.1:1",
                             "[::ffff:10.0.0.1]:1", "[::2]:1", "127.0.0.1", "127.0.0.1:x"}) {
    EXPECT_FALSE(IsLoopbackAddress(listen)) << listen;
  }
  // A name is resolved, not read: one that does not resolve is not loopback
  // ("invalid" is reserved, RFC 6761, so no resolver answers for it).
  EXPECT_FALSE(IsLoopbackHost("127.0.0.1.invalid"));
  EXPECT_FALSE(IsLoopbackHost(""));
}

// Every address of this machine's interfaces but 127.x / ::1 is one that
// others reach; each must be refused, numeric or through the machine's name.
TEST(LoopbackAddressTest, ThisMachinesOwnAddressesAreNotLoopback) {
  ifaddrs* all = nullptr;
  ASSERT_EQ(getifaddrs(&all), 0);
  int checked = 0;
  for (const ifaddrs* i = all; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr ||
        (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)) {
      continue;
    }
    char host[NI_MAXHOST] = {};
    const socklen_t len =
        i->ifa_addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    if (getnameinfo(i->ifa_addr, len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0) {
      continue;
    }
    const std::string h(host);
    if (h.rfind("127.", 0) == 0 || h == "::1" || h.find('%') != std::string::npos) continue;
    EXPECT_FALSE(IsLoopbackHost(h)) << h;
    ++checked;
  }
  freeifaddrs(all);
  // The machine's name: loopback only if it resolves to loopback only.
  char name[256] = {};
  ASSERT_EQ(gethostname(name, sizeof(name) - 1), 0);
  addrinfo* found = nullptr;
  if (getaddrinfo(name, nullptr, nullptr, &found) == 0) {
    bool elsewhere = false;
    for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
      char host[NI_MAXHOST] = {};
      getnameinfo(a->ai_addr, a->ai_addrlen, host, sizeof(host), nullptr, 0, NI_NUMERICHOST);
      const std::string h(host);
      elsewhere = elsewhere || (h.rfind("127.", 0) != 0 && h != "::1");
    }
    freeaddrinfo(found);
    EXPECT_EQ(IsLoopbackHost(name), !elsewhere) << name;
  }
  if (checked == 0) GTEST_SKIP() << "no interface address other than loopback";
}

TEST(LoopbackAddressTest, PeersAreReadAsNumbers) {
  for (const char* peer : {"ipv4:127.0.0.1:5000", "ipv4:127.9.9.9:1", "ipv6:[::1]:5000",
                           "ipv6:%5B::1%5D:5000", "ipv6:[::ffff:127.0.0.1]:1", "unix:/tmp/s"}) {
    EXPECT_TRUE(IsLoopbackPeer(peer)) << peer;
  }
  for (const char* peer : {"ipv4:10.1.2.3:5000", "ipv6:[fe80::1]:5000", "ipv6:%5B::2%5D:1",
                           "ipv4:localhost:1", "ipv4:127.0.0.1", "", "garbage"}) {
    EXPECT_FALSE(IsLoopbackPeer(peer)) << peer;
  }
}

}  // namespace
}  // namespace kvlearn
