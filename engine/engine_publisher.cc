// The thread polls three sockets: an inproc PAIR that Publish pokes after
// queueing (so a new batch goes out at once), the XPUB (subscription
// messages), and the ROUTER (replay requests). Publish itself touches only
// the queue and the sending end of the PAIR, under the mutex.

#include "engine/engine_publisher.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "zmq.hpp"
#include "zmq_addon.hpp"

namespace kvlearn {
namespace {

std::string SequenceBytes(uint64_t seq) {
  std::string b(8, '\0');
  for (int i = 0; i < 8; ++i) b[7 - i] = static_cast<char>((seq >> (8 * i)) & 0xff);
  return b;
}

uint64_t SequenceFromBytes(const zmq::message_t& m) {
  const auto* p = static_cast<const uint8_t*>(m.data());
  uint64_t seq = 0;
  for (size_t i = 0; i < 8; ++i) seq = (seq << 8) | p[i];
  return seq;
}

constexpr std::chrono::milliseconds kIdleWake{100};

}  // namespace

struct EnginePublisher::State {
  EnginePublisherOptions options;
  zmq::context_t context{1};
  zmq::socket_t pub;
  zmq::socket_t replay;
  zmq::socket_t wake_rx;
  zmq::socket_t wake_tx;  // guarded by mu
  std::string endpoint;
  std::string replay_endpoint;

  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<uint64_t, std::string>> queue;  // guarded by mu
  uint64_t next_sequence = 0;                          // guarded by mu
  uint64_t handled = 0;                                // sequences sent or dropped; guarded by mu
  int64_t subscriptions = 0;                           // guarded by mu

  std::atomic<uint64_t> sent{0}, dropped{0}, replay_requests{0}, replayed_batches{0},
      bad_replay_requests{0};
  std::atomic<bool> stop{false};
  std::thread thread;

  // Owned by the thread.
  std::deque<std::pair<uint64_t, std::string>> buffer;

  void Run();
  void SendQueued();
  void ReadSubscriptions();
  void ServeReplays();
};

void EnginePublisher::State::SendQueued() {
  std::deque<std::pair<uint64_t, std::string>> batch;
  {
    std::lock_guard<std::mutex> lock(mu);
    batch.swap(queue);
  }
  for (auto& [seq, payload] : batch) {
    if (options.drop_sequence == seq) {
      dropped.fetch_add(1, std::memory_order_relaxed);
    } else {
      pub.send(zmq::buffer(options.topic), zmq::send_flags::sndmore);
      const std::string seq_bytes = SequenceBytes(seq);
      pub.send(zmq::buffer(seq_bytes), zmq::send_flags::sndmore);
      pub.send(zmq::buffer(payload), zmq::send_flags::none);
      sent.fetch_add(1, std::memory_order_relaxed);
    }
    if (options.replay_buffer_batches > 0) {
      buffer.emplace_back(seq, std::move(payload));
      while (buffer.size() > options.replay_buffer_batches) buffer.pop_front();
    }
  }
  if (!batch.empty()) {
    std::lock_guard<std::mutex> lock(mu);
    handled += batch.size();
    cv.notify_all();
  }
}

void EnginePublisher::State::ReadSubscriptions() {
  zmq::message_t m;
  while (pub.recv(m, zmq::recv_flags::dontwait)) {
    if (m.size() == 0) continue;
    const uint8_t kind = *static_cast<const uint8_t*>(m.data());
    std::lock_guard<std::mutex> lock(mu);
    if (kind == 1) ++subscriptions;
    if (kind == 0) --subscriptions;
    cv.notify_all();
  }
}

void EnginePublisher::State::ServeReplays() {
  std::vector<zmq::message_t> frames;
  while (true) {
    frames.clear();
    if (!zmq::recv_multipart(replay, std::back_inserter(frames), zmq::recv_flags::dontwait)) {
      return;
    }
    // [identity, "", start sequence (8 bytes)]
    if (frames.size() != 3 || frames[1].size() != 0 || frames[2].size() != 8) {
      bad_replay_requests.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    replay_requests.fetch_add(1, std::memory_order_relaxed);
    const uint64_t start = SequenceFromBytes(frames[2]);
    const std::string identity = frames[0].to_string();
    for (const auto& [seq, payload] : buffer) {
      if (seq < start) continue;
      const std::string seq_bytes = SequenceBytes(seq);
      replay.send(zmq::buffer(identity), zmq::send_flags::sndmore);
      replay.send(zmq::const_buffer(), zmq::send_flags::sndmore);
      replay.send(zmq::buffer(seq_bytes), zmq::send_flags::sndmore);
      replay.send(zmq::buffer(payload), zmq::send_flags::none);
      replayed_batches.fetch_add(1, std::memory_order_relaxed);
    }
    const std::string end(8, static_cast<char>(0xff));
    replay.send(zmq::buffer(identity), zmq::send_flags::sndmore);
    replay.send(zmq::const_buffer(), zmq::send_flags::sndmore);
    replay.send(zmq::buffer(end), zmq::send_flags::sndmore);
    replay.send(zmq::const_buffer(), zmq::send_flags::none);
  }
}

void EnginePublisher::State::Run() {
  std::vector<zmq::pollitem_t> items = {{wake_rx.handle(), 0, ZMQ_POLLIN, 0},
                                        {pub.handle(), 0, ZMQ_POLLIN, 0}};
  if (replay) items.push_back({replay.handle(), 0, ZMQ_POLLIN, 0});
  while (!stop.load()) {
    zmq::poll(items, kIdleWake);
    zmq::message_t poke;
    while (wake_rx.recv(poke, zmq::recv_flags::dontwait)) {
    }
    // Sending before serving replays: a request that follows a gap finds the
    // batches that revealed it already kept.
    SendQueued();
    ReadSubscriptions();
    if (replay) ServeReplays();
  }
}

absl::StatusOr<std::unique_ptr<EnginePublisher>> EnginePublisher::Start(
    EnginePublisherOptions options) {
  auto state = std::make_unique<State>();
  state->options = std::move(options);
  State& s = *state;
  try {
    s.pub = zmq::socket_t(s.context, zmq::socket_type::xpub);
    s.pub.set(zmq::sockopt::linger, 0);
    s.pub.set(zmq::sockopt::sndhwm, s.options.send_hwm);
    s.pub.set(zmq::sockopt::xpub_verbose, 1);
    s.pub.bind(s.options.endpoint);
    s.endpoint = s.pub.get(zmq::sockopt::last_endpoint);
    if (!s.options.replay_endpoint.empty()) {
      s.replay = zmq::socket_t(s.context, zmq::socket_type::router);
      s.replay.set(zmq::sockopt::linger, 0);
      s.replay.set(zmq::sockopt::sndhwm, 0);  // answers are bounded by the buffer
      s.replay.bind(s.options.replay_endpoint);
      s.replay_endpoint = s.replay.get(zmq::sockopt::last_endpoint);
    }
    const std::string wake =
        absl::StrCat("inproc://engine-publisher-wake-", reinterpret_cast<uintptr_t>(state.get()));
    s.wake_rx = zmq::socket_t(s.context, zmq::socket_type::pair);
    s.wake_rx.set(zmq::sockopt::linger, 0);
    s.wake_rx.bind(wake);
    s.wake_tx = zmq::socket_t(s.context, zmq::socket_type::pair);
    s.wake_tx.set(zmq::sockopt::linger, 0);
    s.wake_tx.connect(wake);
  } catch (const zmq::error_t& e) {
    const std::string what = absl::StrCat("engine publisher on ", s.options.endpoint,
                                          s.options.replay_endpoint.empty() ? "" : " / ",
                                          s.options.replay_endpoint, ": ", e.what());
    if (e.num() == EADDRINUSE || e.num() == EADDRNOTAVAIL) return absl::UnavailableError(what);
    return absl::InvalidArgumentError(what);
  }
  s.thread = std::thread([&s] { s.Run(); });
  return std::unique_ptr<EnginePublisher>(new EnginePublisher(std::move(state)));
}

EnginePublisher::EnginePublisher(std::unique_ptr<State> state) : state_(std::move(state)) {}

EnginePublisher::~EnginePublisher() { Stop(); }

const std::string& EnginePublisher::endpoint() const { return state_->endpoint; }
const std::string& EnginePublisher::replay_endpoint() const { return state_->replay_endpoint; }

uint64_t EnginePublisher::Publish(std::string payload) {
  std::lock_guard<std::mutex> lock(state_->mu);
  const uint64_t seq = state_->next_sequence++;
  state_->queue.emplace_back(seq, std::move(payload));
  // A full PAIR pipe only means the thread has pokes pending already.
  (void)state_->wake_tx.send(zmq::const_buffer(), zmq::send_flags::dontwait);
  return seq;
}

void EnginePublisher::Flush() {
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait(
      lock, [this] { return state_->handled == state_->next_sequence || state_->stop.load(); });
}

bool EnginePublisher::WaitForSubscribers(int64_t n, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(state_->mu);
  return state_->cv.wait_for(lock, timeout, [&] { return state_->subscriptions >= n; });
}

void EnginePublisher::Stop() {
  if (!state_->thread.joinable()) return;
  state_->stop.store(true);
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    (void)state_->wake_tx.send(zmq::const_buffer(), zmq::send_flags::dontwait);
    state_->cv.notify_all();
  }
  state_->thread.join();
}

EnginePublisherStats EnginePublisher::stats() const {
  EnginePublisherStats out;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    out.published = state_->next_sequence;
    out.subscriptions = state_->subscriptions;
  }
  out.sent = state_->sent.load();
  out.dropped = state_->dropped.load();
  out.replay_requests = state_->replay_requests.load();
  out.replayed_batches = state_->replayed_batches.load();
  out.bad_replay_requests = state_->bad_replay_requests.load();
  return out;
}

}  // namespace kvlearn
