// A `kvlearn serve` child process for tests that need the real binary
// (signals, kill -9, restart on the same data directory). Its first stdout
// line gives the port; stderr goes to a file when `stderr_path` is set, else
// to /dev/null. The destructor kills it (SIGKILL) if it still runs.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace kvlearn {

class ServeProcess {
 public:
  // Runs KVLEARN_BINARY serve --listen 127.0.0.1:0 --metrics-listen ""
  // --data-dir `data_dir` plus `extra` arguments.
  ServeProcess(const std::string& binary, const std::string& data_dir,
               const std::vector<std::string>& extra = {}, const std::string& stderr_path = "") {
    int out[2];
    if (pipe(out) != 0) return;
    std::vector<std::string> args = {
        binary, "serve", "--listen", "127.0.0.1:0", "--metrics-listen", "", "--data-dir", data_dir};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      const int err = stderr_path.empty()
                          ? open("/dev/null", O_WRONLY)
                          : open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(err, STDERR_FILENO);
      close(out[0]);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(binary.c_str(), argv.data());
      _exit(127);
    }
    close(out[1]);
    // Read "port N metrics_port M\n", waiting at most 60 s.
    std::string line;
    char c;
    pollfd p{out[0], POLLIN, 0};
    while (line.find('\n') == std::string::npos && poll(&p, 1, 60'000) > 0 &&
           read(out[0], &c, 1) == 1) {
      line += c;
    }
    close(out[0]);
    if (sscanf(line.c_str(), "port %d", &port_) != 1) port_ = 0;
  }
  ~ServeProcess() {
    if (pid_ > 0) Kill(SIGKILL);
  }
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;

  int port() const { return port_; }
  pid_t pid() const { return pid_; }

  // Sends `sig` and reaps the child; returns its wait status.
  int Kill(int sig) {
    int status = 0;
    if (pid_ <= 0) return status;
    kill(pid_, sig);
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

  // Sends `sig` and waits up to `timeout` for the child to exit by itself.
  // Returns true and sets `status` if it did; otherwise kills it (SIGKILL)
  // and returns false.
  bool SignalAndWait(int sig, std::chrono::seconds timeout, int* status) {
    if (pid_ <= 0) return false;
    kill(pid_, sig);
    const auto give_up = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < give_up) {
      if (waitpid(pid_, status, WNOHANG) == pid_) {
        pid_ = -1;
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    Kill(SIGKILL);
    return false;
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace kvlearn
