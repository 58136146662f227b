// LearnedShadowPool on cases worked out by hand: blocks of one byte, the
// real pool's holdings given by a set the test controls.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "policies/learned/shadow_pool.h"

namespace kvlearn {
namespace {

// Blocks named by a letter and a digit: "x0" is a root, "x1" its child, ...
class Blocks {
 public:
  BlockIndex operator()(const std::string& name) {
    if (auto it = index_.find(name); it != index_.end()) return it->second;
    const BlockIndex parent =
        name[1] == '0' ? kNoBlock : (*this)(std::string{name[0], char(name[1] - 1)});
    const BlockIndex b = catalog.Add({.hash_id = catalog.size() + 1,
                                      .parent = parent,
                                      .depth = static_cast<uint32_t>(name[1] - '0'),
                                      .tokens = 1,
                                      .bytes = 1});
    index_[name] = b;
    names_[b] = name;
    return b;
  }
  std::vector<BlockIndex> Chain(std::initializer_list<const char*> names) {
    std::vector<BlockIndex> chain;
    for (const char* n : names) chain.push_back((*this)(n));
    return chain;
  }
  // The resident blocks' names, sorted.
  std::string Resident(const PoolState& pool) const {
    std::set<std::string> out;
    for (const auto& [b, name] : names_) {
      if (pool.IsResident(b)) out.insert(name);
    }
    std::string joined;
    for (const auto& n : out) joined += (joined.empty() ? "" : " ") + n;
    return joined;
  }

  BlockCatalog catalog;

 private:
  std::map<std::string, BlockIndex> index_;
  std::map<BlockIndex, std::string> names_;
};

// One request: the real pool holds `held` when it arrives (so the shadow
// copies the previous request's admissions from it); the shadow then has
// `hits` hits and holds `resident`.
struct Step {
  std::vector<BlockIndex> chain;
  std::set<BlockIndex> held;
  size_t hits;
  std::string resident;
};
void Play(LearnedShadowPool& shadow, const Blocks& n, const std::vector<Step>& steps) {
  for (size_t i = 0; i < steps.size(); ++i) {
    const auto& held = steps[i].held;
    EXPECT_EQ(shadow.OnRequest(steps[i].chain, [&held](BlockIndex b) { return held.contains(b); }),
              steps[i].hits)
        << "R" << i + 1;
    EXPECT_EQ(n.Resident(shadow.pool()), steps[i].resident) << "R" << i + 1;
  }
}

// `shadow` saved through `renumber` and loaded into a fresh shadow over
// `catalog`, the catalog the renumbered blocks index.
std::unique_ptr<LearnedShadowPool> Reload(const LearnedShadowPool& shadow,
                                          std::span<const BlockIndex> renumber,
                                          const BlockCatalog& catalog, uint64_t capacity) {
  PolicyStateWriter out;
  shadow.Save(renumber, out);
  auto loaded = std::make_unique<LearnedShadowPool>(&catalog, capacity);
  PolicyStateReader in(out.bytes(), catalog.size());
  loaded->Load(in);
  EXPECT_TRUE(in.Finish().ok()) << in.status();
  return loaded;
}

std::vector<BlockIndex> Unchanged(const BlockCatalog& catalog) {
  std::vector<BlockIndex> same(catalog.size());
  for (BlockIndex i = 0; i < same.size(); ++i) same[i] = i;
  return same;
}

// Capacity 3. The shadow takes what the real pool holds after each request,
// and evicts its least recently used leaf:
//   R1 a0 a1: nothing held yet, 0 hits.
//   R2 b0: copies a0 a1 (held).                             {a0 a1}
//   R3 a0 a1: copies b0; hits 2 (a1 then a0 to the front).  {a0 a1 b0}
//   R4 c0: nothing to copy; 0 hits.
//   R5 b0: copies c0: full, the least recent leaf is b0.    {a0 a1 c0}
//          0 hits.
//   R6 a0 a1: copies b0 (the real pool kept it): least recent leaf a1
//          (a0 is not a leaf). 1 hit (a0).                  {a0 b0 c0}
TEST(LearnedShadowPoolTest, CopiesTheRealAdmissionsAndEvictsTheLeastRecentLeaf) {
  Blocks n;
  const auto a = n.Chain({"a0", "a1"}), b = n.Chain({"b0"}), c = n.Chain({"c0"});
  LearnedShadowPool shadow(&n.catalog, 3);
  Play(shadow, n,
       {{a, {}, 0, ""},
        {b, {a[0], a[1]}, 0, "a0 a1"},
        {a, {a[0], a[1], b[0]}, 2, "a0 a1 b0"},
        {c, {a[0], a[1], b[0]}, 0, "a0 a1 b0"},
        {b, {a[0], a[1], c[0]}, 0, "a0 a1 c0"},
        {a, {a[0], b[0], c[0]}, 1, "a0 b0 c0"}});
}

// Capacity 2. A request's own blocks stay pinned until the next request,
// so copying its admissions never evicts them:
//   R1 x0 x1, R2 y0 (copies x0 x1).                         {x0 x1}
//   R3 x0 x1 x2: copies y0, evicting x1 (least recent leaf); hits 1 (x0,
//      now pinned).                                         {x0 y0}
//   R4 z0: copies x1 (held), evicting y0; x2 (held) finds x0 and x1
//      pinned and no room, so the copy ends there.          {x0 x1}
//   R5 x0 x1 x2: z0 is not held, nothing to copy; hits 2.
//   R6 y0: x2 is not held (the real pool refused it): nothing copied;
//      0 hits (y0 went at R4).                              {x0 x1}
TEST(LearnedShadowPoolTest, NeverEvictsTheBlocksOfTheRequestItCopies) {
  Blocks n;
  const auto x = n.Chain({"x0", "x1", "x2"}), y = n.Chain({"y0"}), z = n.Chain({"z0"});
  const std::vector<BlockIndex> x01 = {x[0], x[1]};
  LearnedShadowPool shadow(&n.catalog, 2);
  Play(shadow, n,
       {{x01, {}, 0, ""},
        {y, {x[0], x[1]}, 0, "x0 x1"},
        {x, {x[0], x[1], y[0]}, 1, "x0 y0"},
        {z, {x[0], x[1], x[2]}, 0, "x0 x1"},
        {x, {x[0], x[1]}, 2, "x0 x1"},
        {y, {x[0], x[1]}, 0, "x0 x1"}});
}

// Saved and loaded, the shadow goes on exactly as the one never stopped;
// a block a compaction forgets leaves it with everything below it.
TEST(LearnedShadowPoolTest, LoadsWhatItSavedAndDropsForgottenBlocks) {
  Blocks n;
  const auto a = n.Chain({"a0", "a1"}), b = n.Chain({"b0"}), c = n.Chain({"c0"});
  std::set<BlockIndex> real;
  auto held = [&real](BlockIndex x) { return real.contains(x); };
  LearnedShadowPool shadow(&n.catalog, 3);
  shadow.OnRequest(a, held);
  real = {a[0], a[1]};
  shadow.OnRequest(b, held);
  real = {a[0], a[1], b[0]};
  shadow.OnRequest(c, held);  // copies b0: {a0 a1 b0}, b0 the most recent
  ASSERT_EQ(n.Resident(shadow.pool()), "a0 a1 b0");

  const auto loaded = Reload(shadow, Unchanged(n.catalog), n.catalog, 3);
  EXPECT_EQ(n.Resident(loaded->pool()), "a0 a1 b0");
  // R4 b0 in both: c0 (held) is copied over the least recent leaf, a1.
  real = {a[0], a[1], b[0], c[0]};
  EXPECT_EQ(shadow.OnRequest(b, held), loaded->OnRequest(b, held));
  EXPECT_EQ(n.Resident(loaded->pool()), "a0 b0 c0");
  EXPECT_EQ(n.Resident(shadow.pool()), n.Resident(loaded->pool()));

  // A compaction that forgets a0 (so a1 too) and keeps b0, c0 renumbered.
  std::vector<BlockIndex> renumber(n.catalog.size(), kNoBlock);
  BlockCatalog compacted;
  for (const BlockIndex keep : {b[0], c[0]}) {
    BlockMeta m = n.catalog[keep];
    renumber[keep] = compacted.Add(m);
  }
  const auto after = Reload(shadow, renumber, compacted, 3);
  EXPECT_EQ(after->pool().resident_blocks(), 2u);
  EXPECT_TRUE(after->pool().IsResident(renumber[b[0]]));
  EXPECT_TRUE(after->pool().IsResident(renumber[c[0]]));
}

// The request a snapshot was taken after keeps its hits pinned when loaded:
// capacity 1; R1 x0, R2 y0 (copies x0), R3 x0 x1 (hits x0, pinned); saved
// here. R4 z0 with x1 held: copying x1 needs x0's room, but x0 is pinned,
// so nothing is copied, in the loaded shadow as in the first.
TEST(LearnedShadowPoolTest, ALoadedShadowKeepsTheLastRequestsHitsPinned) {
  Blocks n;
  const auto x = n.Chain({"x0", "x1"}), y = n.Chain({"y0"}), z = n.Chain({"z0"});
  const std::vector<BlockIndex> x0 = {x[0]};
  std::set<BlockIndex> real;
  auto held = [&real](BlockIndex b) { return real.contains(b); };
  LearnedShadowPool shadow(&n.catalog, 1);
  shadow.OnRequest(x0, held);
  real = {x[0]};
  shadow.OnRequest(y, held);
  ASSERT_EQ(shadow.OnRequest(x, held), 1u);
  const auto loaded = Reload(shadow, Unchanged(n.catalog), n.catalog, 1);
  real = {x[0], x[1]};
  for (LearnedShadowPool* s : {&shadow, loaded.get()}) {
    EXPECT_EQ(s->OnRequest(z, held), 0u);
    EXPECT_EQ(n.Resident(s->pool()), "x0");
  }
}

// The sidecar may resize a block the real pool no longer holds while the
// shadow still does; the shadow counts the bytes it copied. Capacity 2:
//   R1 x0, R2 y0 (copies x0), R3 z0 (copies y0).           {x0 y0}
//   y0 grows to 2 bytes.
//   R4 w0: copies z0, evicting x0 (least recent leaf).     {y0 z0}
//   R5 v0: copies w0, evicting y0: 1 byte freed, as it came in.
//                                                          {z0 w0}
//   R6 u0: copies v0, evicting z0.                         {w0 v0}
// Counting y0 at its new size would have freed 2 bytes at R5 and let R6
// copy v0 without evicting: three blocks in two bytes.
TEST(LearnedShadowPoolTest, CountsTheBytesABlockWasCopiedWith) {
  Blocks n;
  const auto x = n.Chain({"x0"}), y = n.Chain({"y0"}), z = n.Chain({"z0"}), w = n.Chain({"w0"}),
             v = n.Chain({"v0"}), u = n.Chain({"u0"});
  LearnedShadowPool shadow(&n.catalog, 2);
  Play(shadow, n, {{x, {}, 0, ""}, {y, {x[0]}, 0, "x0"}, {z, {y[0]}, 0, "x0 y0"}});
  n.catalog.Resize(y[0], 2, 2, 0);
  Play(shadow, n, {{w, {z[0]}, 0, "y0 z0"}, {v, {w[0]}, 0, "w0 z0"}, {u, {v[0]}, 0, "v0 w0"}});
  EXPECT_EQ(shadow.used_bytes(), 2u);
}

// In a cluster a request's blocks are admitted as its prefill ends, after
// later requests began. Capacity 3:
//   R1 x0 x1 starts; R2 y0 starts: the real pool holds nothing of R1 yet,
//   so nothing is copied. Then R1's x0, x1 and R2's y0 are admitted, each
//   copied at once.                                           {x0 x1 y0}
//   R3 x0 x1: 2 hits.
// Copied only at the next request, x0 and x1 would have been looked for at
// R2, before the real pool held them, and never again: R3 would miss both.
TEST(LearnedShadowPoolTest, CopiesAnAdmissionWhenItHappens) {
  Blocks n;
  const auto x = n.Chain({"x0", "x1"}), y = n.Chain({"y0"});
  std::set<BlockIndex> real;
  auto held = [&real](BlockIndex b) { return real.contains(b); };
  LearnedShadowPool shadow(&n.catalog, 3);
  EXPECT_EQ(shadow.OnRequest(x, held), 0u);
  EXPECT_EQ(shadow.OnRequest(y, held), 0u);
  for (const BlockIndex b : {x[0], x[1], y[0]}) {
    real.insert(b);
    shadow.OnAdmit(b);
  }
  EXPECT_EQ(n.Resident(shadow.pool()), "x0 x1 y0");
  EXPECT_EQ(shadow.OnRequest(x, held), 2u);
}

// A block admitted late never evicts its parent to make room. Capacity 2:
//   R1 x0, R2 y0, each admitted at once.          list [y0 x0]
//   R3 x0 x1: 1 hit (x0, to the front).           list [x0 y0]
//   R4 y0: 1 hit (to the front, pinned); x0, R3's pin ended, is the least
//   recent leaf. Then R3's x1 is admitted: evicting x0 would leave x1
//   without its parent, and y0 is pinned, so x1 is not copied. {x0 y0}
TEST(LearnedShadowPoolTest, ALateAdmissionNeverEvictsItsParent) {
  Blocks n;
  const auto x = n.Chain({"x0", "x1"}), y = n.Chain({"y0"});
  const std::vector<BlockIndex> x0 = {x[0]};
  std::set<BlockIndex> real;
  auto held = [&real](BlockIndex b) { return real.contains(b); };
  LearnedShadowPool shadow(&n.catalog, 2);
  for (const auto& [chain, admitted] : {std::pair{x0, x[0]}, std::pair{y, y[0]}}) {
    shadow.OnRequest(chain, held);
    real.insert(admitted);
    shadow.OnAdmit(admitted);
  }
  EXPECT_EQ(shadow.OnRequest(x, held), 1u);
  EXPECT_EQ(shadow.OnRequest(y, held), 1u);
  real.insert(x[1]);
  shadow.OnAdmit(x[1]);
  EXPECT_EQ(n.Resident(shadow.pool()), "x0 y0");
}

// Damaged state is refused, naming what is wrong.
TEST(LearnedShadowPoolTest, RefusesAChildWithoutItsParentAndALatestChainThatIsNotOne) {
  Blocks n;
  const auto a = n.Chain({"a0", "a1"});
  PolicyStateWriter out;
  out.Varint(1);     // one resident...
  out.Varint(a[1]);  // ...whose parent is not,
  out.Varint(1);     // of 1 byte
  out.Varint(0);     // no latest chain
  LearnedShadowPool shadow(&n.catalog, 3);
  PolicyStateReader in(out.bytes(), n.catalog.size());
  shadow.Load(in);
  EXPECT_NE(in.status().message().find("without its parent"), std::string::npos) << in.status();

  PolicyStateWriter skips;
  skips.Varint(0);  // nothing resident
  skips.Varint(1);  // a latest chain that starts below the root
  skips.Varint(a[1]);
  LearnedShadowPool other(&n.catalog, 3);
  PolicyStateReader in2(skips.bytes(), n.catalog.size());
  other.Load(in2);
  EXPECT_NE(in2.status().message().find("not a chain"), std::string::npos) << in2.status();
}

}  // namespace
}  // namespace kvlearn
