// --model-dir: paths resolve inside the directory or are refused with a
// message that says only that, whether the outside path exists or not.
#include "server/model_directory.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/server/sidecar_fixture.h"

namespace kvlearn {
namespace {

namespace fs = std::filesystem;

class ModelDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(root_.File("models/sub"));
    fs::create_directories(root_.File("models2"));
    fs::create_directories(root_.File("elsewhere"));
    std::ofstream(root_.File("models/a.pt")) << "x";
    std::ofstream(root_.File("models/sub/b.pt")) << "x";
    std::ofstream(root_.File("models2/c.pt")) << "x";
    std::ofstream(root_.File("elsewhere/secret.pt")) << "secret";
    fs::create_symlink(root_.File("elsewhere/secret.pt"), root_.File("models/link.pt"));
    fs::create_directory_symlink(root_.File("elsewhere"), root_.File("models/linkdir"));
    auto dir = ModelDirectory::Open(root_.File("models"));
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_.emplace(*std::move(dir));
  }

  TempDir root_;
  std::optional<ModelDirectory> dir_;
};

TEST_F(ModelDirectoryTest, PathsInsideResolveToTheirCanonicalForm) {
  const std::string models = fs::canonical(root_.File("models")).string();
  EXPECT_EQ(*dir_->Resolve("a.pt"), models + "/a.pt");
  EXPECT_EQ(*dir_->Resolve("sub/b.pt"), models + "/sub/b.pt");
  EXPECT_EQ(*dir_->Resolve("sub/../a.pt"), models + "/a.pt");
  EXPECT_EQ(*dir_->Resolve(root_.File("models/sub/b.pt")), models + "/sub/b.pt");
  // Inside and missing: resolved (loading it then says it does not exist).
  EXPECT_EQ(*dir_->Resolve("new.pt"), models + "/new.pt");
}

TEST_F(ModelDirectoryTest, PathsOutsideAreRefusedSayingOnlyThat) {
  for (const std::string& path :
       {std::string("../elsewhere/secret.pt"), std::string("sub/../../models2/c.pt"),
        root_.File("models2/c.pt"), root_.File("elsewhere/secret.pt"),
        root_.File("elsewhere/missing.pt"), std::string("/etc/passwd"), std::string("/etc"),
        std::string("/nonexistent/dir/x.pt"), std::string("link.pt"),
        std::string("linkdir/secret.pt"), std::string("linkdir/missing.pt"), std::string("."),
        std::string("")}) {
    auto resolved = dir_->Resolve(path);
    ASSERT_FALSE(resolved.ok()) << path << " -> " << *resolved;
    if (path.empty()) {
      EXPECT_EQ(resolved.status().code(), absl::StatusCode::kInvalidArgument);
      continue;
    }
    EXPECT_EQ(resolved.status().code(), absl::StatusCode::kPermissionDenied) << path;
    // The same words for a file, a directory, a symlink and nothing at all.
    EXPECT_EQ(resolved.status().message(),
              "path: '" + path + "' is outside the server's --model-dir");
  }
}

TEST_F(ModelDirectoryTest, TheDirectoryMustExist) {
  EXPECT_EQ(ModelDirectory::Open(root_.File("missing")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ModelDirectory::Open(root_.File("models/a.pt")).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvlearn
