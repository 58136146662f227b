#include "server/nats_ingest.h"

#include <nats/nats.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "kvlearn/v1/retention.pb.h"
#include "server/event_log.h"
#include "server/framed_record.h"
#include "server/node_pools.h"
#include "server/node_snapshot_publisher.h"
#include "server/node_snapshot_store.h"
#include "server/pools_snapshot.h"
#include "server/replica_ownership.h"
#include "server/retried_batches.h"
#include "server/sidecar_metrics.h"
#include "server/subject_reader.h"

namespace kvlearn {
namespace {

// How long one pull request waits for messages: also how soon Stop is seen.
constexpr int64_t kFetchWaitMs = 200;
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
  // Another engine sequence for the same write (a tail marker cleared).
  void AlsoRecord(std::string key, uint64_t value) { extra_.push_back({std::move(key), value}); }
  const std::vector<EventLog::EngineSequence>& extra() const { return extra_; }
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
    extra_.clear();
  }

 private:
  std::string records_;
  uint64_t accepted_ = 0;
  uint64_t last_ = 0;  // 0: no new message
  std::vector<natsMsg*> held_;
  natsMsg* ack_ = nullptr;
  uint64_t ack_sequence_ = 0;
  std::vector<EventLog::EngineSequence> extra_;
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
    n->snapshot_store_ = std::make_unique<NodeSnapshotStore>(n->connection_.get(), o.stream);
    if (auto st = n->snapshot_store_->Ensure(); !st.ok()) return st;
    if (o.snapshot_local && (o.snapshot_every_events > 0 || o.snapshot_every_seconds > 0)) {
      const ReplicaGroup* g = o.ownership->group();
      n->snapshot_publisher_ = std::make_unique<NodeSnapshotPublisher>(
          n->snapshot_store_.get(), g != nullptr ? g->name() : o.durable);
    }
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
  if (snapshot_publisher_) snapshot_publisher_->Stop();
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
    if (ok && ownership != nullptr) MaybeSnapshot(nullptr);  // those due on the clock
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
  absl::flat_hash_set<std::string> seen;
  for (const v1::PoolStatus& p : status.pools()) {
    if (!seen.insert(p.node_id()).second) continue;  // another tier of it
    // Restored from a snapshot in JetStream, its tail not yet logged: not
    // served (rebuilding) until the apply thread has applied the tail.
    if (auto tail = log_->LoggedEngineSequence(TailKey(p.node_id())); tail.ok() && *tail > 0) {
      tails_at_start_.emplace_back(p.node_id(), *tail + 1);
      continue;
    }
    ownership.MarkFollowed(p.node_id());
  }
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

std::string NatsIngest::TailKey(const std::string& node) const {
  return absl::StrCat(kTailKeyPrefix, options_.stream, " ", node);
}

bool NatsIngest::Rebuild(const std::string& node, uint64_t through, Group& group) {
  uint64_t from = 1;
  if (!RestoreFromSnapshot(node, through, &from)) return false;
  if (from > 1 && !SaveRestored({{node, from}}, group)) return false;
  return ReplayTail(node, from, through, group);
}

bool NatsIngest::RestoreFromSnapshot(const std::string& node, uint64_t through, uint64_t* from) {
  *from = 1;
  // A pool already there (events sent over ReportEvents) takes the whole
  // subject on top, as before snapshots.
  if (snapshot_store_ == nullptr || !options_.snapshot_local || pools_->HasNode(node)) return true;
  NodeSnapshotStore::Loaded loaded;
  if (!snapshot_store_->Load(
          node, through, [this] { return stopping(); }, &fetch_errors_, &loaded)) {
    return false;
  }
  chunks_read_.fetch_add(loaded.chunks_read, std::memory_order_relaxed);
  const auto skip = [this](const std::string& why) {
    skipped_.fetch_add(1, std::memory_order_relaxed);
    std::cerr << "kvlearn serve: " << why << ": skipped" << std::endl;
  };
  for (const std::string& why : loaded.skipped) skip(why);
  for (const NodeSnapshotStore::Found& f : loaded.snapshots) {
    const std::string what = absl::StrCat("snapshot ", f.id, " of ", node);
    absl::StatusOr<PoolsSnapshot> decoded = DecodePoolsSnapshot(f.bytes);
    if (!decoded.ok()) {
      skip(absl::StrCat(what, ": ", decoded.status().message()));
      continue;
    }
    if (!MissingPolicyStates(*decoded).empty() || decoded->pools.empty() ||
        std::any_of(decoded->pools.begin(), decoded->pools.end(),
                    [&](const PoolsSnapshot::Pool& p) { return p.node != node; })) {
      skip(absl::StrCat(what, ": not the current format, or pools of another node"));
      continue;
    }
    std::string note;
    if (auto st = pools_->RestoreNode(*decoded, &note); !st.ok()) {
      skip(absl::StrCat(what, ": ", st.message()));
      // A pool half created is taken as it is: the whole subject goes on top.
      return true;
    }
    // A takeover is rare and worth a line: which snapshot, how far it covers.
    std::cerr << "kvlearn serve: node " << node << " restored from " << what << " (events stream "
              << options_.stream << " through sequence " << f.through << ")"
              << (note.empty() ? "" : "; ") << note << std::endl;
    restored_.fetch_add(1, std::memory_order_relaxed);
    *from = f.through + 1;
    return true;
  }
  return true;
}

bool NatsIngest::SaveRestored(const std::vector<std::pair<std::string, uint64_t>>& restored,
                              Group& group) {
  // Everything taken so far logged first: the local snapshot needs every
  // accepted event in the log.
  if (!Write(group)) return false;
  std::vector<EventLog::EngineSequence> markers;
  for (const auto& [node, from] : restored) markers.push_back({TailKey(node), from - 1});
  while (true) {
    absl::Status s = log_->RecordEngineSequences(markers);
    if (s.ok()) s = options_.snapshot_local();
    if (s.ok()) return true;
    local_snapshot_retries_.fetch_add(1, std::memory_order_relaxed);
    if (stopping()) return false;  // the restored pools are not in the log: rebuilt again
    std::this_thread::sleep_for(kRetryPause);
  }
}

bool NatsIngest::ReplayTail(const std::string& node, uint64_t from, uint64_t through,
                            Group& group) {
  SubjectRead read;
  read.stream = options_.stream;
  read.subject = subject_start_ + node;
  read.from = from;
  read.through = through;
  read.batch = options_.fetch_batch;
  read.stopping = [this] { return stopping(); };
  read.fetch_errors = &fetch_errors_;
  const bool done = ReadSubject(connection_->js(), read, [&](natsMsg* msg, uint64_t sequence) {
    Apply({msg, sequence, false, false, true}, group);  // not held: the reader frees it
  });
  if (!done) {  // stopping: the group goes unwritten, its messages come again
    group.Reset();
    return false;
  }
  // Logged with the tail: nothing left to apply. Cleared after a rebuild
  // from the whole subject too, where a marker of an earlier restore that
  // never reached the local log may linger.
  group.AlsoRecord(TailKey(node), 0);
  if (taken_through_ > 0) group.Took(taken_through_);
  options_.ownership->MarkFollowed(node);
  nodes_rebuilt_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool NatsIngest::RebuildGainedNodes(Group& group) {
  if (!tails_at_start_.empty()) {
    // A restart after a restore whose tail was not logged: it first.
    for (const auto& [node, from] : tails_at_start_) {
      if (!ReplayTail(node, from, taken_through_, group)) return false;
    }
    tails_at_start_.clear();
  }
  const ReplicaGroup* g = options_.ownership->group();
  if (g == nullptr) return true;
  const uint64_t generation = g->generation();
  if (generation == view_generation_) return true;
  // Every snapshot restored first, then one local snapshot for them all,
  // then each node's messages after its snapshot.
  std::vector<std::pair<std::string, uint64_t>> nodes, restored;
  for (const std::string& node : options_.ownership->OwnedNotFollowed()) {
    uint64_t from = 1;
    if (!RestoreFromSnapshot(node, taken_through_, &from)) return false;
    nodes.emplace_back(node, from);
    if (from > 1) restored.emplace_back(node, from);
  }
  if (!restored.empty() && !SaveRestored(restored, group)) return false;
  for (const auto& [node, from] : nodes) {
    if (!ReplayTail(node, from, taken_through_, group)) return false;
  }
  // Logged with the sequence taken so far (already logged or in this group).
  if (taken_through_ > 0 && group.accepted() > 0) group.Took(taken_through_);
  view_generation_ = generation;
  return true;
}

void NatsIngest::MaybeSnapshot(const std::string* node) {
  if (snapshot_publisher_ == nullptr) return;
  const auto now = std::chrono::steady_clock::now();
  const auto due = [&](const SnapshotDue& d) {
    if (d.events == 0) return false;
    if (options_.snapshot_every_events > 0 && d.events >= options_.snapshot_every_events) {
      return true;
    }
    return options_.snapshot_every_seconds > 0 &&
           now - d.last >= std::chrono::duration<double>(options_.snapshot_every_seconds);
  };
  const auto capture = [&](const std::string& n, SnapshotDue& d) {
    // Only the owner publishes; a full publisher is asked again later.
    if (!options_.ownership->Owns(n) || !snapshot_publisher_->HasRoom()) return;
    PoolsSnapshot pools;
    pools_->CaptureNode(n, &pools);
    if (pools.pools.empty()) return;
    snapshot_publisher_->Submit(n, taken_through_, std::move(pools));
    d = SnapshotDue{};
  };
  if (node != nullptr) {
    auto it = snapshot_due_.find(*node);
    if (it != snapshot_due_.end() && due(it->second)) capture(*node, it->second);
    return;
  }
  for (auto& [n, d] : snapshot_due_) {
    if (due(d)) capture(n, d);
  }
}

void NatsIngest::Refuse(uint64_t sequence, const std::string& why) {
  refused_.fetch_add(1, std::memory_order_relaxed);
  absl::MutexLock lock(&mu_);
  last_refusal_ = absl::StrCat("stream ", options_.stream, " sequence ", sequence, ": ", why);
}

bool NatsIngest::Apply(const Queued& q, Group& group) {
  if (q.duplicate) {
    group.Hold(q);
    redelivered_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  const std::string_view subject = natsMsg_GetSubject(q.msg);
  const std::string node(subject.substr(std::min(subject.size(), subject_start_.size())));
  if (q.rebuilding) {
    replayed_.fetch_add(1, std::memory_order_relaxed);
  } else {
    ReplicaOwnership* const ownership = options_.ownership;
    bool skip = false;
    if (ownership != nullptr) {
      ownership->NoteKnown(node);
      if (!ownership->Followed(node)) {
        skip = !ownership->Owns(node);
        // Newly owned: everything before this message first, before the
        // group holds this one (a rebuild from a snapshot writes the group).
        if (!skip && !Rebuild(node, q.sequence - 1, group)) {
          natsMsg_Destroy(q.msg);
          return false;
        }
      }
    }
    group.Hold(q);
    consumed_.fetch_add(1, std::memory_order_relaxed);
    group.Took(q.sequence);
    taken_through_ = std::max(taken_through_, q.sequence);
    if (skip) {
      not_followed_.fetch_add(1, std::memory_order_relaxed);
      return true;  // another replica's node: acknowledged with the group
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
  if (snapshot_publisher_ != nullptr) {
    snapshot_due_[node].events += batch.events_size();
    // Between two messages of the consumer: the pools cover the stream
    // exactly through this one.
    if (!q.rebuilding) MaybeSnapshot(&node);
  }
  return true;
}

bool NatsIngest::Write(Group& group) {
  if (group.last() > 0) {
    std::vector<EventLog::EngineSequence> sequences = {{log_key_, group.last()}};
    sequences.insert(sequences.end(), group.extra().begin(), group.extra().end());
    const uint64_t events = group.accepted();
    while (true) {
      const absl::Status s = events > 0
                                 ? log_->AppendFramed(group.records(), events, sequences).status()
                                 : log_->RecordEngineSequences(sequences);
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

uint64_t NatsIngest::snapshots_published() const {
  return snapshot_publisher_ ? snapshot_publisher_->published() : 0;
}

uint64_t NatsIngest::snapshot_bytes_published() const {
  return snapshot_publisher_ ? snapshot_publisher_->bytes() : 0;
}

uint64_t NatsIngest::snapshot_published_through(const std::string& node) const {
  return snapshot_publisher_ ? snapshot_publisher_->published_through(node) : 0;
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
    counter("kvlearn_nats_snapshots_published_total",
            "replica group: snapshots of owned nodes published to the JetStream snapshot stream",
            snapshots_published());
    counter("kvlearn_nats_snapshot_publish_failures_total",
            "replica group: snapshots that could not be published (the next one is tried)",
            snapshot_publisher_ ? snapshot_publisher_->failures() : 0);
    counter("kvlearn_nats_snapshot_bytes_published_total",
            "replica group: bytes of the snapshots published (before chunking)",
            snapshot_bytes_published());
    counter("kvlearn_nats_snapshots_restored_total",
            "replica group: nodes taken over that started from a snapshot in JetStream",
            snapshots_restored());
    counter("kvlearn_nats_snapshots_skipped_total",
            "replica group: snapshots left out at a takeover as torn, damaged or undecodable",
            snapshots_skipped());
    counter("kvlearn_nats_snapshot_chunks_read_total",
            "replica group: snapshot chunks read at takeovers", chunks_read_.load());
    counter("kvlearn_nats_local_snapshot_retries_total",
            "replica group: local log snapshots after a restore that failed and were retried",
            local_snapshot_retries_.load());
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
