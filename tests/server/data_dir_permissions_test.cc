// The data directory holds every node's traffic and the journaled
// decisions: `kvlearn serve` creates it, and every missing parent, 0700 and
// every file in it (RocksDB's, the decision staging files) 0600, whatever
// the umask. Checked by stat on a real server's directory after real traffic.
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/server/pool_events.h"
#include "tests/server/sidecar_fixture.h"

namespace kvlearn {
namespace {

namespace fs = std::filesystem;

// The test sets the umask to 022 before each server starts, so a loose
// default (0755 directories, 0644 files) would show.
class DataDirPermissionsTest : public ::testing::Test {
 protected:
  void SetUp() override { old_umask_ = ::umask(022); }
  void TearDown() override { ::umask(old_umask_); }

  // Starts a server on `data_dir`, stores one block and shuts it down, so
  // RocksDB has written its WAL, MANIFEST, OPTIONS and the staging files.
  static void ServeOnce(const std::string& data_dir) {
    ::umask(022);
    auto server = StartServer(TestOptions(data_dir));
    ASSERT_NE(server, nullptr);
    auto stub = Connect(server->port());
    v1::EventBatch batch;
    *batch.add_events() = Arrival({1});
    *batch.add_events() = Stored(1, std::nullopt);
    v1::ReportSummary summary;
    ASSERT_TRUE(Report(*stub, {batch}, &summary).ok());
    EXPECT_EQ(summary.accepted(), 2u);
    server->Shutdown();
  }

  static mode_t ModeOf(const fs::path& p) {
    struct stat st {};
    EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
    return st.st_mode & 0777;
  }

  // Every directory under `root` (itself included) is 0700 and every file
  // 0600 or tighter; returns the files' names.
  static std::vector<std::string> ExpectOwnerOnly(const fs::path& root) {
    EXPECT_EQ(ModeOf(root), 0700u) << root;
    std::vector<std::string> files;
    for (const fs::directory_entry& e : fs::recursive_directory_iterator(root)) {
      if (e.is_directory()) {
        EXPECT_EQ(ModeOf(e.path()), 0700u) << e.path();
      } else {
        EXPECT_EQ(ModeOf(e.path()) & 0077, 0u)
            << e.path() << " mode " << std::oct << ModeOf(e.path());
        files.push_back(e.path().filename().string());
      }
    }
    return files;
  }

 private:
  mode_t old_umask_ = 0;
};

TEST_F(DataDirPermissionsTest, ANewDataDirAndItsParentsAreOwnerOnly) {
  TempDir tmp;
  const fs::path parent = fs::path(tmp.path()) / "runs";
  const fs::path data_dir = parent / "log";
  ServeOnce(data_dir.string());
  EXPECT_EQ(ModeOf(parent), 0700u);
  const std::vector<std::string> files = ExpectOwnerOnly(data_dir);
  // RocksDB's own files are among those checked, not only kvlearn's.
  EXPECT_NE(std::find(files.begin(), files.end(), "CURRENT"), files.end());
  bool manifest = false;
  for (const std::string& f : files) manifest |= f.rfind("MANIFEST-", 0) == 0;
  EXPECT_TRUE(manifest);
  EXPECT_GE(files.size(), 4u);
}

// A directory made beforehand with the usual 0755 is tightened at start.
TEST_F(DataDirPermissionsTest, AnExistingDataDirIsMadeOwnerOnly) {
  TempDir tmp;
  const fs::path data_dir = fs::path(tmp.path()) / "log";
  ASSERT_EQ(::mkdir(data_dir.c_str(), 0755), 0);
  ASSERT_EQ(ModeOf(data_dir), 0755u);
  ServeOnce(data_dir.string());
  ExpectOwnerOnly(data_dir);
}

}  // namespace
}  // namespace kvlearn
