// kvlearn: learned KV-cache retention for disaggregated LLM serving.
#include <vector>

#include "absl/synchronization/mutex.h"
#include "cli/command.h"

int main(int argc, char** argv) {
  // Debian's Abseil checks every mutex acquisition for lock-order cycles (a
  // debugging aid, off in Abseil's own release builds): about 15% of the
  // engine-event ingest path's CPU (docs/engine_events.md). The tests, which
  // do not run this main, keep the check.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  CLI::App app{
      "kvlearn: decides which KV-cache blocks a serving cluster should keep, evict or copy "
      "ahead, and compares retention policies on recorded traffic."};
  app.require_subcommand(1);
  std::vector<kvlearn::Command> commands = {
      kvlearn::AddCompareCommand(app), kvlearn::AddGenCommand(app),
      kvlearn::AddTrainForwarder(app), kvlearn::AddServeCommand(app),
      kvlearn::AddLoadgenCommand(app), kvlearn::AddExportLogCommand(app),
  };
  CLI11_PARSE(app, argc, argv);
  for (auto& [sub, run] : commands) {
    if (sub->parsed()) return run();
  }
  return 1;
}
