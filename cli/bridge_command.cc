// `kvlearn bridge`: republishes engines' ZMQ KV events into NATS JetStream
// for `kvlearn serve --nats` (server/engine_bridge.h). Runs until SIGINT or
// SIGTERM, then prints what it published.
#include <signal.h>

#include <iostream>
#include <memory>
#include <string>

#include "cli/command.h"
#include "cli/cost_flags.h"
#include "server/engine_bridge.h"

namespace kvlearn {
namespace {

struct BridgeFlags {
  std::string engine_events, engine_replay, engine_topic, node;
  std::string nats_url, stream = "KVLEARN_EVENTS", subject_prefix = "kvlearn.events";
  uint32_t block_size = 512;
  uint32_t max_events_per_batch = 4096;
  CostFlags cost;
};

int Fail(const absl::Status& s) {
  std::cerr << "kvlearn bridge: " << s.message() << "\n";
  return 1;
}

int RunBridge(BridgeFlags& f) {
  auto cost = f.cost.Resolve();
  if (!cost.ok()) return Fail(cost.status());
  std::string events = f.engine_events;
  if (!f.node.empty()) {
    if (events.find(',') != std::string::npos || events.find('=') != std::string::npos) {
      return Fail(
          absl::InvalidArgumentError("--node names the one engine of --engine-events; with "
                                     "several, name each NODE=tcp://..."));
    }
    events = f.node + "=" + events;
  }
  auto endpoints = ParseEngineEndpoints(events, f.engine_replay);
  if (!endpoints.ok()) return Fail(endpoints.status());
  EngineBridgeOptions o;
  o.connection.url = f.nats_url;
  o.connection.name = "kvlearn bridge";
  o.stream = f.stream;
  o.subject_prefix = f.subject_prefix;
  o.mapping.block_size = f.block_size;
  o.mapping.cost = &*cost;
  o.max_events_per_batch = f.max_events_per_batch;
  o.subscriber.endpoints = *std::move(endpoints);
  o.subscriber.topic = f.engine_topic;
  o.subscriber.start_sequence = 0;  // engines whose subject holds nothing yet
  // Block the signals before any thread starts, so only sigwait takes them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  auto bridge = EngineBridge::Start(std::move(o));
  if (!bridge.ok()) return Fail(bridge.status());
  std::cout << "bridge: following " << (*bridge)->engine_stats().size() << " engines into stream "
            << f.stream << " at " << f.nats_url << std::endl;
  int sig = 0;
  while (sigwait(&signals, &sig) != 0) {
  }
  (*bridge)->Stop();
  std::cout << "bridge: published " << (*bridge)->messages_published() << " messages ("
            << (*bridge)->events_published() << " events), retried " << (*bridge)->publish_retries()
            << " publishes, abandoned " << (*bridge)->publish_failures() << std::endl;
  return 0;
}

}  // namespace

Command AddBridgeCommand(CLI::App& root) {
  auto f = std::make_shared<BridgeFlags>();
  CLI::App* cmd = root.add_subcommand(
      "bridge",
      "Republish vLLM/SGLang ZMQ KV events into NATS JetStream for `kvlearn serve --nats`: each "
      "engine batch as one kvlearn.v1.EventBatch on PREFIX.NODE, acknowledged by the stream "
      "before the next (docs/scale_out.md). On SIGINT/SIGTERM prints the messages and events "
      "published, the publishes retried (NATS unreachable or slow to acknowledge) and those "
      "abandoned (still unacknowledged when stopped).");
  cmd->add_option("--engine-events", f->engine_events,
                  "comma-separated [NODE=]tcp://HOST:PORT of the engines' ZMQ PUB sockets "
                  "(docs/engine_events.md)")
      ->required();
  cmd->add_option("--engine-replay", f->engine_replay,
                  "the engines' replay (ZMQ ROUTER) sockets, in --engine-events order");
  cmd->add_option("--engine-topic", f->engine_topic,
                  "ZMQ topic prefix to subscribe to (default: every topic)");
  cmd->add_option("--node", f->node, "the node id of the one engine of --engine-events");
  cmd->add_option("--nats", f->nats_url, "the NATS server, nats://HOST:PORT")->required();
  cmd->add_option("--nats-stream", f->stream,
                  "the JetStream stream; created (file storage, subjects PREFIX.>) if missing")
      ->capture_default_str();
  cmd->add_option("--nats-subject-prefix", f->subject_prefix, "subjects are PREFIX.NODE")
      ->capture_default_str();
  cmd->add_option("--block-size", f->block_size,
                  "tokens of a block whose engine sends none (as serve's --block-size)")
      ->capture_default_str();
  cmd->add_option("--max-events-per-batch", f->max_events_per_batch,
                  "events per message at most (an engine batch beyond it is split); keep it at "
                  "or below serve's --max-events-per-batch")
      ->capture_default_str();
  f->cost.Register(cmd);  // bytes of a block, as serve prices them
  return {cmd, [f] { return RunBridge(*f); }};
}

}  // namespace kvlearn
