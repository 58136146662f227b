// Events for tests that drive one NodePools directly, all on node "n" (pool
// tier): a request's arrival and a 512-token block's store, sized as the
// default cost model sizes the blocks an arrival announces.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "kvlearn/v1/retention.pb.h"
#include "tests/support/default_cost.h"

namespace kvlearn {

inline v1::Event Arrival(const std::vector<uint64_t>& ids) {
  v1::Event e;
  e.set_node_id("n");
  for (uint64_t id : ids) e.mutable_request_arrival()->add_block_ids(id);
  return e;
}

inline v1::Event Stored(uint64_t id, std::optional<uint64_t> parent) {
  v1::Event e;
  e.set_node_id("n");
  auto* s = e.mutable_block_stored();
  s->set_block_id(id);
  if (parent) s->set_parent_id(*parent);
  s->set_tokens(512);
  s->set_bytes(static_cast<int64_t>(DefaultCost().BytesForTokens(512)));
  return e;
}

}  // namespace kvlearn
