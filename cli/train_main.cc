// kvlearn-train: `kvlearn train` (cli/train_command.cc) as its own executable,
// the only one linking LibTorch; `kvlearn train ARGS` runs `kvlearn-train
// ARGS` (cli/train_forwarder.cc), and its help and errors read as kvlearn's.
#include <string>
#include <vector>

#include "cli/command.h"

int main(int argc, char** argv) {
  CLI::App app{"kvlearn: the train command (run by `kvlearn train`)."};
  app.name("kvlearn");
  app.require_subcommand(1);
  kvlearn::Command train = kvlearn::AddTrainCommand(app);
  // Parse as `kvlearn train ARGS`.
  std::vector<char*> args = {argv[0], const_cast<char*>("train")};
  args.insert(args.end(), argv + 1, argv + argc);
  CLI11_PARSE(app, static_cast<int>(args.size()), args.data());
  return train.second();
}
