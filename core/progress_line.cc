#include "core/progress_line.h"

#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_format.h"

namespace kvlearn {

ProgressLine::ProgressLine(std::string label, uint64_t total, std::string unit, bool enabled,
                           std::ostream& out)
    : label_(std::move(label)),
      total_(total),
      unit_(std::move(unit)),
      enabled_(enabled),
      out_(out),
      start_(std::chrono::steady_clock::now()) {}

ProgressLine::~ProgressLine() { Finish(); }

bool ProgressLine::Wanted(int fd, bool quiet) { return !quiet && isatty(fd) == 1; }

std::string ProgressLine::Text(uint64_t done, double seconds) const {
  const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0;
  std::string text = absl::StrFormat("%s %d", label_, done);
  if (total_ > 0) {
    absl::StrAppendFormat(&text, "/%d %s (%.0f%%)", total_, unit_,
                          100.0 * static_cast<double>(done) / static_cast<double>(total_));
  } else {
    absl::StrAppendFormat(&text, " %s", unit_);
  }
  absl::StrAppendFormat(&text, ", %.0f %s/s", rate, unit_);
  if (total_ > 0 && rate > 0 && done <= total_) {
    absl::StrAppendFormat(&text, ", ETA %.0f s", static_cast<double>(total_ - done) / rate);
  }
  return text;
}

void ProgressLine::Draw() {
  if (!enabled_) return;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  // \r and clear-to-end-of-line: the line is redrawn in place.
  out_ << "\r" << Text(done_.load(std::memory_order_relaxed), seconds) << "\x1b[K" << std::flush;
  drawn_ = true;
}

void ProgressLine::Print(std::string_view text) {
  if (!enabled_) {
    out_ << text << std::flush;
    return;
  }
  // The ticker draws holding mu_: the clear, the text and the redraw are one.
  std::lock_guard<std::mutex> lock(mu_);
  if (drawn_) out_ << "\r\x1b[K";
  drawn_ = false;
  out_ << text << std::flush;
  if (!stop_) Draw();
}

void ProgressLine::Start(std::chrono::milliseconds period) {
  if (!enabled_ || ticker_.joinable()) return;
  // Drawn at once, here, so even a phase shorter than a period says what it
  // is doing.
  Draw();
  ticker_ = std::thread([this, period] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!wake_.wait_for(lock, period, [this] { return stop_; })) Draw();
  });
}

void ProgressLine::Finish() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (ticker_.joinable()) ticker_.join();
  if (drawn_) out_ << "\r\x1b[K" << std::flush;
  drawn_ = false;
}

}  // namespace kvlearn
