// A live progress line on stderr for commands that can run for more than a few
// seconds (compare, loadgen, export-log, train): "LABEL done/total UNIT (P%), R UNIT/s,
// ETA S s", redrawn in place a few times a second while the work runs, and
// cleared when it ends. Only when wanted: stderr is a terminal and the command
// was not given --quiet (Wanted); piped or quiet, it prints nothing at all, so
// logs and tests see only the commands' own lines.
//
// Thread-safety: Add() may be called from any number of threads (one relaxed
// atomic add); Start(), Draw(), Print() and Finish() from the owning thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <ostream>
#include <string>
#include <string_view>
#include <thread>

namespace kvlearn {

class ProgressLine {
 public:
  // `total` units of work (0: unknown, no percentage or ETA). Draws on `out`
  // only if `enabled` (normally Wanted(STDERR_FILENO, quiet)).
  ProgressLine(std::string label, uint64_t total, std::string unit, bool enabled,
               std::ostream& out);
  ~ProgressLine();  // Finish()
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  // True when a progress line belongs on `fd`: a terminal, and not --quiet.
  static bool Wanted(int fd, bool quiet);

  // The counter the work advances; the replay and loadgen take it as a pointer.
  std::atomic<uint64_t>& counter() { return done_; }
  void Add(uint64_t n) { done_.fetch_add(n, std::memory_order_relaxed); }

  // Draws now, then every `period`, on a thread of its own until Finish().
  void Start(std::chrono::milliseconds period = std::chrono::milliseconds(250));
  // Draws the line now (tests call it directly instead of waiting on Start).
  void Draw();
  // Writes `text` (whole lines, ending in a newline) above the live line:
  // clears it first, so a command's own lines (train's epochs) do not run
  // into it, and redraws it after. Plain `text` when not enabled.
  void Print(std::string_view text);
  // Stops redrawing and clears the line. Idempotent.
  void Finish();

  // The line's text for `done` units after `seconds` (no terminal control).
  std::string Text(uint64_t done, double seconds) const;

 private:
  const std::string label_;
  const uint64_t total_;
  const std::string unit_;
  const bool enabled_;
  std::ostream& out_;
  const std::chrono::steady_clock::time_point start_;
  std::atomic<uint64_t> done_{0};
  bool drawn_ = false;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread ticker_;
};

}  // namespace kvlearn
