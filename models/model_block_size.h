// A model's features count blocks (prompt length, depth, reuse per block), so
// a model trained on blocks of one size judges other traffic when it is fed
// blocks of another: its predictions are confidently wrong, and `learned`
// quietly follows its experts instead. compare and serve check the block size
// a model was trained on (its training traffic, models/traffic_summary.h)
// before any replay or serving, and refuse a mismatch naming both sizes and
// the fix.
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "models/learned_model.h"

namespace kvlearn {

// OK when `meta` records no training traffic (files written before kvlearn
// train recorded it: nothing to check) or its block size equals
// `block_size`. Otherwise FAILED_PRECONDITION naming `path`, both sizes, and
// what to do. `used_as` says where the other size comes from, e.g. "the trace
// is read as" or "this sidecar counts".
absl::Status CheckModelBlockSize(const ModelMetadata& meta, uint32_t block_size,
                                 std::string_view path, std::string_view used_as);

}  // namespace kvlearn
