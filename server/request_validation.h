// Checks of the sidecar's requests that need no pool state: field ranges,
// list lengths, chains without repeats. The sidecar runs them before it
// touches a pool, so a malformed request changes nothing. Errors name the
// field ("block_stored.bytes: must be > 0, got -1") and carry the code the RPC
// edge maps to gRPC (INVALID_ARGUMENT, RESOURCE_EXHAUSTED).
//
// Checks that need a pool (does this id follow the same parent as before, is
// the parent stored) stay with the pool (server/node_pools.cc); CheckParent is
// here because both kinds of caller build the same message with it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "core/block_catalog.h"
#include "kvlearn/v1/retention.pb.h"

namespace kvlearn {

// Largest KV size of one block the sidecar accepts (1 TiB): far above any
// model's (a 512-token block of a 70B model is 160 MiB), small enough that
// sums over millions of blocks cannot overflow 64 bits.
inline constexpr int64_t kMaxBlockBytes = int64_t{1} << 40;
// Largest pool capacity accepted (1 EiB), for the same reason.
inline constexpr int64_t kMaxPoolBytes = int64_t{1} << 60;

// Longest string field a client may send: node ids, request ids
// (request_arrival, request_finished), a batch's source (EventBatch.source,
// batch_received.source) and transfer_finished.src / .dst. A fixed limit,
// not a flag: 128 bytes hold any UUID, host:port or pod name, and the log
// keeps each string as sent, so the cap bounds what one event can add to
// it. A longer one is refused with INVALID_ARGUMENT naming the field (a
// format error) and counted in kvlearn_string_fields_refused_total.
inline constexpr size_t kMaxStringFieldBytes = 128;

// INVALID_ARGUMENT with `message`, marked as a string field over
// kMaxStringFieldBytes so that the caller that keeps the counter can tell
// it from the other format errors (IsStringFieldTooLong).
absl::Status StringFieldTooLong(const std::string& message);
bool IsStringFieldTooLong(const absl::Status& status);

// A node id: 1..128 characters from [A-Za-z0-9._:/-].
absl::Status ValidateNodeId(std::string_view node_id, const std::string& field);

// Everything about `event` that does not depend on a pool.
absl::Status ValidateEvent(const v1::Event& event);

// Everything about an Admit / RankEviction request that does not depend on a
// pool; more than `max_candidates` candidates is RESOURCE_EXHAUSTED.
absl::Status ValidateAdmitRequest(const v1::AdmitRequest& request, uint32_t max_candidates);
absl::Status ValidateRankRequest(const v1::RankRequest& request, uint32_t max_candidates);

// OK unless `id` is in `catalog` behind another parent than `parent_hash`
// (nullopt = a chain's first block): then the ids are not prefix hashes.
absl::Status CheckParent(const BlockCatalog& catalog, uint64_t id,
                         std::optional<uint64_t> parent_hash, std::string_view field);

}  // namespace kvlearn
