#include "server/nats_ingest.h"

#include <nats/nats.h>

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kvlearn/v1/retention.pb.h"
#include "server/event_log.h"
#include "server/framed_record.h"
#include "server/node_pools.h"
#include "server/replica_ownership.h"
#include "server/retried_batches.h"
#include "server/sidecar_metrics.h"

namespace kvlearn {
namespace {

// How long one pull request waits for messages: also how soon Stop is seen.
constexpr int64_t kFetchWaitMs = 200;
// How long a rebuild's pull request waits before asking whether the
// short-lived consumer has anything left.
constexpr int64_t kRebuildWaitMs = 1000;
// Between attempts when NATS or the log is unavailable.
constexpr auto kRetryPause = std::chrono::milliseconds(100);

int64_t Nanos(double seconds) { return static_cast<int64_t>(seconds * 1e9); }

}  // namespace

// One log write's worth: the accepted events framed as the entry's value,
// the last stream sequence taken, the messages to free and the one to
// acknowledge (AckAll: the consumer's message of highest sequence).
class NatsIngest::Group {
 public:
  ~Group() { Reset(); }
  void Accept(const v1::Event& e) {
    AppendFramedRecord(records_, e);
    ++accepted_;
  }
  void Took(uint64_t sequence) { last_ = std::max(last_, sequence); }
  // Keeps `q.msg` until the group is written, and notes what to acknowledge.
  void Hold(const Queued& q) {
    held_.push_back(q.msg);
    if (q.from_consumer && (ack_ == nullptr || q.sequence >= ack_sequence_)) {
      ack_ = q.msg;
      ack_sequence_ = q.sequence;
    }
  }
  const std::string& records() const { return records_; }
  uint64_t accepted() const { return accepted_; }
  uint64_t last() const { return last_; }
  natsMsg* ack() const { return ack_; }
  void Reset() {
    for (natsMsg* m : held_) natsMsg_Destroy(m);
    held_.clear();
    records_.clear();
    accepted_ = 0;
    last_ = 0;
    ack_ = nullptr;
    ack_sequence_ = 0;
  }

 private:
  std::string records_;
  uint64_t accepted_ = 0;
  uint64_t last_ = 0;  // 0: no new message
  std::vector<natsMsg*> held_;
  natsMsg* ack_ = nullptr;
  uint64_t ack_sequence_ = 0;
};

NatsIngest::NatsIngest(NatsIngestOptions options, NodePools* pools, EventLog* log,
                       SidecarMetrics* metrics)
    : options_(std::move(options)),
      pools_(pools),
      log_(log),
      metrics_(metrics),
      log_key_(std::string(kLogKeyPrefix) + options_.stream),
      subject_start_(options_.subject_prefix + "."),
      group_(std::make_unique<Group>()) {}

absl::StatusOr<std::unique_ptr<NatsIngest>> NatsIngest::Start(NatsIngestOptions options,
                                                              NodePools* pools, EventLog* log,
                                                              SidecarMetrics* metrics,
                                                              std::string* notes) {
  if (options.connection.url.empty()) return absl::InvalidArgumentError("--nats: URL required");
  if (options.stream.empty() || options.subject_prefix.empty() || options.durable.empty()) {
    return absl::InvalidArgumentError(
        "--nats-stream, --nats-subject-prefix and the durable name must not be empty");
  }
  if (options.fetch_batch < 1 ||
      options.max_ack_pending <
          options.fetch_batch + static_cast<int64_t>(options.max_queued_messages)) {
    return absl::InvalidArgumentError(
        "NATS ingest: max_ack_pending must be at least fetch_batch + max_queued_messages");
  }
  std::unique_ptr<NatsIngest> n(new NatsIngest(std::move(options), pools, log, metrics));
  const NatsIngestOptions& o = n->options_;
  uint64_t logged = 0;
  if (auto got = log->LoggedEngineSequence(n->log_key_); got.ok()) {
    logged = *got;
  } else if (!absl::IsNotFound(got.status())) {
    absl::StrAppend(notes, got.status().message(), "; stream ", o.stream,
                    " is consumed from its start, so messages already logged may be logged "
                    "again\n");
  }
  auto connected = JetStreamConnection::Connect(o.connection);
  if (!connected.ok()) return connected.status();
  n->connection_ = *std::move(connected);
  if (auto st = n->connection_->EnsureStream(o.stream, o.subject_prefix); !st.ok()) return st;
  if (auto st = n->Bind(logged, notes); !st.ok()) return st;
  if (o.ownership != nullptr) {
    if (auto st = n->LearnNodes(); !st.ok()) return st;
  }
  n->apply_thread_ = std::thread([p = n.get()] { p->ApplyLoop(); });
  n->fetch_thread_ = std::thread([p = n.get()] { p->FetchLoop(); });
  return n;
}

absl::Status NatsIngest::Bind(uint64_t logged, std::string* notes) {
  const NatsIngestOptions& o = options_;
  jsCtx* js = connection_->js();
  jsStreamInfo* si = nullptr;
  jsErrCode err = static_cast<jsErrCode>(0);
  natsStatus s = js_GetStreamInfo(&si, js, o.stream.c_str(), nullptr, &err);
  if (s != NATS_OK) return NatsStatus(s, err, absl::StrCat("stream ", o.stream));
  const uint64_t stream_last = si->State.LastSeq;
  jsStreamInfo_Destroy(si);
  if (stream_last < logged) {
    // The stream was recreated: its numbering started again.
    absl::StrAppend(notes, "stream ", o.stream, " ends at sequence ", stream_last,
                    " but this log consumed it up to ", logged,
                    " (the stream was recreated?): consuming it from its start\n");
    logged = 0;
  }
  next_sequence_ = logged + 1;
  taken_through_ = logged;
  logged_sequence_.store(logged, std::memory_order_release);

  jsConsumerInfo* ci = nullptr;
  err = static_cast<jsErrCode>(0);
  s = js_GetConsumerInfo(&ci, js, o.stream.c_str(), o.durable.c_str(), nullptr, &err);
  bool create = false;
  if (s == NATS_OK) {
    const uint64_t floor = ci->AckFloor.Stream;
    jsConsumerInfo_Destroy(ci);
    if (floor > logged) {
      absl::StrAppend(notes, "consumer ", o.durable, " of stream ", o.stream,
                      " acknowledged up to sequence ", floor, " but this log holds up to ", logged,
                      ": recreating it from ", logged + 1, "\n");
      err = static_cast<jsErrCode>(0);
      s = js_DeleteConsumer(js, o.stream.c_str(), o.durable.c_str(), nullptr, &err);
      if (s != NATS_OK) return NatsStatus(s, err, absl::StrCat("delete consumer ", o.durable));
      create = true;
    }
  } else if (s == NATS_NOT_FOUND || err == JSConsumerNotFoundErr) {
    create = true;
  } else {
    return NatsStatus(s, err, absl::StrCat("consumer ", o.durable));
  }
  const std::string filter = o.subject_prefix + ".>";
  if (create) {
    jsConsumerConfig cc;
    jsConsumerConfig_Init(&cc);
    cc.Durable = o.durable.c_str();
    cc.AckPolicy = js_AckAll;
    cc.AckWait = Nanos(o.ack_wait_seconds);
    cc.MaxAckPending = o.max_ack_pending;
    cc.FilterSubject = filter.c_str();
    if (logged > 0) {
      cc.DeliverPolicy = js_DeliverByStartSequence;
      cc.OptStartSeq = logged + 1;
    }
    err = static_cast<jsErrCode>(0);
    s = js_AddConsumer(&ci, js, o.stream.c_str(), &cc, nullptr, &err);
    if (s != NATS_OK) return NatsStatus(s, err, absl::StrCat("create consumer ", o.durable));
    jsConsumerInfo_Destroy(ci);
  }
  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Stream = o.stream.c_str();
  so.Consumer = o.durable.c_str();
  err = static_cast<jsErrCode>(0);
  s = js_PullSubscribe(&subscription_, js, filter.c_str(), o.durable.c_str(), nullptr, &so, &err);
  if (s != NATS_OK) {
    subscription_ = nullptr;
    return NatsStatus(s, err, absl::StrCat("subscribe to consumer ", o.durable));
  }
  return absl::OkStatus();
}

NatsIngest::~NatsIngest() {
  Stop();
  if (subscription_ != nullptr) natsSubscription_Destroy(subscription_);
}

void NatsIngest::Stop() {
  if (stopped_) return;
  stopped_ = true;
  stopping_.store(true, std::memory_order_release);
  room_cv_.notify_all();
  if (fetch_thread_.joinable()) fetch_thread_.join();
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    fetch_done_ = true;
  }
  work_cv_.notify_one();
  if (apply_thread_.joinable()) apply_thread_.join();
}

bool NatsIngest::Enqueue(Queued q) {
  std::unique_lock<std::mutex> lock(queue_mu_);
  room_cv_.wait(lock,
                [this] { return queue_.size() < options_.max_queued_messages || stopping(); });
  if (stopping()) {
    natsMsg_Destroy(q.msg);
    return false;
  }
  queue_.push_back(q);
  if (queue_.size() == 1) work_cv_.notify_one();
  return true;
}

void NatsIngest::FetchLoop() {
  while (!stopping()) {
    natsMsgList list{};
    jsErrCode err = static_cast<jsErrCode>(0);
    const natsStatus s =
        natsSubscription_Fetch(&list, subscription_, options_.fetch_batch, kFetchWaitMs, &err);
    if (s != NATS_OK) {
      natsMsgList_Destroy(&list);
      if (s == NATS_TIMEOUT) continue;  // nothing to take
      // The connection is down (it comes back by itself) or the server
      // refused the request: wait a little and ask again.
      fetch_errors_.fetch_add(1, std::memory_order_relaxed);
      std::this_thread::sleep_for(kRetryPause);
      continue;
    }
    for (int i = 0; i < list.Count; ++i) {
      natsMsg* msg = std::exchange(list.Msgs[i], nullptr);
      jsMsgMetaData* meta = nullptr;
      if (natsMsg_GetMetaData(&meta, msg) != NATS_OK) {
        natsMsg_Destroy(msg);  // not a JetStream message: nothing to ack
        continue;
      }
      const uint64_t sequence = meta->Sequence.Stream;
      jsMsgMetaData_Destroy(meta);
      Queued q{msg, sequence, sequence < next_sequence_, true};
      if (!q.duplicate) {
        if (sequence > next_sequence_ && !FillGap(next_sequence_, sequence)) {
          natsMsg_Destroy(msg);
          break;
        }
        next_sequence_ = sequence + 1;
      }
      if (!Enqueue(q)) break;
    }
    for (int i = 0; i < list.Count; ++i) natsMsg_Destroy(std::exchange(list.Msgs[i], nullptr));
    natsMsgList_Destroy(&list);
  }
}

bool NatsIngest::FillGap(uint64_t from, uint64_t to) {
  jsCtx* js = connection_->js();
  const char* stream = options_.stream.c_str();
  // What the stream no longer holds at its start is missing, not asked for.
  while (true) {
    if (stopping()) return false;
    jsStreamInfo* si = nullptr;
    jsErrCode err = static_cast<jsErrCode>(0);
    if (js_GetStreamInfo(&si, js, stream, nullptr, &err) == NATS_OK) {
      const uint64_t first = std::min(std::max(si->State.FirstSeq, from), to);
      jsStreamInfo_Destroy(si);
      missing_.fetch_add(first - from, std::memory_order_relaxed);
      from = first;
      break;
    }
    fetch_errors_.fetch_add(1, std::memory_order_relaxed);
    std::this_thread::sleep_for(kRetryPause);
  }
  for (uint64_t sequence = from; sequence < to; ++sequence) {
    natsMsg* msg = nullptr;
    while (true) {
      if (stopping()) return false;
      jsErrCode err = static_cast<jsErrCode>(0);
      const natsStatus s = js_GetMsg(&msg, js, stream, sequence, nullptr, &err);
      if (s == NATS_OK) break;
      msg = nullptr;
      if (s == NATS_NOT_FOUND || err == JSNoMessageFoundErr) break;
      fetch_errors_.fetch_add(1, std::memory_order_relaxed);
      std::this_thread::sleep_for(kRetryPause);
    }
    if (msg == nullptr) {
      missing_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    if (!std::string_view(natsMsg_GetSubject(msg)).starts_with(subject_start_)) {
      foreign_.fetch_add(1, std::memory_order_relaxed);  // another subject of the stream
      natsMsg_Destroy(msg);
      continue;
    }
    direct_.fetch_add(1, std::memory_order_relaxed);
    if (!Enqueue({msg, sequence, false, false})) return false;
  }
  return true;
}

void NatsIngest::ApplyLoop() {
  std::deque<Queued> work;
  ReplicaOwnership* const ownership = options_.ownership;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(queue_mu_);
      const auto ready = [this] { return !queue_.empty() || fetch_done_; };
      if (ownership == nullptr) {
        work_cv_.wait(lock, ready);
      } else {
        // Wakes now and then while idle, to see the group's view change.
        work_cv_.wait_for(lock, std::chrono::milliseconds(kFetchWaitMs), ready);
      }
      if (queue_.empty() && fetch_done_) return;  // the fetch thread ended and all is applied
      work.swap(queue_);
    }
    room_cv_.notify_all();
    // false once stopping interrupted a failing write or a rebuild: the rest
    // is left to JetStream, which delivers it again.
    bool ok = ownership == nullptr || RebuildGainedNodes(*group_);
    for (const Queued& q : work) {
      if (!ok) {
        natsMsg_Destroy(q.msg);
        continue;
      }
      if (!Apply(q, *group_)) {
        ok = false;
        continue;
      }
      if (group_->accepted() >= options_.max_group_events) ok = Write(*group_);
    }
    if (ok) Write(*group_);
    work.clear();
  }
}

absl::Status NatsIngest::LearnNodes() {
  ReplicaOwnership& ownership = *options_.ownership;
  // The nodes the log restored are current up to the logged sequence: the
  // consumer goes on from there.
  v1::GetStatusResponse status;
  pools_->FillStatus(status);
  for (const v1::PoolStatus& p : status.pools()) ownership.MarkFollowed(p.node_id());
  const std::string filter = subject_start_ + ">";
  jsOptions o;
  jsOptions_Init(&o);
  o.Stream.Info.SubjectsFilter = filter.c_str();
  jsStreamInfo* si = nullptr;
  jsErrCode err = static_cast<jsErrCode>(0);
  const natsStatus s = js_GetStreamInfo(&si, connection_->js(), options_.stream.c_str(), &o, &err);
  if (s != NATS_OK) return NatsStatus(s, err, absl::StrCat("subjects of stream ", options_.stream));
  if (si->State.Subjects != nullptr) {
    for (int i = 0; i < si->State.Subjects->Count; ++i) {
      const std::string_view subject = si->State.Subjects->List[i].Subject;
      if (subject.starts_with(subject_start_)) {
        ownership.NoteKnown(subject.substr(subject_start_.size()));
      }
    }
  }
  jsStreamInfo_Destroy(si);
  return absl::OkStatus();
}

bool NatsIngest::Rebuild(const std::string& node, uint64_t through, Group& group) {
  const std::string subject = subject_start_ + node;
  bool done = through == 0;  // nothing before the stream's first message
  // A short-lived consumer of the node's subject from the stream's start,
  // deleted by the unsubscribe below.
  natsSubscription* sub = nullptr;
  while (!done && sub == nullptr && !stopping()) {
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = options_.stream.c_str();
    so.Config.AckPolicy = js_AckNone;
    so.Config.DeliverPolicy = js_DeliverAll;
    jsErrCode err = static_cast<jsErrCode>(0);
    if (js_PullSubscribe(&sub, connection_->js(), subject.c_str(), nullptr, nullptr, &so, &err) !=
        NATS_OK) {
      sub = nullptr;
      fetch_errors_.fetch_add(1, std::memory_order_relaxed);
      std::this_thread::sleep_for(kRetryPause);
    }
  }
  while (!done && !stopping()) {
    natsMsgList list{};
    jsErrCode err = static_cast<jsErrCode>(0);
    const natsStatus s =
        natsSubscription_Fetch(&list, sub, options_.fetch_batch, kRebuildWaitMs, &err);
    if (s == NATS_TIMEOUT) {
      // Nothing came: done if the consumer has nothing left to deliver.
      jsConsumerInfo* ci = nullptr;
      if (natsSubscription_GetConsumerInfo(&ci, sub, nullptr, &err) == NATS_OK) {
        done = ci->NumPending == 0 && ci->NumAckPending == 0;
        jsConsumerInfo_Destroy(ci);
      }
    } else if (s != NATS_OK) {
      fetch_errors_.fetch_add(1, std::memory_order_relaxed);
      std::this_thread::sleep_for(kRetryPause);
    }
    for (int i = 0; s == NATS_OK && i < list.Count && !done; ++i) {
      jsMsgMetaData* meta = nullptr;
      if (natsMsg_GetMetaData(&meta, list.Msgs[i]) != NATS_OK) continue;
      const uint64_t sequence = meta->Sequence.Stream;
      const uint64_t pending = meta->NumPending;
      jsMsgMetaData_Destroy(meta);
      if (sequence > through) {
        done = true;
        break;
      }
      Apply({list.Msgs[i], sequence, false, false, true}, group);  // not held: freed below
      done = sequence == through || pending == 0;
    }
    natsMsgList_Destroy(&list);
  }
  if (sub != nullptr) {
    natsSubscription_Unsubscribe(sub);
    natsSubscription_Destroy(sub);
  }
  if (!done) {  // stopping: the group goes unwritten, its messages come again
    group.Reset();
    return false;
  }
  options_.ownership->MarkFollowed(node);
  nodes_rebuilt_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool NatsIngest::RebuildGainedNodes(Group& group) {
  const ReplicaGroup* g = options_.ownership->group();
  if (g == nullptr) return true;
  const uint64_t generation = g->generation();
  if (generation == view_generation_) return true;
  for (const std::string& node : options_.ownership->OwnedNotFollowed()) {
    if (!Rebuild(node, taken_through_, group)) return false;
  }
  // Logged with the sequence taken so far (already logged or in this group).
  if (taken_through_ > 0 && group.accepted() > 0) group.Took(taken_through_);
  view_generation_ = generation;
  return true;
}

void NatsIngest::Refuse(uint64_t sequence, const std::string& why) {
  refused_.fetch_add(1, std::memory_order_relaxed);
  absl::MutexLock lock(&mu_);
  last_refusal_ = absl::StrCat("stream ", options_.stream, " sequence ", sequence, ": ", why);
}

bool NatsIngest::Apply(const Queued& q, Group& group) {
  if (!q.rebuilding) group.Hold(q);
  if (q.duplicate) {
    redelivered_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  const std::string_view subject = natsMsg_GetSubject(q.msg);
  const std::string node(subject.substr(std::min(subject.size(), subject_start_.size())));
  if (q.rebuilding) {
    replayed_.fetch_add(1, std::memory_order_relaxed);
  } else {
    consumed_.fetch_add(1, std::memory_order_relaxed);
    group.Took(q.sequence);
    taken_through_ = std::max(taken_through_, q.sequence);
    if (ReplicaOwnership* ownership = options_.ownership; ownership != nullptr) {
      ownership->NoteKnown(node);
      if (!ownership->Followed(node)) {
        if (!ownership->Owns(node)) {
          not_followed_.fetch_add(1, std::memory_order_relaxed);
          return true;  // another replica's node: acknowledged with the group
        }
        // Newly owned: everything before this message first.
        if (!Rebuild(node, q.sequence - 1, group)) return false;
      }
    }
  }
  v1::EventBatch batch;
  if (!batch.ParseFromArray(natsMsg_GetData(q.msg), natsMsg_GetDataLength(q.msg))) {
    Refuse(q.sequence, "the payload is not a kvlearn.v1.EventBatch");
    return true;
  }
  if (static_cast<uint32_t>(batch.events_size()) > options_.max_events_per_batch) {
    Refuse(q.sequence, absl::StrCat(batch.events_size(), " events, over the limit of ",
                                    options_.max_events_per_batch, " (--max-events-per-batch)"));
    return true;
  }
  for (int i = 0; i < batch.events_size(); ++i) {
    if (batch.events(i).node_id() != node) {
      Refuse(q.sequence, absl::StrCat("events[", i, "].node_id '", batch.events(i).node_id(),
                                      "' is not the subject's node '", node, "'"));
      return true;
    }
  }
  // A resent batch (server/retried_batches.h) is not applied twice.
  const absl::StatusOr<bool> fresh = pools_->ClaimBatch(batch);
  if (!fresh.ok()) {
    Refuse(q.sequence, std::string(fresh.status().message()));
    return true;
  }
  if (!*fresh) return true;
  for (const v1::Event& e : batch.events()) {
    const absl::Status s = pools_->Apply(e);
    if (s.ok()) {
      group.Accept(e);
      metrics_->CountIngested(static_cast<int>(e.kind_case()) - v1::Event::kRequestArrival);
      if (e.has_request_arrival()) {
        const auto& ids = e.request_arrival().block_ids();
        metrics_->ObserveArrival(e.timestamp_us(), {ids.data(), static_cast<size_t>(ids.size())});
      }
      continue;
    }
    events_rejected_.fetch_add(1, std::memory_order_relaxed);
    metrics_->CountRejected(static_cast<int>(s.code()));
  }
  v1::Event marker;
  if (RetriedBatches::Marker(batch, &marker)) {
    group.Accept(marker);  // its id survives a restart
    pools_->CountLoggedWithoutApply();
  }
  return true;
}

bool NatsIngest::Write(Group& group) {
  if (group.last() > 0) {
    const EventLog::EngineSequence sequence{log_key_, group.last()};
    const uint64_t events = group.accepted();
    while (true) {
      const absl::Status s =
          events > 0 ? log_->AppendFramed(group.records(), events, {&sequence, 1}).status()
                     : log_->RecordEngineSequences({&sequence, 1});
      if (s.ok()) break;
      log_retries_.fetch_add(1, std::memory_order_relaxed);
      if (stopping()) {
        group.Reset();  // not acknowledged: JetStream delivers it again
        return false;
      }
      std::this_thread::sleep_for(kRetryPause);
    }
    events_applied_.fetch_add(events, std::memory_order_relaxed);
    log_writes_.fetch_add(1, std::memory_order_relaxed);
    logged_sequence_.store(group.last(), std::memory_order_release);
  }
  if (group.ack() != nullptr && natsMsg_Ack(group.ack(), nullptr) != NATS_OK) {
    // Delivered again after the ack wait, then acknowledged as a redelivery.
    ack_failures_.fetch_add(1, std::memory_order_relaxed);
  }
  group.Reset();
  return true;
}

std::string NatsIngest::last_refusal() const {
  absl::MutexLock lock(&mu_);
  return last_refusal_;
}

std::string NatsIngest::Render() const {
  std::string out;
  const auto counter = [&out](const char* name, const char* help, uint64_t value) {
    absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " counter\n", name, " ",
                    value, "\n");
  };
  const auto gauge = [&out](const char* name, const char* help, uint64_t value) {
    absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " gauge\n", name, " ",
                    value, "\n");
  };
  counter("kvlearn_nats_messages_consumed_total",
          "JetStream messages taken in stream order (applied or refused), each once",
          messages_consumed());
  counter("kvlearn_nats_messages_redelivered_total",
          "JetStream messages delivered again after they were consumed (a lost acknowledgement, "
          "a restart): acknowledged, not applied",
          messages_redelivered());
  counter("kvlearn_nats_messages_refused_total",
          "JetStream messages refused whole: not an EventBatch, over --max-events-per-batch, or "
          "an event for another node than the subject's",
          messages_refused());
  counter("kvlearn_nats_messages_fetched_directly_total",
          "messages read straight from the stream to fill a gap in the consumer's delivery",
          messages_fetched_directly());
  counter("kvlearn_nats_messages_missing_total",
          "stream sequences in a gap that the stream no longer holds (removed by its limits)",
          messages_missing());
  counter("kvlearn_nats_messages_foreign_total",
          "messages in a gap of another subject than the prefix's (the stream carries others)",
          foreign_.load(std::memory_order_relaxed));
  counter("kvlearn_nats_events_applied_total",
          "events of JetStream messages applied to the pools and logged", events_applied());
  counter("kvlearn_nats_events_rejected_total",
          "events of JetStream messages the pools refused (the message's other events apply)",
          events_rejected_.load(std::memory_order_relaxed));
  counter("kvlearn_nats_log_writes_total",
          "event log writes of JetStream messages (one per group of messages)",
          log_writes_.load(std::memory_order_relaxed));
  counter("kvlearn_nats_log_retries_total",
          "event log writes of JetStream messages refused by the log and tried again",
          log_retries_.load(std::memory_order_relaxed));
  counter("kvlearn_nats_fetch_errors_total",
          "pull requests or direct gets that failed (NATS unreachable); retried every 100 ms",
          fetch_errors_.load(std::memory_order_relaxed));
  counter("kvlearn_nats_ack_failures_total",
          "acknowledgements that could not be sent (the message comes again and is acknowledged "
          "then)",
          ack_failures_.load(std::memory_order_relaxed));
  counter("kvlearn_nats_reconnects_total", "times the connection to NATS came back after a loss",
          connection_->reconnects());
  gauge("kvlearn_nats_connected", "1 while connected to NATS, else 0",
        connection_->connected() ? 1 : 0);
  if (options_.ownership != nullptr) {
    counter("kvlearn_nats_messages_not_followed_total",
            "replica group: messages of nodes this replica does not follow (another replica's), "
            "acknowledged and skipped",
            messages_not_followed());
    counter("kvlearn_nats_messages_replayed_total",
            "replica group: messages read again from the stream to rebuild nodes this replica "
            "took over",
            messages_replayed());
    counter("kvlearn_nats_nodes_rebuilt_total",
            "replica group: nodes this replica took over and rebuilt from the stream",
            nodes_rebuilt());
    gauge("kvlearn_replica_nodes_known", "replica group: serving nodes seen in the stream",
          options_.ownership->known_nodes());
    gauge("kvlearn_replica_nodes_followed",
          "replica group: nodes whose events this replica applies (owned now or before)",
          options_.ownership->followed_nodes());
  }
  gauge("kvlearn_nats_logged_sequence",
        "stream sequence of the last message logged (or refused) and acknowledged",
        logged_sequence());
  return out;
}

}  // namespace kvlearn
