// Recovery without a restart: when the event log's disk fills, ingestion is
// refused (UNAVAILABLE) and counted, and once space is freed it resumes by
// itself; the log then holds exactly the acknowledged events. On a real
// small filesystem: a tmpfs mounted for the test, which needs root (CI runs
// as root; elsewhere the test is skipped, saying so).
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tests/server/metrics_scrape.h"
#include "tests/server/sidecar_fixture.h"

namespace kvlearn {
namespace {

// A tmpfs of `megabytes` on a fresh directory, unmounted at destruction.
class SmallFilesystem {
 public:
  explicit SmallFilesystem(int megabytes) {
    const std::string options = absl::StrCat("size=", megabytes, "m");
    if (mount("tmpfs", dir_.path().c_str(), "tmpfs", 0, options.c_str()) != 0) {
      error_ = std::strerror(errno);
    }
  }
  ~SmallFilesystem() {
    if (error_.empty()) umount2(dir_.path().c_str(), MNT_DETACH);
  }
  const std::string& error() const { return error_; }
  std::string File(const std::string& name) const { return dir_.File(name); }
  uint64_t FreeBytes() const {
    struct statvfs s {};
    statvfs(dir_.path().c_str(), &s);
    return static_cast<uint64_t>(s.f_bavail) * s.f_frsize;
  }

 private:
  TempDir dir_;
  std::string error_;
};

// Fills all but `leave` bytes of the filesystem with the file `path`.
void FillUpTo(const SmallFilesystem& fs, const std::string& path, uint64_t leave) {
  const uint64_t free = fs.FreeBytes();
  ASSERT_GT(free, leave);
  std::ofstream out(path, std::ios::binary);
  const std::string chunk(64 << 10, 'f');
  for (uint64_t written = 0; written + chunk.size() <= free - leave; written += chunk.size()) {
    out.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
  }
  out.close();
  ASSERT_TRUE(out.good() || out.eof());
}

// One batch of `n` request arrivals with new ids, each a chain of 64 blocks
// (about 700 bytes logged per event).
v1::EventBatch Arrivals(int n, uint64_t* next_id) {
  v1::EventBatch batch;
  for (int i = 0; i < n; ++i) {
    v1::Event* e = batch.add_events();
    e->set_node_id("n");
    auto* a = e->mutable_request_arrival();
    for (int b = 0; b < 64; ++b) a->add_block_ids(++*next_id);
  }
  return batch;
}

TEST(LogRecoveryTest, IngestionResumesByItselfOnceTheFullDiskHasRoomAgain) {
  if (geteuid() != 0) GTEST_SKIP() << "mounting the small tmpfs this test fills needs root";
  SmallFilesystem fs(48);
  if (!fs.error().empty()) GTEST_SKIP() << "cannot mount a tmpfs here: " << fs.error();
  // 1 MiB left once the server has created its files.
  SidecarOptions o = TestOptions(fs.File("log"));
  o.snapshot_every_events = 0;
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  FillUpTo(fs, fs.File("filler"), 1 << 20);
  auto stub = Connect(server->port());

  // Batches of 200 events until the disk refuses one: each stream carries
  // one batch, so an UNAVAILABLE names exactly one batch's events.
  uint64_t next_id = 0, logged = 0, refused = 0;
  int refusals = 0;
  for (int i = 0; i < 200 && refusals < 3; ++i) {
    const v1::EventBatch batch = Arrivals(200, &next_id);
    v1::ReportSummary summary;
    const grpc::Status s = Report(*stub, {batch}, &summary);
    if (s.ok()) {
      ASSERT_EQ(summary.accepted(), 200u);
      logged += 200;
    } else {
      ASSERT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
      refused += 200;
      ++refusals;
    }
  }
  ASSERT_EQ(refusals, 3) << "the 1 MiB left never filled";
  ASSERT_GT(logged, 0u);
  EXPECT_EQ(ScrapeCounter(server->metrics_port(), "kvlearn_event_log_refused_events_total"),
            refused);

  // Room again: no restart, ingestion resumes (RocksDB checks the free space
  // every few seconds; a generous limit, not a measurement).
  ASSERT_EQ(std::remove(fs.File("filler").c_str()), 0);
  bool resumed = false;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!resumed && std::chrono::steady_clock::now() < give_up) {
    const v1::EventBatch batch = Arrivals(200, &next_id);
    v1::ReportSummary summary;
    const grpc::Status s = Report(*stub, {batch}, &summary);
    if (s.ok()) {
      logged += 200;
      resumed = true;
    } else {
      ASSERT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
      refused += 200;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  ASSERT_TRUE(resumed) << "ingestion did not resume within 120 s of freeing the disk";
  EXPECT_EQ(ScrapeCounter(server->metrics_port(), "kvlearn_event_log_refused_events_total"),
            refused);
  EXPECT_GE(ScrapeCounter(server->metrics_port(), "kvlearn_event_log_recoveries_total"), 1u);

  // The log holds exactly the acknowledged events: a restart replays them.
  server.reset();
  server = StartServer(o);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->replayed_events(), logged);
  server.reset();
}

}  // namespace
}  // namespace kvlearn
