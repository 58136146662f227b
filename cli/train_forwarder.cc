// `kvlearn train` in the kvlearn executable: runs kvlearn-train, built beside
// it, with the same arguments (its flags, help and errors are that program's).
#include <limits.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "cli/command.h"

namespace kvlearn {
namespace {

// The directory of the running executable ("" if /proc cannot say).
std::string ExecutableDir() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return "";
  const std::string exe(path, static_cast<size_t>(n));
  return exe.substr(0, exe.find_last_of('/'));
}

int RunTrainExecutable(const std::vector<std::string>& args) {
  const std::string program = ExecutableDir() + "/kvlearn-train";
  std::vector<std::string> owned = {program};
  owned.insert(owned.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : owned) argv.push_back(a.data());
  argv.push_back(nullptr);
  execv(program.c_str(), argv.data());
  std::cerr << "kvlearn train: cannot run " << program << ": " << std::strerror(errno)
            << " (it is built beside kvlearn, by the same build)\n";
  return 1;
}

}  // namespace

Command AddTrainForwarder(CLI::App& root) {
  CLI::App* cmd = root.add_subcommand("train", kTrainDescription);
  // Everything after `train`, --help included, goes to kvlearn-train as it is.
  cmd->set_help_flag();
  cmd->prefix_command();
  return {cmd, [cmd] { return RunTrainExecutable(cmd->remaining()); }};
}

}  // namespace kvlearn
