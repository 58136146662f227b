// ProgressLine: silent unless wanted; when forced on, the line carries
// done/total, the share, the rate and the ETA, and is cleared at the end.
#include "core/progress_line.h"

#include <unistd.h>

#include <chrono>
#include <sstream>

#include "gtest/gtest.h"

namespace kvlearn {
namespace {

TEST(ProgressLineTest, NotWantedOnAPipeOrWhenQuiet) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  EXPECT_FALSE(ProgressLine::Wanted(fds[1], /*quiet=*/false));
  EXPECT_FALSE(ProgressLine::Wanted(fds[1], /*quiet=*/true));
  close(fds[0]);
  close(fds[1]);
}

TEST(ProgressLineTest, PrintWritesAboveTheLineAndRedrawsIt) {
  std::ostringstream quiet;
  ProgressLine off("training", 10, "samples", false, quiet);
  off.Print("epoch 1\n");
  EXPECT_EQ(quiet.str(), "epoch 1\n");  // disabled: the text alone

  std::ostringstream out;
  ProgressLine on("training", 10, "samples", true, out);
  on.Add(4);
  on.Draw();
  const std::string drawn = out.str();
  on.Print("epoch 1\n");
  const std::string after = out.str().substr(drawn.size());
  // Cleared, the text on a line of its own, then the live line again.
  EXPECT_EQ(after.rfind("\r\x1b[Kepoch 1\n\rtraining 4/10 samples (40%), ", 0), 0u) << after;
  on.Finish();
  const size_t finished = out.str().size();
  on.Print("verdict\n");  // after Finish: no line to clear or redraw
  EXPECT_EQ(out.str().substr(finished), "verdict\n");
}

TEST(ProgressLineTest, StartDrawsAtOnce) {
  // A phase shorter than the period still shows its line once.
  std::ostringstream out;
  ProgressLine line("recorded", 10, "requests", true, out);
  line.Start(std::chrono::hours(1));
  EXPECT_EQ(out.str().rfind("\rrecorded 0/10 requests (0%)", 0), 0u) << out.str();
  line.Finish();
}

TEST(ProgressLineTest, DisabledPrintsNothing) {
  std::ostringstream out;
  {
    ProgressLine line("replaying", 100, "requests", /*enabled=*/false, out);
    line.Start();
    line.Add(40);
    line.Draw();
  }
  EXPECT_EQ(out.str(), "");
}

TEST(ProgressLineTest, TextHasDoneTotalShareRateAndEta) {
  std::ostringstream out;
  ProgressLine line("replaying", 1000, "requests", true, out);
  // 250 of 1000 in 5 s: 50 a second, 750 left, so 15 s to go.
  EXPECT_EQ(line.Text(250, 5.0), "replaying 250/1000 requests (25%), 50 requests/s, ETA 15 s");
  // Nothing done yet: no rate, hence no ETA.
  EXPECT_EQ(line.Text(0, 0.0), "replaying 0/1000 requests (0%), 0 requests/s");
  ProgressLine unknown("scanned", 0, "events", true, out);
  EXPECT_EQ(unknown.Text(300, 2.0), "scanned 300 events, 150 events/s");
}

TEST(ProgressLineTest, ForcedOnDrawsInPlaceAndClearsAtTheEnd) {
  std::ostringstream out;
  ProgressLine line("replaying", 10, "requests", true, out);
  line.Add(3);
  line.Add(2);
  line.Draw();
  const std::string drawn = out.str();
  EXPECT_EQ(drawn.rfind("\rreplaying 5/10 requests (50%), ", 0), 0u) << drawn;
  EXPECT_NE(drawn.find("requests/s"), std::string::npos);
  EXPECT_NE(drawn.find("\x1b[K"), std::string::npos);
  line.Finish();
  EXPECT_EQ(out.str(), drawn + "\r\x1b[K");
  line.Finish();  // idempotent: nothing more
  EXPECT_EQ(out.str(), drawn + "\r\x1b[K");
}

}  // namespace
}  // namespace kvlearn
