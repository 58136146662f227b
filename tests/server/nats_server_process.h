// A real `nats-server` with JetStream for tests, on a free loopback port,
// its store in a directory of the test's: Stop and Start again keep the port
// and the store, as an operator's restart does. The binary is
// /usr/sbin/nats-server (Debian's) or the first on PATH; Found() is false
// when there is none, and the tests then skip saying so.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace kvlearn {

class NatsServerProcess {
 public:
  explicit NatsServerProcess(std::string store_dir) : store_dir_(std::move(store_dir)) {
    binary_ = FindBinary();
    if (!binary_.empty()) port_ = FreePort();
  }
  ~NatsServerProcess() { Stop(SIGKILL); }
  NatsServerProcess(const NatsServerProcess&) = delete;
  NatsServerProcess& operator=(const NatsServerProcess&) = delete;

  bool Found() const { return !binary_.empty(); }
  static constexpr char kSkipMessage[] =
      "nats-server not found (/usr/sbin/nats-server or PATH): scripts/setup.sh installs it";
  std::string url() const { return "nats://127.0.0.1:" + std::to_string(port_); }

  // Starts it and waits (up to a minute) until the port takes connections.
  bool Start() {
    const std::string port = std::to_string(port_);
    std::vector<std::string> args = {binary_, "-js", "-a",  "127.0.0.1",
                                     "-p",    port,  "-sd", store_dir_};
    pid_ = fork();
    if (pid_ == 0) {
      const int null = open("/dev/null", O_WRONLY);
      dup2(null, STDOUT_FILENO);
      dup2(null, STDERR_FILENO);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(binary_.c_str(), argv.data());
      _exit(127);
    }
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < give_up) {
      if (Accepts()) return true;
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  // Sends `sig` and reaps it.
  void Stop(int sig = SIGTERM) {
    if (pid_ <= 0) return;
    kill(pid_, sig);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  static std::string FindBinary() {
    if (access("/usr/sbin/nats-server", X_OK) == 0) return "/usr/sbin/nats-server";
    const char* path = std::getenv("PATH");
    std::string dirs = path != nullptr ? path : "";
    size_t at = 0;
    while (at <= dirs.size()) {
      const size_t end = dirs.find(':', at) == std::string::npos ? dirs.size() : dirs.find(':', at);
      const std::string candidate = dirs.substr(at, end - at) + "/nats-server";
      if (end > at && access(candidate.c_str(), X_OK) == 0) return candidate;
      at = end + 1;
    }
    return "";
  }

  // A port the kernel just gave out: free unless someone takes it meanwhile.
  static int FreePort() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    int port = 0;
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      port = ntohs(a.sin_port);
    }
    close(fd);
    return port;
  }

  bool Accepts() const {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port_));
    const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    close(fd);
    return ok;
  }

  std::string store_dir_;
  std::string binary_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace kvlearn
