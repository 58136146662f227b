// One thread polls every SUB and DEALER socket. Per endpoint it keeps the
// next sequence it expects and, while a replay is outstanding, the live
// batches that arrived after the hole (`held`, ordered by sequence). All of
// that state belongs to the thread; only the counters are shared.

#include "engine/engine_subscriber.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "zmq.h"
#include "zmq.hpp"
#include "zmq_addon.hpp"

namespace kvlearn {
namespace {

// This Abseil's string_view is its own type, not std::string_view.
absl::string_view A(std::string_view s) { return absl::string_view(s.data(), s.size()); }

constexpr uint64_t kEndOfReplay = ~uint64_t{0};  // -1 as 8 big-endian bytes
constexpr size_t kMaxMessagesPerWake = 4096;     // per socket, for fairness between engines

// Counters that cannot be driven past 2^64 - 1 by a hostile stream (a
// sequence jump of 2^64 - 2) stay at the top instead of wrapping to a small
// number. Only the subscriber thread adds, so load and store suffice.
void AddSaturating(std::atomic<uint64_t>& counter, uint64_t n) {
  const uint64_t before = counter.load(std::memory_order_relaxed);
  const uint64_t room = ~uint64_t{0} - before;
  counter.store(n > room ? ~uint64_t{0} : before + n, std::memory_order_relaxed);
}

uint64_t SequenceFromBytes(const zmq::message_t& m) {
  const auto* p = static_cast<const uint8_t*>(m.data());
  uint64_t seq = 0;
  for (size_t i = 0; i < 8; ++i) seq = (seq << 8) | p[i];
  return seq;
}

std::string SequenceBytes(uint64_t seq) {
  std::string b(8, '\0');
  for (int i = 0; i < 8; ++i) b[7 - i] = static_cast<char>((seq >> (8 * i)) & 0xff);
  return b;
}

std::string_view ViewOf(const zmq::message_t& m) {
  return {static_cast<const char*>(m.data()), m.size()};
}

absl::Status CheckNodeId(std::string_view id) {
  if (id.empty() || id.size() > 128) {
    return absl::InvalidArgumentError(
        absl::StrCat("node id '", A(id), "': must be 1..128 characters"));
  }
  for (const char c : id) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == ':' || c == '/' || c == '-';
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("node id '", A(id), "': only [A-Za-z0-9._:/-] are allowed"));
    }
  }
  return absl::OkStatus();
}

std::vector<std::string_view> SplitCommas(std::string_view s) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t comma = s.find(',', start);
    std::string_view part =
        s.substr(start, comma == std::string_view::npos ? s.npos : comma - start);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
    parts.push_back(part);
    if (comma == std::string_view::npos) return parts;
    start = comma + 1;
  }
}

// "node=endpoint" or "endpoint".
std::pair<std::string_view, std::string_view> SplitNamed(std::string_view entry) {
  const size_t eq = entry.find('=');
  if (eq == std::string_view::npos) return {{}, entry};
  return {entry.substr(0, eq), entry.substr(eq + 1)};
}

absl::Status CheckAddress(std::string_view address, std::string_view flag) {
  if (address.find("://") == std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(A(flag), ": '", A(address), "' is not a ZMQ address (e.g. tcp://host:5557)"));
  }
  return absl::OkStatus();
}

struct Counters {
  std::atomic<uint64_t> batches{0}, stored_events{0}, removed_events{0}, cleared_events{0},
      stored_blocks{0}, removed_blocks{0}, malformed{0}, unknown_tags{0}, duplicates{0}, gaps{0},
      replay_requests{0}, replay_timeouts{0}, batches_replayed{0}, events_replayed{0},
      sequences_lost{0};
  std::atomic<uint64_t> restarts{0}, connection_drops{0}, replay_connection_drops{0};
  std::atomic<int64_t> next_sequence{-1};
  mutable std::mutex error_mu;
  std::string last_error;  // guarded by error_mu
};

}  // namespace

absl::StatusOr<std::vector<EngineEndpoint>> ParseEngineEndpoints(std::string_view events,
                                                                 std::string_view replay) {
  std::vector<EngineEndpoint> out;
  for (const std::string_view entry : SplitCommas(events)) {
    if (entry.empty()) {
      return absl::InvalidArgumentError("--engine-events: empty entry");
    }
    auto [node, address] = SplitNamed(entry);
    if (node.empty() && entry.find('=') == std::string_view::npos) node = address;
    if (absl::Status s = CheckNodeId(node); !s.ok()) return s;
    if (absl::Status s = CheckAddress(address, "--engine-events"); !s.ok()) return s;
    for (const EngineEndpoint& e : out) {
      if (e.node_id == node) {
        return absl::InvalidArgumentError(
            absl::StrCat("--engine-events: node id '", A(node), "' given twice"));
      }
    }
    out.push_back({std::string(node), std::string(address), ""});
  }
  if (replay.empty()) return out;
  const std::vector<std::string_view> entries = SplitCommas(replay);
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].empty()) continue;
    const auto [node, address] = SplitNamed(entries[i]);
    if (absl::Status s = CheckAddress(address, "--engine-replay"); !s.ok()) return s;
    EngineEndpoint* target = nullptr;
    if (entries[i].find('=') != std::string_view::npos) {
      for (EngineEndpoint& e : out) {
        if (e.node_id == node) target = &e;
      }
      if (target == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("--engine-replay: node '", A(node), "' is not in --engine-events"));
      }
    } else {
      if (i >= out.size()) {
        return absl::InvalidArgumentError(absl::StrCat("--engine-replay: entry ", i + 1,
                                                       " has no events endpoint at that position"));
      }
      target = &out[i];
    }
    if (!target->replay_endpoint.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--engine-replay: node '", target->node_id, "' given two replay addresses"));
    }
    target->replay_endpoint = std::string(address);
  }
  return out;
}

namespace {

// One engine.
struct Link {
  EngineEndpoint config;
  zmq::socket_t sub;
  zmq::socket_t replay;  // DEALER; null without replay
  // PAIR sockets receiving ZMQ_EVENT_DISCONNECTED of sub and of replay.
  zmq::socket_t sub_monitor;
  zmq::socket_t replay_monitor;  // null without replay
  bool drop_logged = false;      // a dropped connection was logged once
  Counters counters;

  std::optional<uint64_t> start;         // where the stream is expected to begin
  std::optional<uint64_t> next;          // next sequence expected
  std::optional<uint64_t> highest_live;  // highest sequence received on SUB
  bool replay_pending = false;
  // highest_live when the request went out: every sequence up to it was
  // published before the request, so the answer has it if the engine still does.
  std::optional<uint64_t> replay_horizon;
  std::chrono::steady_clock::time_point replay_deadline;
  std::map<uint64_t, std::string> held;
  bool restarted = false;  // flag the next delivered batch
};

}  // namespace

struct EngineSubscriber::State {
  EngineSubscriberOptions options;
  Callback callback;
  zmq::context_t context{1};
  std::vector<std::unique_ptr<Link>> links;
  std::atomic<bool> stop{false};
  std::thread thread;
  EngineEventBatch scratch;    // every payload is decoded into it (thread only)
  uint64_t monitors_made = 0;  // names each monitor's inproc address

  int64_t MaxMessageBytes() const {
    return static_cast<int64_t>(options.decode.max_payload_bytes + 64);
  }
  zmq::socket_t MonitorDisconnects(zmq::socket_t& socket);
  void ConnectSub(Link& l);
  void ConnectReplay(Link& l);
  void Run();
  void DrainMonitor(Link& l, bool replay_socket);
  void OnConnectionDropped(Link& l, bool replay_socket);
  void DrainLive(Link& l);
  void DrainReplay(Link& l);
  void OnLive(Link& l, uint64_t seq, std::string_view payload);
  void OnReplay(Link& l, uint64_t seq, std::string_view payload);
  void Deliver(Link& l, uint64_t seq, std::string_view payload, bool replayed);
  void FlushHeld(Link& l);
  void SkipTo(Link& l, uint64_t target);
  void RequestReplay(Link& l, uint64_t from);
  void EndReplay(Link& l, bool answered);
  void Malformed(Link& l, std::string error);
  void SyncNext(Link& l) {
    if (l.next.has_value()) l.counters.next_sequence.store(static_cast<int64_t>(*l.next));
  }
};

// libzmq ends a connection that brings a message over ZMQ_MAXMSGSIZE as a
// protocol error and, unlike after a network error, never reconnects it: the
// engine's feed would stop for good. Its only trace is the monitor's
// ZMQ_EVENT_DISCONNECTED, so every socket is watched for it.
zmq::socket_t EngineSubscriber::State::MonitorDisconnects(zmq::socket_t& socket) {
  const std::string address = absl::StrCat("inproc://kvlearn-engine-monitor-", monitors_made++);
  if (zmq_socket_monitor(socket.handle(), address.c_str(), ZMQ_EVENT_DISCONNECTED) != 0) {
    throw zmq::error_t();
  }
  zmq::socket_t pair(context, zmq::socket_type::pair);
  pair.set(zmq::sockopt::linger, 0);
  pair.connect(address);
  return pair;
}

// A fresh SUB socket (closing the one it replaces): the subscription is
// renewed, and what was published meanwhile is a gap at the next live batch.
void EngineSubscriber::State::ConnectSub(Link& l) {
  zmq::socket_t s(context, zmq::socket_type::sub);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::rcvhwm, options.rcv_hwm);
  s.set(zmq::sockopt::maxmsgsize, MaxMessageBytes());
  s.set(zmq::sockopt::subscribe, options.topic);
  zmq::socket_t monitor = MonitorDisconnects(s);
  s.connect(l.config.endpoint);
  l.sub = std::move(s);
  l.sub_monitor = std::move(monitor);
}

// A fresh DEALER socket (closing the one it replaces, and with it the tail
// of an answer that is no longer awaited).
void EngineSubscriber::State::ConnectReplay(Link& l) {
  zmq::socket_t s(context, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::rcvhwm, 0);  // an answer is as long as the engine's buffer
  s.set(zmq::sockopt::maxmsgsize, MaxMessageBytes());
  zmq::socket_t monitor = MonitorDisconnects(s);
  s.connect(l.config.replay_endpoint);
  l.replay = std::move(s);
  l.replay_monitor = std::move(monitor);
}

void EngineSubscriber::State::OnConnectionDropped(Link& l, bool replay_socket) {
  (replay_socket ? l.counters.replay_connection_drops : l.counters.connection_drops).fetch_add(1);
  if (!l.drop_logged) {
    l.drop_logged = true;
    std::cerr << "kvlearn: engine '" << l.config.node_id << "': the connection to "
              << (replay_socket ? l.config.replay_endpoint : l.config.endpoint)
              << " ended (the engine went away, or sent a message over "
              << options.decode.max_payload_bytes
              << " bytes); reconnected at once, the gap replayed where the engine can. Later "
                 "drops of this engine are only counted (kvlearn_engine_connection_drops_total)"
              << std::endl;
  }
  if (!replay_socket) {
    ConnectSub(l);
    return;
  }
  ConnectReplay(l);
  if (!l.replay_pending) return;
  // An answer comes in sequence order from `next`, so the message libzmq
  // refused is `next` (unless the engine went away, or answer messages read
  // off the wire before it were dropped with the connection): give up that
  // one sequence and ask again for the rest of the hole. Each drop moves
  // `next` on, so this ends.
  l.replay_pending = false;
  SkipTo(l, *l.next + 1);
  FlushHeld(l);
  if (!l.held.empty()) RequestReplay(l, *l.next);
}

void EngineSubscriber::State::DrainMonitor(Link& l, bool replay_socket) {
  zmq::socket_t& monitor = replay_socket ? l.replay_monitor : l.sub_monitor;
  std::vector<zmq::message_t> frames;
  bool dropped = false;
  while (monitor) {
    frames.clear();
    if (!zmq::recv_multipart(monitor, std::back_inserter(frames), zmq::recv_flags::dontwait)) {
      break;
    }
    // [event id (2 bytes) + value (4 bytes), endpoint]
    if (frames.empty() || frames[0].size() < 2) continue;
    uint16_t event = 0;
    std::memcpy(&event, frames[0].data(), sizeof(event));
    if (event == ZMQ_EVENT_DISCONNECTED) dropped = true;
  }
  if (dropped) OnConnectionDropped(l, replay_socket);
}

void EngineSubscriber::State::Malformed(Link& l, std::string error) {
  l.counters.malformed.fetch_add(1);
  std::lock_guard<std::mutex> lock(l.counters.error_mu);
  l.counters.last_error = std::move(error);
}

void EngineSubscriber::State::Deliver(Link& l, uint64_t seq, std::string_view payload,
                                      bool replayed) {
  // Decoded into the same batch every time: a callback that hands back an
  // applied batch's storage keeps the stream free of per-event allocations.
  EngineEventBatch* batch = &scratch;
  if (absl::Status s =
          DecodeKvEventBatch(std::span<const uint8_t>(
                                 reinterpret_cast<const uint8_t*>(payload.data()), payload.size()),
                             options.decode, batch);
      !s.ok()) {
    Malformed(l, absl::StrCat("sequence ", seq, ": ", s.message()));
    return;
  }
  Counters& c = l.counters;
  for (const EngineEvent& event : batch->events) {
    if (const auto* stored = std::get_if<BlockStoredEvent>(&event)) {
      c.stored_events.fetch_add(1);
      c.stored_blocks.fetch_add(stored->block_hashes.size());
    } else if (const auto* removed = std::get_if<BlockRemovedEvent>(&event)) {
      c.removed_events.fetch_add(1);
      c.removed_blocks.fetch_add(removed->block_hashes.size());
    } else {
      c.cleared_events.fetch_add(1);
    }
  }
  c.unknown_tags.fetch_add(batch->unknown_events);
  batch->engine_restarted = l.restarted;
  l.restarted = false;
  if (replayed) {
    c.batches_replayed.fetch_add(1);
    c.events_replayed.fetch_add(batch->events.size());
  }
  // Counted before the callback, so a reader that saw the batch arrive also
  // sees it in Stats(): it is delivered and `seq + 1` is the next expected
  // (every caller advances next past seq right after).
  c.batches.fetch_add(1);
  c.next_sequence.store(static_cast<int64_t>(seq + 1));
  callback(l.config.node_id, seq, *batch);
}

void EngineSubscriber::State::FlushHeld(Link& l) {
  while (!l.held.empty() && l.held.begin()->first <= *l.next) {
    auto it = l.held.begin();
    if (it->first == *l.next) {
      Deliver(l, it->first, it->second, /*replayed=*/false);
      ++*l.next;
    }
    l.held.erase(it);
  }
}

void EngineSubscriber::State::SkipTo(Link& l, uint64_t target) {
  while (*l.next < target) {
    auto it = l.held.begin();
    if (it != l.held.end() && it->first < target) {
      AddSaturating(l.counters.sequences_lost, it->first - *l.next);
      *l.next = it->first;
      FlushHeld(l);
    } else {
      AddSaturating(l.counters.sequences_lost, target - *l.next);
      *l.next = target;
    }
  }
}

void EngineSubscriber::State::RequestReplay(Link& l, uint64_t from) {
  l.replay_pending = true;
  l.replay_horizon = l.highest_live;
  l.replay_deadline = std::chrono::steady_clock::now() + options.replay_timeout;
  l.counters.replay_requests.fetch_add(1);
  const std::string seq = SequenceBytes(from);
  // [empty delimiter, start]: the ROUTER sees [identity, "", start]. If the
  // send fails the request times out and the hole is counted lost.
  if (l.replay.send(zmq::const_buffer(), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
    (void)l.replay.send(zmq::buffer(seq), zmq::send_flags::dontwait);
  }
}

void EngineSubscriber::State::EndReplay(Link& l, bool answered) {
  l.replay_pending = false;
  FlushHeld(l);
  if (l.held.empty()) return;
  // A hole is left before the first held batch. If it was not yet published
  // when the request went out (a request at start, or a second gap during an
  // answer), ask again from it: the new horizon covers it.
  if (answered && (!l.replay_horizon.has_value() || *l.next > *l.replay_horizon)) {
    RequestReplay(l, *l.next);
    return;
  }
  // The engine no longer has the hole (or did not answer).
  SkipTo(l, l.held.begin()->first);
  FlushHeld(l);
}

void EngineSubscriber::State::OnLive(Link& l, uint64_t seq, std::string_view payload) {
  if (!l.next.has_value()) l.next = seq;  // no start: the stream begins here
  // PUB neither reorders nor repeats, so live numbering that falls back
  // started over: the engine restarted. Either back to 0 after a later live
  // sequence (a 0 after 0 only arrived from a replay is a duplicate), or, for
  // the first live batch, below the start: the sequences before the start
  // were published before this subscriber joined, so a live one below it
  // comes from a newer process. What was outstanding belongs to the previous
  // life.
  const bool restarted = l.highest_live.has_value() ? seq == 0 && *l.highest_live > 0
                                                    : l.start.has_value() && seq < *l.start;
  if (restarted) {
    l.counters.restarts.fetch_add(1);
    if (l.replay_pending) {
      ConnectReplay(l);
      l.replay_pending = false;
    }
    l.held.clear();
    l.next = 0;
    l.highest_live.reset();
    l.restarted = true;
  }
  if (!l.highest_live.has_value() || seq > *l.highest_live) l.highest_live = seq;
  if (seq < *l.next || l.held.contains(seq)) {
    l.counters.duplicates.fetch_add(1);
    return;
  }
  if (seq == *l.next) {
    Deliver(l, seq, payload, /*replayed=*/false);
    ++*l.next;
    FlushHeld(l);
    return;
  }
  // A gap before `seq`.
  if (!l.replay_pending) {
    l.counters.gaps.fetch_add(1);
    if (!l.replay) {
      SkipTo(l, seq);
      Deliver(l, seq, payload, /*replayed=*/false);
      ++*l.next;
      return;
    }
    RequestReplay(l, *l.next);
  }
  if (l.held.size() >= options.max_held_batches) {
    // Waited too long for the hole: give it up, and the rest of the answer.
    ConnectReplay(l);
    l.replay_pending = false;
    SkipTo(l, seq);
    Deliver(l, seq, payload, /*replayed=*/false);
    ++*l.next;
    FlushHeld(l);
    return;
  }
  l.held.emplace(seq, std::string(payload));
}

void EngineSubscriber::State::OnReplay(Link& l, uint64_t seq, std::string_view payload) {
  if (!l.replay_pending) return;  // the tail of an answer given up on
  if (seq == kEndOfReplay) {
    EndReplay(l, /*answered=*/true);
    return;
  }
  if (seq < *l.next) return;          // already delivered
  if (seq > *l.next) SkipTo(l, seq);  // the engine's buffer starts past the hole
  if (seq < *l.next) return;          // a held copy of it was just delivered
  l.held.erase(seq);
  Deliver(l, seq, payload, /*replayed=*/true);
  ++*l.next;
  FlushHeld(l);
}

void EngineSubscriber::State::DrainLive(Link& l) {
  std::vector<zmq::message_t> frames;
  for (size_t n = 0; n < kMaxMessagesPerWake; ++n) {
    frames.clear();
    if (!zmq::recv_multipart(l.sub, std::back_inserter(frames), zmq::recv_flags::dontwait)) return;
    // [topic, sequence, payload]
    if (frames.size() != 3 || frames[1].size() != 8) {
      Malformed(l, absl::StrCat("message of ", frames.size(),
                                " frames; expected topic, 8-byte sequence, payload"));
      continue;
    }
    OnLive(l, SequenceFromBytes(frames[1]), ViewOf(frames[2]));
    SyncNext(l);
  }
}

void EngineSubscriber::State::DrainReplay(Link& l) {
  std::vector<zmq::message_t> frames;
  for (size_t n = 0; n < kMaxMessagesPerWake && l.replay; ++n) {
    frames.clear();
    if (!zmq::recv_multipart(l.replay, std::back_inserter(frames), zmq::recv_flags::dontwait)) {
      return;
    }
    // ["", sequence, payload]
    if (frames.size() != 3 || frames[0].size() != 0 || frames[1].size() != 8) {
      Malformed(l, absl::StrCat("replay message of ", frames.size(),
                                " frames; expected empty, 8-byte sequence, payload"));
      continue;
    }
    OnReplay(l, SequenceFromBytes(frames[1]), ViewOf(frames[2]));
    SyncNext(l);
  }
}

void EngineSubscriber::State::Run() {
  for (auto& l : links) {
    if (!l->start.has_value()) continue;
    l->next = *l->start;
    SyncNext(*l);
    if (l->replay) RequestReplay(*l, *l->start);
  }
  std::vector<zmq::pollitem_t> items;
  enum class Socket { kLive, kReplay, kLiveMonitor, kReplayMonitor };
  std::vector<std::pair<Link*, Socket>> owners;
  while (!stop.load()) {
    items.clear();
    owners.clear();
    auto timeout = options.poll_interval;
    const auto now = std::chrono::steady_clock::now();
    for (auto& l : links) {
      items.push_back({l->sub.handle(), 0, ZMQ_POLLIN, 0});
      owners.emplace_back(l.get(), Socket::kLive);
      if (l->replay) {
        items.push_back({l->replay.handle(), 0, ZMQ_POLLIN, 0});
        owners.emplace_back(l.get(), Socket::kReplay);
      }
      // After the sockets they watch: what arrived before a drop is read
      // before the socket is replaced.
      items.push_back({l->sub_monitor.handle(), 0, ZMQ_POLLIN, 0});
      owners.emplace_back(l.get(), Socket::kLiveMonitor);
      if (l->replay_monitor) {
        items.push_back({l->replay_monitor.handle(), 0, ZMQ_POLLIN, 0});
        owners.emplace_back(l.get(), Socket::kReplayMonitor);
      }
      if (l->replay_pending) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(l->replay_deadline - now);
        timeout =
            std::clamp(left + std::chrono::milliseconds(1), std::chrono::milliseconds(0), timeout);
      }
    }
    zmq::poll(items, timeout);
    for (size_t i = 0; i < items.size(); ++i) {
      if (!(items[i].revents & ZMQ_POLLIN)) continue;
      Link& l = *owners[i].first;
      switch (owners[i].second) {
        case Socket::kLive:
          DrainLive(l);
          break;
        case Socket::kReplay:
          DrainReplay(l);
          break;
        case Socket::kLiveMonitor:
          DrainMonitor(l, /*replay_socket=*/false);
          break;
        case Socket::kReplayMonitor:
          DrainMonitor(l, /*replay_socket=*/true);
          break;
      }
      SyncNext(l);
    }
    const auto after = std::chrono::steady_clock::now();
    for (auto& l : links) {
      if (l->replay_pending && after >= l->replay_deadline) {
        l->counters.replay_timeouts.fetch_add(1);
        ConnectReplay(*l);  // drops a late answer
        EndReplay(*l, /*answered=*/false);
        SyncNext(*l);
      }
    }
  }
}

absl::StatusOr<std::unique_ptr<EngineSubscriber>> EngineSubscriber::Start(
    EngineSubscriberOptions options, Callback callback) {
  if (options.endpoints.empty()) {
    return absl::InvalidArgumentError("engine subscriber: no endpoints");
  }
  if (!callback) return absl::InvalidArgumentError("engine subscriber: no callback");
  for (size_t i = 0; i < options.endpoints.size(); ++i) {
    const EngineEndpoint& e = options.endpoints[i];
    if (absl::Status s = CheckNodeId(e.node_id); !s.ok()) return s;
    if (e.endpoint.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("engine '", e.node_id, "': no endpoint"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (options.endpoints[j].node_id == e.node_id) {
        return absl::InvalidArgumentError(
            absl::StrCat("engine subscriber: node id '", e.node_id, "' given twice"));
      }
    }
  }
  auto state = std::make_unique<State>();
  state->options = std::move(options);
  state->callback = std::move(callback);
  State& s = *state;
  for (const EngineEndpoint& e : s.options.endpoints) {
    auto link = std::make_unique<Link>();
    link->config = e;
    link->start = e.start_sequence.has_value() ? e.start_sequence : s.options.start_sequence;
    try {
      s.ConnectSub(*link);
      if (!e.replay_endpoint.empty()) s.ConnectReplay(*link);
    } catch (const zmq::error_t& err) {
      return absl::InvalidArgumentError(absl::StrCat("engine '", e.node_id, "' (", e.endpoint,
                                                     e.replay_endpoint.empty() ? "" : ", ",
                                                     e.replay_endpoint, "): ", err.what()));
    }
    s.links.push_back(std::move(link));
  }
  s.thread = std::thread([&s] { s.Run(); });
  return std::unique_ptr<EngineSubscriber>(new EngineSubscriber(std::move(state)));
}

EngineSubscriber::EngineSubscriber(std::unique_ptr<State> state) : state_(std::move(state)) {}

EngineSubscriber::~EngineSubscriber() { Stop(); }

void EngineSubscriber::Stop() {
  if (!state_->thread.joinable()) return;
  state_->stop.store(true);
  state_->thread.join();
}

std::vector<EngineEndpointStats> EngineSubscriber::Stats() const {
  std::vector<EngineEndpointStats> out;
  out.reserve(state_->links.size());
  for (const auto& l : state_->links) {
    const Counters& c = l->counters;
    EngineEndpointStats s;
    s.node_id = l->config.node_id;
    s.batches = c.batches.load();
    s.stored_events = c.stored_events.load();
    s.removed_events = c.removed_events.load();
    s.cleared_events = c.cleared_events.load();
    s.stored_blocks = c.stored_blocks.load();
    s.removed_blocks = c.removed_blocks.load();
    s.malformed = c.malformed.load();
    s.unknown_tags = c.unknown_tags.load();
    s.duplicates = c.duplicates.load();
    s.gaps = c.gaps.load();
    s.replay_requests = c.replay_requests.load();
    s.replay_timeouts = c.replay_timeouts.load();
    s.batches_replayed = c.batches_replayed.load();
    s.events_replayed = c.events_replayed.load();
    s.sequences_lost = c.sequences_lost.load();
    s.restarts = c.restarts.load();
    s.connection_drops = c.connection_drops.load();
    s.replay_connection_drops = c.replay_connection_drops.load();
    s.next_sequence = c.next_sequence.load();
    {
      std::lock_guard<std::mutex> lock(c.error_mu);
      s.last_error = c.last_error;
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace kvlearn
