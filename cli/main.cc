// kvlearn: learned KV-cache retention for disaggregated LLM serving.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "cli/command.h"
#include "cli/did_you_mean.h"
#include "kvlearn_version.h"

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
  app.set_version_flag("--version", kKvlearnVersion,
                       "Print the version (git describe, build type)");
  std::vector<kvlearn::Command> commands = {
      kvlearn::AddCompareCommand(app),   kvlearn::AddPlanCommand(app),
      kvlearn::AddGenCommand(app),       kvlearn::AddTrainForwarder(app),
      kvlearn::AddServeCommand(app),     kvlearn::AddLoadgenCommand(app),
      kvlearn::AddExportLogCommand(app), kvlearn::AddCtlCommand(app),
      kvlearn::AddModelCommand(app),     kvlearn::AddBridgeCommand(app),
  };
  if (const std::string m = kvlearn::UnknownSubcommandMessage(app, argc, argv); !m.empty()) {
    std::fprintf(stderr, "%s\n", m.c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version arrive here too, as successes (exit code 0).
    if (const std::string m =
            e.get_exit_code() == 0 ? "" : kvlearn::UnknownFlagSuggestions(app, argc, argv);
        !m.empty()) {
      std::fprintf(stderr, "%s\n", m.c_str());
      return 2;
    }
    return app.exit(e);
  }
  for (auto& [sub, run] : commands) {
    if (sub->parsed()) return run();
  }
  return 1;
}
