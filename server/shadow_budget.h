// The blocks every shadow pool of a sidecar may remember together
// (--shadow-max-blocks, server/shadow_pool.h). Its own header because the
// pools own it (server/node_pools.h) and each shadow pool draws from it.
//
// Thread-safety: `blocks` is atomic; `max_blocks` is set before any use.
#pragma once

#include <atomic>
#include <cstdint>

namespace kvlearn {

struct ShadowBudget {
  uint64_t max_blocks = 0;
  std::atomic<uint64_t> blocks{0};
};

}  // namespace kvlearn
