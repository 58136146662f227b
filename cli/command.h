// A `kvlearn` subcommand: each command file registers its flags on the root
// CLI11 app and hands back the function main() calls when it is chosen.
// Runners return the process exit code; on failure they have already printed
// a one-line message to stderr.
#pragma once

#include <functional>
#include <utility>

#include "CLI/CLI.hpp"

namespace kvlearn {

using CommandRunner = std::function<int()>;
using Command = std::pair<CLI::App*, CommandRunner>;

Command AddCompareCommand(CLI::App& root);
Command AddGenCommand(CLI::App& root);
Command AddTrainCommand(CLI::App& root);
Command AddServeCommand(CLI::App& root);
Command AddLoadgenCommand(CLI::App& root);
Command AddExportLogCommand(CLI::App& root);

}  // namespace kvlearn
