#include "server/subject_reader.h"

#include <nats/nats.h>

#include <algorithm>
#include <chrono>
#include <thread>

namespace kvlearn {
namespace {

// How long a pull request waits before asking whether the consumer has
// anything left (messages removed meanwhile).
constexpr int64_t kReadWaitMs = 1000;
constexpr auto kRetryPause = std::chrono::milliseconds(100);

}  // namespace

bool ReadSubject(jsCtx* js, const SubjectRead& read,
                 const std::function<void(natsMsg* msg, uint64_t sequence)>& each) {
  const auto stopping = [&read] { return read.stopping && read.stopping(); };
  const auto failed = [&read] {
    if (read.fetch_errors != nullptr) read.fetch_errors->fetch_add(1, std::memory_order_relaxed);
    std::this_thread::sleep_for(kRetryPause);
  };
  if (read.through < read.from) return true;
  // Where the subject ends now.
  uint64_t end = 0;
  while (true) {
    if (stopping()) return false;
    natsMsg* last = nullptr;
    jsErrCode err = static_cast<jsErrCode>(0);
    const natsStatus s =
        js_GetLastMsg(&last, js, read.stream.c_str(), read.subject.c_str(), nullptr, &err);
    if (s == NATS_OK) {
      end = std::min(natsMsg_GetSequence(last), read.through);
      natsMsg_Destroy(last);
      break;
    }
    if (s == NATS_NOT_FOUND || err == JSNoMessageFoundErr) return true;  // empty subject
    failed();
  }
  if (end < read.from) return true;

  natsSubscription* sub = nullptr;
  while (sub == nullptr) {
    if (stopping()) return false;
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = read.stream.c_str();
    so.Config.AckPolicy = js_AckNone;
    if (read.from > 1) {
      so.Config.DeliverPolicy = js_DeliverByStartSequence;
      so.Config.OptStartSeq = read.from;
    } else {
      so.Config.DeliverPolicy = js_DeliverAll;
    }
    jsErrCode err = static_cast<jsErrCode>(0);
    if (js_PullSubscribe(&sub, js, read.subject.c_str(), nullptr, nullptr, &so, &err) != NATS_OK) {
      sub = nullptr;
      failed();
    }
  }
  bool done = false;
  while (!done && !stopping()) {
    natsMsgList list{};
    jsErrCode err = static_cast<jsErrCode>(0);
    const natsStatus s = natsSubscription_Fetch(&list, sub, read.batch, kReadWaitMs, &err);
    if (s == NATS_TIMEOUT) {
      // Nothing came: done if the consumer has nothing left to deliver.
      jsConsumerInfo* ci = nullptr;
      if (natsSubscription_GetConsumerInfo(&ci, sub, nullptr, &err) == NATS_OK) {
        done = ci->NumPending == 0 && ci->NumAckPending == 0;
        jsConsumerInfo_Destroy(ci);
      }
    } else if (s != NATS_OK) {
      failed();
    }
    for (int i = 0; s == NATS_OK && i < list.Count && !done; ++i) {
      jsMsgMetaData* meta = nullptr;
      if (natsMsg_GetMetaData(&meta, list.Msgs[i]) != NATS_OK) continue;
      const uint64_t sequence = meta->Sequence.Stream;
      const uint64_t pending = meta->NumPending;
      jsMsgMetaData_Destroy(meta);
      if (sequence > end) {
        done = true;
        break;
      }
      each(list.Msgs[i], sequence);
      done = sequence == end || pending == 0;
    }
    natsMsgList_Destroy(&list);
  }
  natsSubscription_Unsubscribe(sub);
  natsSubscription_Destroy(sub);
  return done;
}

}  // namespace kvlearn
