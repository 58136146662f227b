// One event log record in the framing EventLog::AppendFramed takes: tag 0x0a
// (protobuf field 1, length-delimited), varint length, serialized event. An
// entry's records together are the wire form of a kvlearn.v1.EventBatch.
// Shared by the ingest paths that build a whole entry in one buffer
// (server/engine_ingest.h, server/nats_ingest.h).
#pragma once

#include <cstdint>
#include <string>

#include "kvlearn/v1/retention.pb.h"

namespace kvlearn {

// Appends `e` framed as one record to `out`.
inline void AppendFramedRecord(std::string& out, const v1::Event& e) {
  const size_t size = e.ByteSizeLong();
  out.push_back('\x0a');
  for (uint64_t n = size; true; n >>= 7) {  // protobuf's varint
    if (n < 0x80) {
      out.push_back(static_cast<char>(n));
      break;
    }
    out.push_back(static_cast<char>((n & 0x7f) | 0x80));
  }
  const size_t at = out.size();
  out.resize(at + size);
  e.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(out.data() + at));
}

}  // namespace kvlearn
