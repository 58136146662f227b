// The served shares (policies/learned/served_share.h): P_here worked by hand
// on a two-rung ladder, the shares' memory, and their save and load.
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "policies/learned/reuse_curve.h"
#include "policies/learned/served_share.h"

namespace kvlearn {
namespace {

// Rungs 10 s and 100 s; F(10) = 0.4, F(100) = 0.6.
const std::vector<double> kLadder = {10, 100};
const std::vector<float> kCurve = {0.4f, 0.6f};

TEST(LearnedServedShareTest, WithNothingServedElsewhereItIsTheReuseCurve) {
  LearnedServedShare shares(kLadder);
  for (int i = 0; i < 50; ++i) shares.Count(i % 2 ? 5 : 50, false);  // served here
  for (const double e : {0.5, 5.0, 10.0, 31.6, 100.0, 1000.0}) {
    EXPECT_DOUBLE_EQ(shares.ReuseHere(kCurve, e), ReuseCurveAt(kLadder, kCurve, e)) << e;
  }
}

// One return after 5 s, served by a faster tier. The newest return weighs w;
// interval 0 holds it, and the prior of 2 returns (weight 2w) served here:
// share_0 = 2w / 3w = 2/3; interval 1 holds only the prior: share_1 = 1.
//   P_here(100) = F(10) * 2/3 + (F(100) - F(10)) * 1 = 0.4 * 2/3 + 0.2
//   P_here(10)  = 0.4 * 2/3
//   P_here(5)   = F(5) * 2/3 = 0.2 * 2/3 (F linear below the first rung)
//   P_here(31.6) = (F(10) * 2/3) + (F(31.6) - F(10)), F(31.6) = 0.4 + 0.2 *
//     log(3.16) / log(10)
// and past the last rung nothing more.
TEST(LearnedServedShareTest, AReturnServedElsewhereWeighsItsIntervalByHand) {
  LearnedServedShare shares(kLadder);
  shares.Count(5, true);
  EXPECT_DOUBLE_EQ(shares.Share(0), 2.0 / 3);
  EXPECT_DOUBLE_EQ(shares.Share(1), 1.0);
  const double f0 = kCurve[0], f1 = kCurve[1];
  EXPECT_NEAR(shares.ReuseHere(kCurve, 100), f0 * 2 / 3 + (f1 - f0), 1e-12);
  EXPECT_NEAR(shares.ReuseHere(kCurve, 1000), f0 * 2 / 3 + (f1 - f0), 1e-12);
  EXPECT_NEAR(shares.ReuseHere(kCurve, 10), f0 * 2 / 3, 1e-12);
  EXPECT_NEAR(shares.ReuseHere(kCurve, 5), f0 / 2 * 2 / 3, 1e-12);
  const double f_at = f0 + (f1 - f0) * std::log(3.16) / std::log(10.0);
  EXPECT_NEAR(shares.ReuseHere(kCurve, 31.6), f0 * 2 / 3 + (f_at - f0), 1e-6);
}

// On a longer, non-monotone curve: each interval's mass read off
// ReuseCurveAt at both of its ends, weighed by its share, summed, as the
// formula in the header says, for E on and between rungs and past the last.
TEST(LearnedServedShareTest, ReuseHereIsTheFormulaOverEveryInterval) {
  const std::vector<double> ladder = {15, 30, 60, 120, 240};
  const std::vector<float> curve = {0.1f, 0.05f, 0.3f, 0.3f, 0.7f};
  LearnedServedShare shares(ladder);
  for (int i = 0; i < 40; ++i) shares.Count(7.0 * i, i % 3 != 0);
  for (const double e : {1.0, 15.0, 20.0, 30.0, 45.0, 60.0, 100.0, 120.0, 239.0, 240.0, 999.0}) {
    double expected = 0;
    for (size_t k = 0; k < ladder.size(); ++k) {
      const double lower = k == 0 ? 0.0 : ladder[k - 1];
      if (e <= lower) break;
      const double mass =
          ReuseCurveAt(ladder, curve, std::min(ladder[k], e)) - ReuseCurveAt(ladder, curve, lower);
      expected += mass * shares.Share(k);
    }
    EXPECT_NEAR(shares.ReuseHere(curve, e), expected, 1e-12) << e;
  }
}

// Idle times the ladder does not cover, or that are not times, count nowhere.
TEST(LearnedServedShareTest, ReturnsOffTheLadderAreNotCounted) {
  LearnedServedShare shares(kLadder);
  shares.Count(100.5, true);
  shares.Count(-1, true);
  shares.Count(std::nan(""), true);
  EXPECT_DOUBLE_EQ(shares.Share(0), 1.0);
  EXPECT_DOUBLE_EQ(shares.Share(1), 1.0);
  EXPECT_DOUBLE_EQ(shares.ReuseHere(kCurve, 100), ReuseCurveAt(kLadder, kCurve, 100));
}

// n returns all served elsewhere: with decay d = 1 - 1/4096 the interval
// holds w (1 - d^n) / (1 - d) of them against a prior of 2w, so the share is
// 2 / (2 + (1 - d^n) 4096), near 2/4098 for large n. Then m returns served
// here: the old ones weigh d^m as much, R = (1 - d^(n+m)) / (1 - d) in all,
// E = d^m (1 - d^n) / (1 - d) of them elsewhere, share (R - E + 2) / (R + 2),
// about 0.992 for m = 20000.
// A million counts also cross the weight's rescaling (at 1e100, about
// 943,000 counts), which must not change a share.
TEST(LearnedServedShareTest, SharesFollowTheLatestFewThousandReturns) {
  LearnedServedShare shares(kLadder);
  const double d = 1 - 1 / LearnedServedShare::kMemory;
  constexpr int kN = 1'000'000;
  for (int i = 0; i < kN; ++i) shares.Count(20, true);
  const double expected = 2 / (2 + (1 - std::pow(d, kN)) / (1 - d));
  EXPECT_NEAR(shares.Share(1), expected, 1e-9);
  EXPECT_DOUBLE_EQ(shares.Share(0), 1.0);
  constexpr int kM = 20000;
  for (int i = 0; i < kM; ++i) shares.Count(20, false);
  const double all = (1 - std::pow(d, kN + kM)) / (1 - d);
  const double elsewhere = std::pow(d, kM) * (1 - std::pow(d, kN)) / (1 - d);
  EXPECT_NEAR(shares.Share(1), (all - elsewhere + 2) / (all + 2), 1e-9);
}

TEST(LearnedServedShareTest, SaveAndLoadKeepEveryShare) {
  LearnedServedShare shares(kLadder);
  for (int i = 0; i < 300; ++i) shares.Count(i % 3 == 0 ? 4 : 40, i % 2 == 0);
  PolicyStateWriter out;
  shares.Save(out);
  const std::string bytes = out.Take();

  LearnedServedShare loaded(kLadder);
  PolicyStateReader in(bytes, 0);
  loaded.Load(in);
  ASSERT_TRUE(in.Finish().ok()) << in.Finish();
  for (size_t k = 0; k < kLadder.size(); ++k) EXPECT_EQ(loaded.Share(k), shares.Share(k));
  EXPECT_EQ(loaded.ReuseHere(kCurve, 60), shares.ReuseHere(kCurve, 60));
  // Both go on alike.
  shares.Count(7, true);
  loaded.Count(7, true);
  EXPECT_EQ(loaded.Share(0), shares.Share(0));

  // Saved on another ladder (a restarted pool with another model): dropped.
  const std::vector<double> other_ladder = {5, 50, 500};
  LearnedServedShare other(other_ladder);
  PolicyStateReader in2(bytes, 0);
  other.Load(in2);
  EXPECT_TRUE(in2.Finish().ok());
  for (size_t k = 0; k < 3; ++k) EXPECT_EQ(other.Share(k), 1.0);
}

TEST(LearnedServedShareTest, CountsThatAreNotCountsAreRefused) {
  PolicyStateWriter out;
  out.Varint(2);
  out.Bool(true);
  out.Double(1.5);
  out.Double(3);
  out.Double(4);  // more served elsewhere than returned
  out.Double(0);
  out.Double(0);
  const std::string bytes = out.Take();
  LearnedServedShare loaded(kLadder);
  PolicyStateReader in(bytes, 0);
  loaded.Load(in);
  const absl::Status s = in.Finish();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("served share counts"), std::string::npos) << s;
  EXPECT_DOUBLE_EQ(loaded.Share(0), 1.0);  // nothing taken from the bad bytes
}

}  // namespace
}  // namespace kvlearn
