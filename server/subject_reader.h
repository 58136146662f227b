// Reads one subject of a JetStream stream in stream order, from a stream
// sequence up to another, through a short-lived pull consumer (no
// acknowledgements, deleted when done). A replica rebuilding a node reads
// the node's events with it (server/nats_ingest.h), and the node's snapshot
// chunks (server/node_snapshot_store.h).
//
// The subject's last message is asked first: an empty subject costs one
// request and no consumer, and the read ends at min(its sequence, through)
// without waiting for a pull request to time out. Messages the stream
// removed meanwhile are simply not seen.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

typedef struct __jsCtx jsCtx;
typedef struct __natsMsg natsMsg;

namespace kvlearn {

struct SubjectRead {
  std::string stream;
  std::string subject;
  uint64_t from = 1;               // first stream sequence wanted
  uint64_t through = UINT64_MAX;   // last stream sequence wanted
  int batch = 256;                 // messages per pull request
  std::function<bool()> stopping;  // polled between requests; may be empty
  std::atomic<uint64_t>*
      fetch_errors;  // counts failed requests (retried every 100 ms); may be null
};

// Calls `each` with every message of the subject in [from, through], in
// stream order (the message is the callee's to read, not to keep or free).
// Requests that fail (NATS unreachable) are retried. False when `stopping`
// interrupted it.
bool ReadSubject(jsCtx* js, const SubjectRead& read,
                 const std::function<void(natsMsg* msg, uint64_t sequence)>& each);

}  // namespace kvlearn
