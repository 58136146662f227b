// The msgpack-cxx KV event decoder that engine/kv_event_decoder.cc replaced:
// it builds msgpack-cxx's object tree of the whole payload (one object per
// token id), then reads the batch from the tree. Kept only as the reference
// the skipping decoder is compared with; same contract as DecodeKvEventBatch.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/statusor.h"
#include "engine/kv_event.h"
#include "engine/kv_event_decoder.h"

namespace kvlearn {

absl::StatusOr<EngineEventBatch> DecodeKvEventBatchWithMsgpackCxx(
    std::span<const uint8_t> payload, const KvEventDecodeOptions& options = {});

}  // namespace kvlearn
