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
Command AddPlanCommand(CLI::App& root);  // cli/plan_command.cc
Command AddGenCommand(CLI::App& root);
// `kvlearn train` is its own executable, kvlearn-train (cli/train_main.cc),
// the only one linking LibTorch: the forwarder (in kvlearn) runs it with the
// same arguments, so no other command loads LibTorch's ~280 libraries.
inline constexpr char kTrainDescription[] =
    "Train the learned retention model from a trace, or from a sidecar's event log "
    "(--data-dir, registering the model there: kvlearn model --help): replay it (under "
    "--record-policy), label "
    "every block access from the future, fit an MLP with LibTorch, judge it on the validation "
    "split against lru, the other heuristics and learned without a model (table on stdout: "
    "cost s = prefill GPU-s + transfer s of the validation requests, vs lru % = (cost - lru's) "
    "/ lru's x 100; docs/training.md, 'The verdict'), write the TorchScript model if it is fit.";
Command AddTrainCommand(CLI::App& root);    // cli/train_command.cc, in kvlearn-train
Command AddTrainForwarder(CLI::App& root);  // cli/train_forwarder.cc, in kvlearn
Command AddServeCommand(CLI::App& root);
Command AddLoadgenCommand(CLI::App& root);
Command AddExportLogCommand(CLI::App& root);
Command AddCtlCommand(CLI::App& root);
Command AddModelCommand(CLI::App& root);   // cli/model_command.cc
Command AddBridgeCommand(CLI::App& root);  // cli/bridge_command.cc

}  // namespace kvlearn
