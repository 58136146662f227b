// Replica membership in a JetStream key-value bucket with a TTL, and node
// ownership by rendezvous hashing: the hashing's invariants by themselves,
// then three members on a real nats-server (started on a free port; skipped,
// saying so, without the binary) that agree on every owner, lose a member
// that leaves at once and one that stops heartbeating after the TTL.
#include "server/replica_group.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/server/nats_server_process.h"
#include "tests/server/sidecar_fixture.h"

namespace kvlearn {
namespace {

std::vector<ReplicaMember> Members(std::vector<std::string> names) {
  std::vector<ReplicaMember> out;
  for (const std::string& n : names) out.push_back({n, n + ":50051"});
  return out;
}

std::string Node(int i) { return "node-" + std::to_string(i); }

TEST(RendezvousTest, EveryNodeHasOneOwnerAndALeavingMemberMovesOnlyItsOwn) {
  const auto three = Members({"a", "b", "c"});
  const auto two = Members({"a", "c"});  // b left
  std::map<std::string, int> owned;
  for (int i = 0; i < 3000; ++i) {
    const std::string node = Node(i);
    const ReplicaMember before = ReplicaGroup::Owner(three, node);
    ++owned[before.name];
    const ReplicaMember after = ReplicaGroup::Owner(two, node);
    if (before.name != "b") EXPECT_EQ(after, before) << node;  // stays where it was
    EXPECT_NE(after.name, "b");
    // The view's order does not matter.
    EXPECT_EQ(ReplicaGroup::Owner(Members({"c", "b", "a"}), node), before);
  }
  ASSERT_EQ(owned.size(), 3u);
  for (const auto& [name, n] : owned) {
    // A third each, give or take: a hash that sent most nodes to one member
    // would not spread the load.
    EXPECT_GT(n, 800) << name;
    EXPECT_LT(n, 1200) << name;
  }
  EXPECT_EQ(ReplicaGroup::Owner({}, "x").name, "");
}

TEST(RendezvousTest, ScoreIsFnv1aThenSplitMix) {
  // FNV-1a 64 of the empty string is its offset basis; SplitMix64's
  // finalizer of it, worked by hand from the constants, separately.
  uint64_t h = 0xcbf29ce484222325ull;
  h ^= 0;  // the '\0' between member and node
  h *= 0x100000001b3ull;
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  EXPECT_EQ(ReplicaGroup::Score("", ""), h);
  EXPECT_NE(ReplicaGroup::Score("a", "b"), ReplicaGroup::Score("b", "a"));
}

TEST(ReplicaGroupTest, MembersAgreeAndLeavingOrStoppingRemovesAMember) {
  TempDir store;
  NatsServerProcess nats(store.path());
  if (!nats.Found()) GTEST_SKIP() << NatsServerProcess::kSkipMessage;
  ASSERT_TRUE(nats.Start());
  std::vector<std::unique_ptr<ReplicaGroup>> group;
  for (const char* name : {"r1", "r2", "r3"}) {
    ReplicaGroupOptions o;
    o.connection.url = nats.url();
    o.name = name;
    o.address = std::string(name) + ".example:50051";
    o.ttl_seconds = 1;
    o.heartbeat_seconds = 0.2;
    auto joined = ReplicaGroup::Join(o);
    ASSERT_TRUE(joined.ok()) << joined.status();
    group.push_back(*std::move(joined));
  }
  const auto everyone_sees = [&](size_t n, size_t from) {
    return WaitUntil([&] {
      for (size_t i = from; i < group.size(); ++i) {
        if (group[i]->Members().size() != n) return false;
      }
      return true;
    });
  };
  ASSERT_TRUE(everyone_sees(3, 0));
  EXPECT_EQ(group[0]->Members()[1], (ReplicaMember{"r2", "r2.example:50051"}));
  for (int i = 0; i < 100; ++i) {
    const ReplicaMember owner = group[0]->OwnerOf(Node(i));
    EXPECT_EQ(group[1]->OwnerOf(Node(i)), owner);
    EXPECT_EQ(group[2]->OwnerOf(Node(i)), owner);
  }
  // Leaving deletes the key: the others see two at their next refresh.
  group[0]->Leave();
  ASSERT_TRUE(everyone_sees(2, 1));
  // Stopping without leaving (a killed replica): the TTL removes it.
  group[1]->StopHeartbeats();
  ASSERT_TRUE(everyone_sees(1, 2));
  EXPECT_EQ(group[2]->Members()[0].name, "r3");
  EXPECT_EQ(group[2]->OwnerOf("any").name, "r3");
}

}  // namespace
}  // namespace kvlearn
