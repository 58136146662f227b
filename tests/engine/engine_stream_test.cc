// EnginePublisher -> EngineSubscriber over real ZMQ sockets on 127.0.0.1
// (ports chosen by ZMQ): both encodings and hash types, gaps recovered by
// replay or counted lost, malformed payloads, unknown tags and fields,
// duplicates, two engines at once, per-endpoint start sequences, restarts,
// and a trace replay whose reconstructed resident set must equal the
// engine's.
//
// No assertion depends on time: waits poll a condition and give up only
// after a generous limit, so a loaded machine makes them slower, not flaky.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "datasets/mooncake_reader.h"
#include "engine/engine_publisher.h"
#include "engine/engine_subscriber.h"
#include "engine/kv_event_encoder.h"
#include "engine/prefix_cache_engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/msgpack_builder.h"
#include "zmq.hpp"
#include "zmq_addon.hpp"

namespace kvlearn {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kShippedTrace[] = KVLEARN_SOURCE_DIR "/datasets/mooncake_conversation_trace.jsonl";
constexpr auto kPatience = std::chrono::seconds(120);

// Polls `done` until it holds or kPatience has passed.
bool WaitUntil(const std::function<bool()>& done) {
  const auto give_up = std::chrono::steady_clock::now() + kPatience;
  while (!done()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

// Everything the subscriber delivered, and the resident set it implies.
class Received {
 public:
  EngineSubscriber::Callback Callback() {
    return [this](const std::string& node, uint64_t seq, const EngineEventBatch& batch) {
      std::lock_guard<std::mutex> lock(mu_);
      nodes_.push_back(node);
      seqs_.push_back(seq);
      batches_.push_back(batch);
      for (const EngineEvent& event : batch.events) {
        if (const auto* s = std::get_if<BlockStoredEvent>(&event)) {
          resident_.insert(s->block_hashes.begin(), s->block_hashes.end());
        } else if (const auto* r = std::get_if<BlockRemovedEvent>(&event)) {
          for (const uint64_t id : r->block_hashes) resident_.erase(id);
        } else {
          resident_.clear();
        }
      }
    };
  }
  std::vector<uint64_t> seqs() const {
    std::lock_guard<std::mutex> lock(mu_);
    return seqs_;
  }
  std::vector<std::string> nodes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return nodes_;
  }
  std::vector<EngineEventBatch> batches() const {
    std::lock_guard<std::mutex> lock(mu_);
    return batches_;
  }
  std::vector<uint64_t> resident() const {
    std::lock_guard<std::mutex> lock(mu_);
    return {resident_.begin(), resident_.end()};
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> nodes_;
  std::vector<uint64_t> seqs_;
  std::vector<EngineEventBatch> batches_;
  std::set<uint64_t> resident_;
};

std::unique_ptr<EnginePublisher> StartPublisher(EnginePublisherOptions options) {
  auto publisher = EnginePublisher::Start(std::move(options));
  EXPECT_TRUE(publisher.ok()) << publisher.status();
  return publisher.ok() ? std::move(*publisher) : nullptr;
}

EnginePublisherOptions WithReplay() {
  EnginePublisherOptions o;
  o.replay_endpoint = "tcp://127.0.0.1:*";
  return o;
}

std::unique_ptr<EngineSubscriber> Subscribe(const EnginePublisher& publisher, Received& received,
                                            std::optional<uint64_t> start_sequence = std::nullopt,
                                            const std::string& node = "engine-0") {
  EngineSubscriberOptions o;
  o.endpoints.push_back({node, publisher.endpoint(), publisher.replay_endpoint()});
  o.start_sequence = start_sequence;
  auto subscriber = EngineSubscriber::Start(std::move(o), received.Callback());
  EXPECT_TRUE(subscriber.ok()) << subscriber.status();
  return subscriber.ok() ? std::move(*subscriber) : nullptr;
}

// Waits until the subscriber has dealt with every sequence below `n`.
bool CaughtUp(const EngineSubscriber& subscriber, int64_t n, size_t endpoint = 0) {
  return WaitUntil([&] { return subscriber.Stats().at(endpoint).next_sequence >= n; });
}

// Waits until the subscriber's next sequence is `n` exactly (after a restart
// it falls back, so an earlier, higher value would satisfy CaughtUp).
bool NextSequenceIs(const EngineSubscriber& subscriber, int64_t n) {
  return WaitUntil([&] { return subscriber.Stats().at(0).next_sequence == n; });
}

EngineEventBatch Batch(double ts, std::vector<EngineEvent> events) {
  EngineEventBatch b;
  b.ts = ts;
  b.events = std::move(events);
  return b;
}

BlockStoredEvent Stored(std::vector<uint64_t> hashes, std::optional<uint64_t> parent) {
  BlockStoredEvent e;
  e.num_token_ids = static_cast<uint32_t>(hashes.size() * 16);
  e.block_hashes = std::move(hashes);
  e.parent_block_hash = parent;
  e.block_size = 16;
  e.tokens_per_block = 16;
  e.medium = KvMedium::kGpu;
  return e;
}

BlockRemovedEvent Removed(std::vector<uint64_t> hashes) {
  BlockRemovedEvent e;
  e.block_hashes = std::move(hashes);
  e.medium = KvMedium::kGpu;
  return e;
}

std::vector<EngineEventBatch> SmallStream() {
  return {Batch(1.0, {Stored({1, 2, 0xFFFFFFFFFFFFFFFFu}, std::nullopt)}),
          Batch(2.0, {Removed({0xFFFFFFFFFFFFFFFFu}), Stored({3}, 2)}),
          Batch(3.0, {AllBlocksClearedEvent{}, Stored({4}, std::nullopt)})};
}

class EngineStreamFormats
    : public ::testing::TestWithParam<std::tuple<KvEventEncoding, KvHashEncoding>> {
 protected:
  KvEventEncodeOptions encode() const { return {std::get<0>(GetParam()), std::get<1>(GetParam())}; }
};

TEST_P(EngineStreamFormats, DeliversEveryBatchInOrder) {
  auto publisher = StartPublisher(WithReplay());
  ASSERT_NE(publisher, nullptr);
  Received received;
  auto subscriber = Subscribe(*publisher, received);
  ASSERT_NE(subscriber, nullptr);
  ASSERT_TRUE(publisher->WaitForSubscribers(1, kPatience));

  const std::vector<EngineEventBatch> sent = SmallStream();
  for (const EngineEventBatch& b : sent) publisher->Publish(EncodeKvEventBatch(b, encode()));
  ASSERT_TRUE(CaughtUp(*subscriber, 3));

  EXPECT_THAT(received.seqs(), ElementsAre(0u, 1u, 2u));
  EXPECT_EQ(received.batches(), sent);
  EXPECT_THAT(received.nodes(), ElementsAre("engine-0", "engine-0", "engine-0"));
  EXPECT_THAT(received.resident(), ElementsAre(4u));
  const EngineEndpointStats s = subscriber->Stats().at(0);
  EXPECT_EQ(s.batches, 3u);
  EXPECT_EQ(s.stored_events, 3u);
  EXPECT_EQ(s.removed_events, 1u);
  EXPECT_EQ(s.cleared_events, 1u);
  EXPECT_EQ(s.stored_blocks, 5u);
  EXPECT_EQ(s.removed_blocks, 1u);
  EXPECT_EQ(s.gaps, 0u);
  EXPECT_EQ(s.sequences_lost, 0u);
  EXPECT_EQ(s.malformed, 0u);
}

// The trace replayed by PrefixCacheEngine with a forced drop: the set the
// subscriber rebuilds from stored/removed events is the engine's own.
TEST_P(EngineStreamFormats, TraceReplayRebuildsTheResidentSet) {
  const auto trace = ReadMooncakeTrace(kShippedTrace, {});
  ASSERT_TRUE(trace.ok()) << trace.status();
  EnginePublisherOptions options = WithReplay();
  options.drop_sequence = 5;
  auto publisher = StartPublisher(options);
  ASSERT_NE(publisher, nullptr);
  Received received;
  auto subscriber = Subscribe(*publisher, received, /*start_sequence=*/0);
  ASSERT_NE(subscriber, nullptr);
  ASSERT_TRUE(publisher->WaitForSubscribers(1, kPatience));

  PrefixCacheEngine engine({.capacity_blocks = 200, .block_size = 512});
  int64_t published = 0;
  for (size_t i = 0; i < 300; ++i) {
    const TraceRequest& r = trace->requests[i];
    const EngineEventBatch batch =
        engine.Serve(trace->BlocksOf(r), r.input_length, r.timestamp_ms / 1e3);
    if (batch.events.empty()) continue;
    publisher->Publish(EncodeKvEventBatch(batch, encode()));
    ++published;
  }
  ASSERT_GT(published, 5);
  ASSERT_TRUE(CaughtUp(*subscriber, published));

  EXPECT_EQ(received.resident(), engine.ResidentBlocks());
  EXPECT_GT(engine.stats().evicted_blocks, 0u);
  std::vector<uint64_t> want(published);
  for (int64_t i = 0; i < published; ++i) want[i] = i;
  EXPECT_EQ(received.seqs(), want);
  const EngineEndpointStats s = subscriber->Stats().at(0);
  EXPECT_EQ(s.sequences_lost, 0u);
  EXPECT_GE(s.batches_replayed, 1u);  // at least the dropped one
  EXPECT_EQ(publisher->stats().dropped, 1u);
}

INSTANTIATE_TEST_SUITE_P(
    AllForms, EngineStreamFormats,
    ::testing::Combine(::testing::Values(KvEventEncoding::kArray, KvEventEncoding::kMap),
                       ::testing::Values(KvHashEncoding::kInt, KvHashEncoding::kBytes)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param) == KvEventEncoding::kMap ? "Map" : "Array") +
             (std::get<1>(info.param) == KvHashEncoding::kBytes ? "BytesHashes" : "IntHashes");
    });

TEST(EngineStreamTest, GapIsReplayed) {
  EnginePublisherOptions options = WithReplay();
  options.drop_sequence = 2;
  auto publisher = StartPublisher(options);
  ASSERT_NE(publisher, nullptr);
  Received received;
  auto subscriber = Subscribe(*publisher, received);
  ASSERT_NE(subscriber, nullptr);
  ASSERT_TRUE(publisher->WaitForSubscribers(1, kPatience));

  for (uint64_t i = 0; i < 6; ++i) {
    publisher->Publish(EncodeKvEventBatch(Batch(i, {Stored({100 + i}, std::nullopt)}), {}));
  }
  ASSERT_TRUE(CaughtUp(*subscriber, 6));
  EXPECT_THAT(received.seqs(), ElementsAre(0u, 1u, 2u, 3u, 4u, 5u));
  EXPECT_THAT(received.resident(), ElementsAre(100u, 101u, 102u, 103u, 104u, 105u));
  const EngineEndpointStats s = subscriber->Stats().at(0);
  EXPECT_EQ(s.gaps, 1u);
  EXPECT_GE(s.replay_requests, 1u);
  EXPECT_GE(s.batches_replayed, 1u);
  EXPECT_GE(s.events_replayed, 1u);
  EXPECT_EQ(s.sequences_lost, 0u);
  EXPECT_GE(publisher->stats().replay_requests, 1u);
}

TEST(EngineStreamTest, GapWithoutReplaySocketIsLost) {
  EnginePublisherOptions options;
  options.drop_sequence = 1;
  auto publisher = StartPublisher(options);
  ASSERT_NE(publisher, nullptr);
  Received received;
  auto subscriber = Subscribe(*publisher, received);
  ASSERT_NE(subscriber, nullptr);
  ASSERT_TRUE(publisher->WaitForSubscribers(1, kPatience));

  for (uint64_t i = 0; i < 4; ++i) {
    publisher->Publish(EncodeKvEventBatch(Batch(i, {Removed({i})}), {}));
  }
  ASSERT_TRUE(CaughtUp(*subscriber, 4));
  EXPECT_THAT(received.seqs(), ElementsAre(0u, 2u, 3u));
  const EngineEndpointStats s = subscriber->Stats().at(0);
  EXPECT_EQ(s.gaps, 1u);
  EXPECT_EQ(s.sequences_lost, 1u);
  EXPECT_EQ(s.replay_requests, 0u);
}

// A replay buffer of one batch: by the time the request for 1 is served,
// batch 2 (which revealed the gap) has pushed 1 out.
TEST(EngineStreamTest, GapOlderThanTheReplayBufferIsLost) {
  EnginePublisherOptions options = WithReplay();
  options.drop_sequence = 1;
  options.replay_buffer_batches = 1;
  auto publisher = StartPublisher(options);
  ASSERT_NE(publisher, nullptr);
  Received received;
  auto subscriber = Subscribe(*publisher, received);
  ASSERT_NE(subscriber, nullptr);
  ASSERT_TRUE(publisher->WaitForSubscribers(1, kPatience));

  for (uint64_t i = 0; i < 4; ++i) {
    publisher->Publish(EncodeKvEventBatch(Batch(i, {Removed({i})}), {}));
  }
  ASSERT_TRUE(CaughtUp(*subscriber, 4));
  EXPECT_THAT(received.seqs(), ElementsAre(0u, 2u, 3u));
  const EngineEndpointStats s = subscriber->Stats().at(0);
  EXPECT_EQ(s.gaps, 1u);
  EXPECT_EQ(s.sequences_lost, 1u);
}

TEST(EngineStreamTest, MalformedPayloadsUnknownTagsAndFieldsDoNotStopTheStream) {
  auto publisher = StartPublisher(WithReplay());
  ASSERT_NE(publisher, nullptr);
  Received received;
  auto subscriber = Subscribe(*publisher, received);
  ASSERT_NE(subscriber, nullptr);
  ASSERT_TRUE(publisher->WaitForSubscribers(1, kPatience));

  const std::string good = EncodeKvEventBatch(Batch(1, {Stored({1}, std::nullopt)}), {});
  publisher->Publish(good);                             // 0
  publisher->Publish(good.substr(0, good.size() - 3));  // 1: truncated
  MsgpackBuilder unknown;                               // 2: an unknown tag, then a removal
  unknown.Array(2).Double(2).Array(2);
  unknown.Array(2).Str("BlockPinned").Array(1).Uint(1);
  unknown.Array(2).Str("BlockRemoved").Array(1).Uint(1);
  publisher->Publish(unknown.bytes());
  MsgpackBuilder extra;  // 3: map event with a field from the future
  extra.Array(2).Double(3).Array(1);
  extra.Map(6).Str("type").Str("BlockStored").Str("block_hashes").Array(1).Uint(7);
  extra.Str("parent_block_hash").Nil().Str("token_ids").Tokens(4).Str("block_size").Uint(4);
  extra.Str("storage_tier").Str("SSD");
  publisher->Publish(extra.bytes());
  ASSERT_TRUE(CaughtUp(*subscriber, 4));

  EXPECT_THAT(received.seqs(), ElementsAre(0u, 2u, 3u));
  EXPECT_THAT(received.resident(), ElementsAre(7u));
  const EngineEndpointStats s = subscriber->Stats().at(0);
  EXPECT_EQ(s.batches, 3u);
  EXPECT_EQ(s.malformed, 1u);
  EXPECT_EQ(s.unknown_tags, 1u);
  EXPECT_THAT(s.last_error, HasSubstr("sequence 1: payload: truncated"));
  EXPECT_EQ(s.sequences_lost, 0u);
}

// A hand-driven XPUB: repeated and out-of-date sequences, a message with the
// wrong number of frames, and numbering that starts over (an engine restart).
// Sends [topic "kv", seq, payload] on a raw (X)PUB socket.
void SendRaw(zmq::socket_t& pub, uint64_t seq, std::string_view payload) {
  std::string seq_bytes(8, '\0');
  for (int i = 0; i < 8; ++i) seq_bytes[7 - i] = static_cast<char>((seq >> (8 * i)) & 0xff);
  std::vector<zmq::const_buffer> frames = {zmq::buffer(std::string_view("kv")),
                                           zmq::buffer(seq_bytes), zmq::buffer(payload)};
  zmq::send_multipart(pub, frames);
}

// A raw XPUB that passes every (un)subscription on, so a test sees each
// SUB socket that joins.
zmq::socket_t RawPublisher(zmq::context_t& context) {
  zmq::socket_t pub(context, zmq::socket_type::xpub);
  pub.set(zmq::sockopt::linger, 0);
  pub.set(zmq::sockopt::xpub_verbose, 1);
  pub.set(zmq::sockopt::rcvtimeo, static_cast<int>(kPatience / std::chrono::milliseconds(1)));
  pub.bind("tcp://127.0.0.1:*");
  return pub;
}

// Blocks until a subscription (not an unsubscription) reaches `pub`.
bool AwaitSubscription(zmq::socket_t& pub) {
  zmq::message_t message;
  while (pub.recv(message)) {
    if (message.size() > 0 && *static_cast<const uint8_t*>(message.data()) == 1) return true;
  }
  return false;
}

// A subscriber to `pub` (node "raw", no replay socket), once its
// subscription has reached `pub`.
std::unique_ptr<EngineSubscriber> SubscribeRaw(zmq::socket_t& pub, Received& received,
                                               KvEventDecodeOptions decode = {}) {
  EngineSubscriberOptions o;
  o.endpoints.push_back({"raw", pub.get(zmq::sockopt::last_endpoint), ""});
  o.decode = decode;
  auto subscriber = EngineSubscriber::Start(o, received.Callback());
  EXPECT_TRUE(subscriber.ok()) << subscriber.status();
  if (!subscriber.ok() || !AwaitSubscription(pub)) return nullptr;
  return *std::move(subscriber);
}

TEST(EngineStreamTest, DuplicatesBadFramesAndRestarts) {
  zmq::context_t context;
  zmq::socket_t pub(context, zmq::socket_type::xpub);
  pub.set(zmq::sockopt::linger, 0);
  pub.bind("tcp://127.0.0.1:*");
  Received received;
  EngineSubscriberOptions o;
  o.endpoints.push_back({"raw", pub.get(zmq::sockopt::last_endpoint), ""});
  auto subscriber = EngineSubscriber::Start(o, received.Callback());
  ASSERT_TRUE(subscriber.ok()) << subscriber.status();
  zmq::message_t subscription;
  ASSERT_TRUE(pub.recv(subscription));  // blocks until the SUB has joined

  const auto send = [&](uint64_t seq) {
    SendRaw(pub, seq, EncodeKvEventBatch(Batch(seq, {Removed({seq})}), {}));
  };
  send(0);
  send(1);
  send(2);
  send(2);
  send(1);
  std::vector<zmq::const_buffer> two = {zmq::buffer(std::string_view("kv")),
                                        zmq::buffer(std::string_view("12345678"))};
  zmq::send_multipart(pub, two);
  send(3);
  ASSERT_TRUE(CaughtUp(**subscriber, 4));
  EXPECT_THAT(received.seqs(), ElementsAre(0u, 1u, 2u, 3u));
  EngineEndpointStats s = (*subscriber)->Stats().at(0);
  EXPECT_EQ(s.duplicates, 2u);
  EXPECT_EQ(s.malformed, 1u);
  EXPECT_EQ(s.gaps, 0u);
  EXPECT_EQ(s.restarts, 0u);

  // The engine restarts: numbering begins again at 0.
  send(0);
  send(1);
  ASSERT_TRUE(WaitUntil([&] { return received.seqs().size() == 6; }));
  EXPECT_THAT(received.seqs(), ElementsAre(0u, 1u, 2u, 3u, 0u, 1u));
  const std::vector<EngineEventBatch> batches = received.batches();
  for (size_t i = 0; i < batches.size(); ++i) EXPECT_EQ(batches[i].engine_restarted, i == 4) << i;
  EXPECT_TRUE(NextSequenceIs(**subscriber, 2));
  s = (*subscriber)->Stats().at(0);
  EXPECT_EQ(s.restarts, 1u);
  EXPECT_EQ(s.duplicates, 2u);
}

// libzmq ends a connection that brings a message over ZMQ_MAXMSGSIZE and
// never reconnects it: the subscriber must open a fresh SUB socket itself.
// Without a replay socket the oversized sequence is a hole lost at once.
TEST(EngineStreamTest, AnOversizedMessageDoesNotEndTheFeed) {
  zmq::context_t context;
  zmq::socket_t pub = RawPublisher(context);
  Received received;
  // ZMQ messages over 1024 + 64 bytes end the connection.
  auto subscriber = SubscribeRaw(pub, received, {.max_payload_bytes = 1024});
  ASSERT_NE(subscriber, nullptr);
  const auto send = [&](uint64_t seq) {
    SendRaw(pub, seq, EncodeKvEventBatch(Batch(seq, {Removed({seq})}), {}));
  };
  send(0);
  send(1);
  ASSERT_TRUE(CaughtUp(*subscriber, 2));
  SendRaw(pub, 2, std::string(4096, 'x'));
  // The fresh socket's subscription: the feed is re-established.
  ASSERT_TRUE(AwaitSubscription(pub));
  send(3);
  send(4);
  ASSERT_TRUE(CaughtUp(*subscriber, 5));
  EXPECT_THAT(received.seqs(), ElementsAre(0u, 1u, 3u, 4u));
  const EngineEndpointStats s = subscriber->Stats().at(0);
  EXPECT_EQ(s.connection_drops, 1u);
  EXPECT_EQ(s.replay_connection_drops, 0u);
  EXPECT_EQ(s.gaps, 1u);
  EXPECT_EQ(s.sequences_lost, 1u);
  EXPECT_EQ(s.malformed, 0u);  // libzmq refused it: it never reached the decoder
}

// With a replay socket the hole is asked for; the answer begins with the
// oversized message, which ends the replay connection too: that one sequence
// is lost, and every other batch published meanwhile is replayed.
TEST(EngineStreamTest, AnOversizedMessageIsTheOnlyBatchLostWithReplay) {
  EnginePublisherOptions options = WithReplay();
  options.replay_buffer_batches = 1'000'000;  // more than the wait below can publish
  auto publisher = StartPublisher(options);
  ASSERT_NE(publisher, nullptr);
  Received received;
  EngineSubscriberOptions o;
  o.endpoints.push_back({"engine-0", publisher->endpoint(), publisher->replay_endpoint()});
  o.decode.max_payload_bytes = 1024;
  auto subscriber = EngineSubscriber::Start(o, received.Callback());
  ASSERT_TRUE(subscriber.ok()) << subscriber.status();
  ASSERT_TRUE(publisher->WaitForSubscribers(1, kPatience));
  const auto publish = [&] {
    const uint64_t seq = publisher->stats().published;
    EXPECT_EQ(publisher->Publish(EncodeKvEventBatch(Batch(seq, {Removed({seq})}), {})), seq);
    publisher->Flush();
  };
  publish();
  publish();
  ASSERT_TRUE(CaughtUp(**subscriber, 2));
  EXPECT_EQ(publisher->Publish(std::string(4096, 'x')), 2u);
  ASSERT_TRUE(WaitUntil([&] { return (*subscriber)->Stats().at(0).connection_drops == 1; }));
  // Batches published before the fresh SUB socket joined reach it only by
  // replay; keep publishing until one arrives live or replayed.
  ASSERT_TRUE(WaitUntil([&] {
    publish();
    return received.seqs().size() > 2;
  }));
  const uint64_t published = publisher->stats().published;
  ASSERT_TRUE(CaughtUp(**subscriber, static_cast<int64_t>(published)));
  std::vector<uint64_t> expected;
  for (uint64_t seq = 0; seq < published; ++seq) {
    if (seq != 2) expected.push_back(seq);
  }
  EXPECT_EQ(received.seqs(), expected);
  const EngineEndpointStats s = (*subscriber)->Stats().at(0);
  EXPECT_EQ(s.connection_drops, 1u);
  EXPECT_EQ(s.replay_connection_drops, 1u);
  EXPECT_EQ(s.sequences_lost, 1u);
}

// A hostile stream can jump its numbering by almost 2^64; sequences_lost
// stays at the top instead of wrapping to a small number.
TEST(EngineStreamTest, SequencesLostSaturates) {
  zmq::context_t context;
  zmq::socket_t pub = RawPublisher(context);
  Received received;
  auto subscriber = SubscribeRaw(pub, received);
  ASSERT_NE(subscriber, nullptr);
  const auto send = [&](uint64_t seq) {
    SendRaw(pub, seq, EncodeKvEventBatch(Batch(1.0, {Removed({7})}), {}));
  };
  constexpr uint64_t kMax = ~uint64_t{0};
  send(0);
  send(kMax - 1);  // lost: 1 .. 2^64 - 3, that is 2^64 - 3 sequences
  ASSERT_TRUE(WaitUntil([&] { return received.seqs().size() == 2; }));
  EXPECT_EQ(subscriber->Stats().at(0).sequences_lost, kMax - 2);
  send(0);  // a restart: numbering starts over
  send(5);  // lost: 1 .. 4, four more, which would wrap to 1
  ASSERT_TRUE(WaitUntil([&] { return received.seqs().size() == 4; }));
  EXPECT_THAT(received.seqs(), ElementsAre(0u, kMax - 1, 0u, 5u));
  const EngineEndpointStats s = subscriber->Stats().at(0);
  EXPECT_EQ(s.sequences_lost, kMax);
  EXPECT_EQ(s.restarts, 1u);
}

// A replay socket that never answers: the request times out and the hole is lost.
TEST(EngineStreamTest, UnansweredReplayTimesOut) {
  auto publisher = StartPublisher({.drop_sequence = 1});
  ASSERT_NE(publisher, nullptr);
  zmq::context_t context;
  zmq::socket_t silent(context, zmq::socket_type::router);
  silent.set(zmq::sockopt::linger, 0);
  silent.bind("tcp://127.0.0.1:*");
  Received received;
  EngineSubscriberOptions o;
  o.endpoints.push_back(
      {"engine-0", publisher->endpoint(), silent.get(zmq::sockopt::last_endpoint)});
  o.replay_timeout = std::chrono::milliseconds(200);
  auto subscriber = EngineSubscriber::Start(o, received.Callback());
  ASSERT_TRUE(subscriber.ok()) << subscriber.status();
  ASSERT_TRUE(publisher->WaitForSubscribers(1, kPatience));

  for (uint64_t i = 0; i < 3; ++i) {
    publisher->Publish(EncodeKvEventBatch(Batch(i, {Removed({i})}), {}));
  }
  ASSERT_TRUE(CaughtUp(**subscriber, 3));
  EXPECT_THAT(received.seqs(), ElementsAre(0u, 2u));
  const EngineEndpointStats s = (*subscriber)->Stats().at(0);
  EXPECT_EQ(s.replay_timeouts, 1u);
  EXPECT_EQ(s.sequences_lost, 1u);
  std::vector<zmq::message_t> request;
  ASSERT_TRUE(zmq::recv_multipart(silent, std::back_inserter(request)));
  ASSERT_EQ(request.size(), 3u);  // identity, "", start
  EXPECT_EQ(request[2].to_string(), std::string("\0\0\0\0\0\0\0\1", 8));
}

TEST(EngineStreamTest, TwoEnginesAreKeptApart) {
  auto a = StartPublisher(WithReplay());
  auto b = StartPublisher(WithReplay());
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const auto endpoints = ParseEngineEndpoints("a=" + a->endpoint() + ",b=" + b->endpoint(),
                                              a->replay_endpoint() + ",b=" + b->replay_endpoint());
  ASSERT_TRUE(endpoints.ok()) << endpoints.status();
  Received received;
  EngineSubscriberOptions o;
  o.endpoints = *endpoints;
  o.start_sequence = 0;
  auto subscriber = EngineSubscriber::Start(o, received.Callback());
  ASSERT_TRUE(subscriber.ok()) << subscriber.status();
  ASSERT_TRUE(a->WaitForSubscribers(1, kPatience));
  ASSERT_TRUE(b->WaitForSubscribers(1, kPatience));

  a->Publish(EncodeKvEventBatch(Batch(1, {Stored({1}, std::nullopt)}), {}));
  b->Publish(EncodeKvEventBatch(Batch(1, {Stored({2}, std::nullopt)}), {}));
  b->Publish(EncodeKvEventBatch(Batch(2, {Stored({3}, 2)}), {}));
  ASSERT_TRUE(CaughtUp(**subscriber, 1, 0));
  ASSERT_TRUE(CaughtUp(**subscriber, 2, 1));
  const auto stats = (*subscriber)->Stats();
  EXPECT_EQ(stats[0].node_id, "a");
  EXPECT_EQ(stats[0].batches, 1u);
  EXPECT_EQ(stats[1].node_id, "b");
  EXPECT_EQ(stats[1].batches, 2u);
  const auto nodes = received.nodes();
  EXPECT_EQ(std::count(nodes.begin(), nodes.end(), "a"), 1);
  EXPECT_EQ(std::count(nodes.begin(), nodes.end(), "b"), 2);
}

// The sequences `node`'s batches were delivered with.
std::vector<uint64_t> SeqsOf(const Received& received, const std::string& node) {
  const std::vector<std::string> nodes = received.nodes();
  const std::vector<uint64_t> seqs = received.seqs();
  std::vector<uint64_t> out;
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (nodes[i] == node) out.push_back(seqs[i]);
  }
  return out;
}

// An endpoint that names a start sequence begins there, one that does not at
// the options' start: both engines published 0..4 before anyone listened,
// "a" resumes at 3 (as after 0..2 were logged) and "b" takes everything.
TEST(EngineStreamTest, EachEndpointStartsAtItsOwnSequence) {
  auto a = StartPublisher(WithReplay());
  auto b = StartPublisher(WithReplay());
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const auto publish = [&](uint64_t i) {
    a->Publish(EncodeKvEventBatch(Batch(i, {Removed({i})}), {}));
    b->Publish(EncodeKvEventBatch(Batch(i, {Removed({i})}), {}));
  };
  for (uint64_t i = 0; i < 5; ++i) publish(i);
  a->Flush();
  b->Flush();
  Received received;
  EngineSubscriberOptions o;
  o.endpoints.push_back({"a", a->endpoint(), a->replay_endpoint(), 3});
  o.endpoints.push_back({"b", b->endpoint(), b->replay_endpoint()});
  o.start_sequence = 0;
  auto subscriber = EngineSubscriber::Start(o, received.Callback());
  ASSERT_TRUE(subscriber.ok()) << subscriber.status();
  ASSERT_TRUE(a->WaitForSubscribers(1, kPatience));
  ASSERT_TRUE(b->WaitForSubscribers(1, kPatience));
  publish(5);  // live
  ASSERT_TRUE(CaughtUp(**subscriber, 6, 0));
  ASSERT_TRUE(CaughtUp(**subscriber, 6, 1));
  EXPECT_THAT(SeqsOf(received, "a"), ElementsAre(3u, 4u, 5u));
  EXPECT_THAT(SeqsOf(received, "b"), ElementsAre(0u, 1u, 2u, 3u, 4u, 5u));
  for (const EngineEndpointStats& s : (*subscriber)->Stats()) {
    EXPECT_EQ(s.restarts, 0u) << s.node_id;
    EXPECT_EQ(s.sequences_lost, 0u) << s.node_id;
  }
}

// An endpoint resuming at 100 whose engine has restarted meanwhile (it
// numbers from 0 again and published 0..2 while no one listened): the first
// live batch, 3, is below the start, so the endpoint starts over from 0 and
// the replay socket gives back 0..2, instead of all of them being dropped as
// duplicates until the engine passes 100.
TEST(EngineStreamTest, AFirstLiveSequenceBelowTheStartIsARestart) {
  auto publisher = StartPublisher(WithReplay());
  ASSERT_NE(publisher, nullptr);
  const auto publish = [&](uint64_t i) {
    publisher->Publish(EncodeKvEventBatch(Batch(i, {Stored({100 + i}, std::nullopt)}), {}));
  };
  for (uint64_t i = 0; i < 3; ++i) publish(i);
  publisher->Flush();
  Received received;
  EngineSubscriberOptions o;
  o.endpoints.push_back({"e", publisher->endpoint(), publisher->replay_endpoint(), 100});
  auto subscriber = EngineSubscriber::Start(o, received.Callback());
  ASSERT_TRUE(subscriber.ok()) << subscriber.status();
  ASSERT_TRUE(publisher->WaitForSubscribers(1, kPatience));
  publish(3);
  publish(4);
  ASSERT_TRUE(WaitUntil([&] { return received.seqs().size() >= 5; }));
  EXPECT_THAT(received.seqs(), ElementsAre(0u, 1u, 2u, 3u, 4u));
  const std::vector<EngineEventBatch> batches = received.batches();
  for (size_t i = 0; i < batches.size(); ++i) EXPECT_EQ(batches[i].engine_restarted, i == 0) << i;
  EXPECT_TRUE(NextSequenceIs(**subscriber, 5));
  const EngineEndpointStats s = (*subscriber)->Stats().at(0);
  EXPECT_EQ(s.restarts, 1u);
  EXPECT_EQ(s.duplicates, 0u);
  EXPECT_EQ(s.sequences_lost, 0u);
}

// A metrics reader that saw a batch applied must see it counted: every
// callback finds its own batch in Stats() already, live and replayed alike.
TEST(EngineStreamTest, StatsAlreadyCountTheBatchACallbackSees) {
  auto publisher = StartPublisher(WithReplay());
  ASSERT_NE(publisher, nullptr);
  // Published before the subscriber joins: these arrive in the replay answer.
  for (uint64_t i = 0; i < 3; ++i) {
    publisher->Publish(EncodeKvEventBatch(Batch(i, {Stored({100 + i}, std::nullopt)}), {}));
  }
  publisher->Flush();
  std::atomic<EngineSubscriber*> self{nullptr};
  std::mutex mu;
  std::vector<std::string> wrong;  // what a callback found out of step
  uint64_t seen = 0;
  EngineSubscriberOptions o;
  o.endpoints.push_back({"e", publisher->endpoint(), publisher->replay_endpoint()});
  o.start_sequence = 0;
  auto subscriber =
      EngineSubscriber::Start(o, [&](const std::string&, uint64_t seq, const EngineEventBatch&) {
        // Only the first batches can come before Start returns; the replay
        // waits for the subscription, so in practice none do.
        EngineSubscriber* sub = self.load();
        std::lock_guard<std::mutex> lock(mu);
        ++seen;
        if (sub == nullptr) return;
        const EngineEndpointStats s = sub->Stats().at(0);
        if (s.batches != seen || s.next_sequence != static_cast<int64_t>(seq + 1)) {
          wrong.push_back(absl::StrCat("seq ", seq, ": batches ", s.batches, " of ", seen,
                                       ", next_sequence ", s.next_sequence));
        }
      });
  ASSERT_TRUE(subscriber.ok()) << subscriber.status();
  self.store(subscriber->get());
  ASSERT_TRUE(publisher->WaitForSubscribers(1, kPatience));
  for (uint64_t i = 3; i < 6; ++i) {
    publisher->Publish(EncodeKvEventBatch(Batch(i, {Stored({100 + i}, std::nullopt)}), {}));
  }
  ASSERT_TRUE(CaughtUp(**subscriber, 6));
  (*subscriber)->Stop();
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(seen, 6u);
  EXPECT_THAT(wrong, ::testing::IsEmpty());
  EXPECT_GE((*subscriber)->Stats().at(0).batches_replayed, 1u);
}

TEST(EngineStreamTest, StopsWithNoEngineListening) {
  Received received;
  EngineSubscriberOptions o;
  o.endpoints.push_back({"nobody", "tcp://127.0.0.1:1", "tcp://127.0.0.1:1"});
  o.start_sequence = 0;
  auto subscriber = EngineSubscriber::Start(o, received.Callback());
  ASSERT_TRUE(subscriber.ok()) << subscriber.status();
  (*subscriber)->Stop();
  (*subscriber)->Stop();  // idempotent
  EXPECT_TRUE(received.seqs().empty());
}

TEST(EngineStreamTest, StartRefusesBadOptions) {
  Received received;
  EXPECT_FALSE(EngineSubscriber::Start({}, received.Callback()).ok());
  EngineSubscriberOptions bad_address;
  bad_address.endpoints.push_back({"n", "nonsense://x", ""});
  const auto s = EngineSubscriber::Start(bad_address, received.Callback());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EngineSubscriberOptions twice;
  twice.endpoints.push_back({"n", "tcp://127.0.0.1:1", ""});
  twice.endpoints.push_back({"n", "tcp://127.0.0.1:2", ""});
  EXPECT_FALSE(EngineSubscriber::Start(twice, received.Callback()).ok());
  EXPECT_FALSE(EnginePublisher::Start({.endpoint = "nonsense://x"}).ok());
}

TEST(ParseEngineEndpointsTest, NamesAndReplayAddresses) {
  const auto e = ParseEngineEndpoints("tcp://10.0.0.1:5557, p2=tcp://10.0.0.2:5557,p3=tcp://h:1",
                                      "tcp://10.0.0.1:5558,,p3=tcp://h:2");
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_EQ(e->size(), 3u);
  EXPECT_EQ((*e)[0].node_id, "tcp://10.0.0.1:5557");
  EXPECT_EQ((*e)[0].endpoint, "tcp://10.0.0.1:5557");
  EXPECT_EQ((*e)[0].replay_endpoint, "tcp://10.0.0.1:5558");
  EXPECT_EQ((*e)[1].node_id, "p2");
  EXPECT_EQ((*e)[1].endpoint, "tcp://10.0.0.2:5557");
  EXPECT_EQ((*e)[1].replay_endpoint, "");
  EXPECT_EQ((*e)[2].replay_endpoint, "tcp://h:2");

  const auto no_replay = ParseEngineEndpoints("n=tcp://h:1", "");
  ASSERT_TRUE(no_replay.ok());
  EXPECT_EQ((*no_replay)[0].replay_endpoint, "");
}

TEST(ParseEngineEndpointsTest, Errors) {
  const std::vector<std::pair<std::pair<std::string, std::string>, std::string>> cases = {
      {{"", ""}, "--engine-events: empty entry"},
      {{"tcp://h:1,,tcp://h:2", ""}, "--engine-events: empty entry"},
      {{"h:1", ""}, "is not a ZMQ address"},
      {{"bad id=tcp://h:1", ""}, "only [A-Za-z0-9._:/-]"},
      {{"=tcp://h:1", ""}, "must be 1..128 characters"},
      {{"a=tcp://h:1,a=tcp://h:2", ""}, "given twice"},
      {{"a=tcp://h:1", "b=tcp://h:2"}, "node 'b' is not in --engine-events"},
      {{"a=tcp://h:1", "tcp://h:2,tcp://h:3"}, "entry 2 has no events endpoint"},
      {{"a=tcp://h:1", "tcp://h:2,a=tcp://h:3"}, "two replay addresses"},
  };
  for (const auto& [flags, message] : cases) {
    const auto e = ParseEngineEndpoints(flags.first, flags.second);
    ASSERT_FALSE(e.ok()) << flags.first << " / " << flags.second;
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(e.status().message(), HasSubstr(message)) << flags.first;
  }
}

}  // namespace
}  // namespace kvlearn
