// A JetStream publisher for tests of `serve --nats`: a connection to the
// test's nats-server with the event stream made (KVLEARN_EVENTS, subjects
// kvlearn.events.>), as the sidecar would make it.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "server/jetstream_connection.h"
#include "tests/server/nats_server_process.h"

namespace kvlearn {

inline std::unique_ptr<JetStreamConnection> StreamPublisher(const NatsServerProcess& nats) {
  auto c = JetStreamConnection::Connect({.url = nats.url(), .name = "test publisher"});
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return nullptr;
  EXPECT_TRUE((*c)->EnsureStream("KVLEARN_EVENTS", "kvlearn.events").ok());
  return *std::move(c);
}

}  // namespace kvlearn
