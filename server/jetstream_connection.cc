#include "server/jetstream_connection.h"

#include <nats/nats.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "absl/strings/str_cat.h"

namespace kvlearn {
namespace {

int64_t Millis(double seconds) { return static_cast<int64_t>(std::llround(seconds * 1e3)); }

// Owns a natsOptions for the length of Connect.
struct OptionsHolder {
  ~OptionsHolder() { natsOptions_Destroy(opts); }
  natsOptions* opts = nullptr;
};

}  // namespace

absl::Status NatsStatus(int status, int js_error, std::string_view what) {
  const auto s = static_cast<natsStatus>(status);
  std::string message = absl::StrCat(std::string(what), ": ", natsStatus_GetText(s));
  if (js_error != 0) absl::StrAppend(&message, " (JetStream error ", js_error, ")");
  if (s == NATS_CONNECTION_DISCONNECTED || s == NATS_CONNECTION_CLOSED || s == NATS_TIMEOUT ||
      s == NATS_NO_SERVER || s == NATS_NO_RESPONDERS || s == NATS_IO_ERROR) {
    return absl::UnavailableError(message);
  }
  if (s == NATS_NOT_FOUND || js_error == JSStreamNotFoundErr || js_error == JSConsumerNotFoundErr ||
      js_error == JSNoMessageFoundErr) {
    return absl::NotFoundError(message);
  }
  return absl::InternalError(message);
}

absl::StatusOr<std::unique_ptr<JetStreamConnection>> JetStreamConnection::Connect(
    const JetStreamOptions& options) {
  std::unique_ptr<JetStreamConnection> c(new JetStreamConnection(options));
  const std::string where = absl::StrCat("--nats ", options.url);
  OptionsHolder o;
  natsStatus s = natsOptions_Create(&o.opts);
  if (s == NATS_OK) s = natsOptions_SetURL(o.opts, options.url.c_str());
  if (s == NATS_OK && !options.name.empty()) s = natsOptions_SetName(o.opts, options.name.c_str());
  if (s == NATS_OK) s = natsOptions_SetTimeout(o.opts, Millis(options.connect_timeout_seconds));
  // Forever: a NATS restart or a network cut must not need a kvlearn restart.
  if (s == NATS_OK) s = natsOptions_SetMaxReconnect(o.opts, -1);
  if (s == NATS_OK) {
    s = natsOptions_SetReconnectWait(o.opts, Millis(options.reconnect_wait_seconds));
  }
  if (s != NATS_OK) return NatsStatus(s, 0, absl::StrCat(where, ": options"));
  s = natsConnection_Connect(&c->nc_, o.opts);
  if (s != NATS_OK) {
    c->nc_ = nullptr;
    return NatsStatus(s, 0, absl::StrCat(where, ": cannot connect"));
  }
  jsOptions js;
  jsOptions_Init(&js);
  js.Wait = Millis(options.request_timeout_seconds);
  s = natsConnection_JetStream(&c->js_, c->nc_, &js);
  if (s != NATS_OK) return NatsStatus(s, 0, absl::StrCat(where, ": JetStream context"));
  return c;
}

JetStreamConnection::~JetStreamConnection() {
  if (js_ != nullptr) jsCtx_Destroy(js_);
  if (nc_ != nullptr) {
    natsConnection_Close(nc_);
    natsConnection_Destroy(nc_);
  }
}

absl::StatusOr<uint64_t> JetStreamConnection::Publish(
    const std::string& subject, std::string_view payload, const std::string& msg_id, int attempts,
    const std::vector<std::pair<std::string, std::string>>& headers,
    const std::atomic<bool>* cancel) {
  jsPubOptions po;
  jsPubOptions_Init(&po);
  if (!msg_id.empty()) po.MsgId = msg_id.c_str();
  for (int attempt = 1;; ++attempt) {
    natsMsg* msg = nullptr;
    natsStatus s = natsMsg_Create(&msg, subject.c_str(), nullptr, payload.data(),
                                  static_cast<int>(payload.size()));
    for (const auto& [key, value] : headers) {
      if (s == NATS_OK) s = natsMsgHeader_Set(msg, key.c_str(), value.c_str());
    }
    jsPubAck* ack = nullptr;
    jsErrCode err = static_cast<jsErrCode>(0);
    if (s == NATS_OK) s = js_PublishMsg(&ack, js_, msg, &po, &err);
    natsMsg_Destroy(msg);
    if (s == NATS_OK) {
      const uint64_t sequence = ack->Sequence;
      jsPubAck_Destroy(ack);
      return sequence;
    }
    absl::Status status = NatsStatus(s, err, absl::StrCat("publish on ", subject));
    if (!absl::IsUnavailable(status) || (attempts > 0 && attempt >= attempts)) return status;
    if (cancel != nullptr && cancel->load(std::memory_order_acquire)) {
      return absl::CancelledError(absl::StrCat("publish on ", subject, ": stopped"));
    }
    publish_retries_.fetch_add(1, std::memory_order_relaxed);
    std::this_thread::sleep_for(std::chrono::milliseconds(Millis(options_.reconnect_wait_seconds)));
  }
}

uint64_t JetStreamConnection::reconnects() const {
  // From the client's statistics, not a reconnected callback: the client
  // may run a callback after the connection is closed, when this object
  // is gone.
  natsStatistics* stats = nullptr;
  uint64_t in_msgs = 0, in_bytes = 0, out_msgs = 0, out_bytes = 0, reconnects = 0;
  if (nc_ != nullptr && natsStatistics_Create(&stats) == NATS_OK) {
    if (natsConnection_GetStats(nc_, stats) == NATS_OK) {
      natsStatistics_GetCounts(stats, &in_msgs, &in_bytes, &out_msgs, &out_bytes, &reconnects);
    }
    natsStatistics_Destroy(stats);
  }
  return reconnects;
}

bool JetStreamConnection::connected() const {
  return nc_ != nullptr && natsConnection_Status(nc_) == NATS_CONN_STATUS_CONNECTED;
}

absl::Status JetStreamConnection::EnsureStream(const std::string& stream,
                                               const std::string& subject_prefix) {
  jsStreamInfo* info = nullptr;
  jsErrCode err = static_cast<jsErrCode>(0);
  natsStatus s = js_GetStreamInfo(&info, js_, stream.c_str(), nullptr, &err);
  if (s == NATS_OK) {
    jsStreamInfo_Destroy(info);
    return absl::OkStatus();
  }
  if (s != NATS_NOT_FOUND && err != JSStreamNotFoundErr) {
    return NatsStatus(s, err, absl::StrCat("stream ", stream));
  }
  const std::string subjects = subject_prefix + ".>";
  const char* list[] = {subjects.c_str()};
  jsStreamConfig config;
  jsStreamConfig_Init(&config);
  config.Name = stream.c_str();
  config.Subjects = list;
  config.SubjectsLen = 1;
  config.Storage = js_FileStorage;
  err = static_cast<jsErrCode>(0);
  s = js_AddStream(&info, js_, &config, nullptr, &err);
  if (s != NATS_OK) return NatsStatus(s, err, absl::StrCat("create stream ", stream));
  jsStreamInfo_Destroy(info);
  return absl::OkStatus();
}

}  // namespace kvlearn
