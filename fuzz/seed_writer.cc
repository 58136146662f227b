// Writes the binary seed inputs under fuzz/corpus/ (argv[1]):
//  - sidecar_handlers_fuzzer/ (see that fuzzer's header for the format): a
//    node's request, hits, stores, an Admit and a RankEviction under lru,
//    learned and s3fifo; an Admit before any request_arrival; sizes over the
//    limits;
//  - model_file_fuzzer/: the small test model as a model file, and that file
//    cut in half;
//  - kv_event_decoder_fuzzer/: one batch of every event kind in both forms
//    (array, tag first; map with a "type" tag) with integer and with
//    byte-string hashes (EncodeKvEventBatch), and by hand the mixtures
//    engines send (an array batch of map events; unknown tags, extra fields
//    and keys; negative hashes) and a malformed one;
//  - pools_snapshot_fuzzer/: for every online policy, a snapshot of a node's
//    pool after a few requests under it (what a restart loads), with the
//    policy's selector byte first.
// The JSONL seeds of mooncake_reader_fuzzer are written by hand.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "engine/kv_event.h"
#include "engine/kv_event_encoder.h"
#include "fuzz_support.h"
#include "kvlearn/v1/retention.pb.h"
#include "models/model_file.h"
#include "server/node_pools.h"
#include "server/pools_snapshot.h"
#include "tests/engine/msgpack_builder.h"
#include "tests/support/test_model.h"

namespace {

using kvlearn::v1::Event;

void Record(std::string& out, int kind, const google::protobuf::Message& m) {
  const std::string bytes = m.SerializeAsString();
  out += static_cast<char>(kind);
  out += static_cast<char>(bytes.size() & 0xff);
  out += static_cast<char>((bytes.size() >> 8) & 0xff);
  out += bytes;
}

Event Base(const std::string& node, int64_t ts) {
  Event e;
  e.set_node_id(node);
  e.set_tier(kvlearn::v1::TIER_POOL);
  e.set_timestamp_us(ts);
  return e;
}

std::string Session(char policy, const std::string& node) {
  std::string out(1, policy);
  kvlearn::v1::EventBatch batch;
  Event e = Base(node, 1000);
  e.mutable_pool_configured()->set_capacity_bytes(1 << 20);
  *batch.add_events() = e;
  e = Base(node, 1000);
  for (uint64_t id : {1, 2, 3}) e.mutable_request_arrival()->add_block_ids(id);
  e.mutable_request_arrival()->set_input_length(1200);
  *batch.add_events() = e;
  e = Base(node, 1001);
  auto* s = e.mutable_block_stored();
  s->set_block_id(1);
  s->set_tokens(512);
  s->set_bytes(4096);
  *batch.add_events() = e;
  e = Base(node, 1002);
  e.mutable_block_hit()->set_block_id(1);
  *batch.add_events() = e;
  Record(out, 0, batch);

  kvlearn::v1::AdmitRequest admit;
  admit.set_node_id(node);
  admit.set_tier(kvlearn::v1::TIER_POOL);
  admit.set_timestamp_us(1003);
  uint64_t parent = 1;
  for (uint64_t id : {2, 3}) {
    auto* c = admit.add_candidates();
    c->set_block_id(id);
    c->set_parent_id(parent);
    c->set_tokens(512);
    c->set_bytes(4096);
    parent = id;
  }
  Record(out, 1, admit);

  kvlearn::v1::EventBatch stored;
  e = Base(node, 1004);
  s = e.mutable_block_stored();
  s->set_block_id(2);
  s->set_parent_id(1);
  s->set_tokens(512);
  s->set_bytes(4096);
  *stored.add_events() = e;
  Record(out, 0, stored);

  kvlearn::v1::RankRequest rank;
  rank.set_node_id(node);
  rank.set_tier(kvlearn::v1::TIER_POOL);
  rank.set_bytes_to_free(4096);
  Record(out, 2, rank);

  kvlearn::v1::EventBatch removed;
  e = Base(node, 1005);
  e.mutable_block_removed()->set_block_id(2);
  *removed.add_events() = e;
  e = Base(node, 1006);
  e.mutable_all_blocks_cleared();
  *removed.add_events() = e;
  Record(out, 0, removed);
  return out;
}

void Write(const std::string& dir, const std::string& name, const std::string& bytes) {
  std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
}

// Per online policy (its index in fuzz_support.h's list is the selector), a
// pool of 3 blocks' room after requests sharing a root, one evicting: its
// snapshot, as the event log stores it.
void WriteSnapshotSeeds(const std::string& dir) {
  std::filesystem::create_directories(dir);
  for (size_t p = 0; p < std::size(kvlearn::fuzz::kOnlinePolicies); ++p) {
    kvlearn::NodePools pools(kvlearn::fuzz::Options(kvlearn::fuzz::kOnlinePolicies[p]));
    kvlearn::v1::EventBatch batch;
    Event e = Base("node-0", 1000);
    e.mutable_pool_configured()->set_capacity_bytes(3 * 512 * 131072);
    *batch.add_events() = e;
    int64_t ts = 1000;
    for (const std::vector<uint64_t>& chain :
         std::vector<std::vector<uint64_t>>{{1, 2}, {1, 3}, {1, 2, 4}, {1, 5}}) {
      e = Base("node-0", ts += 1000);
      for (uint64_t id : chain) e.mutable_request_arrival()->add_block_ids(id);
      *batch.add_events() = e;
      for (uint64_t id : chain) {
        e = Base("node-0", ts);
        e.mutable_block_stored()->set_block_id(id);
        e.mutable_block_stored()->set_tokens(512);
        *batch.add_events() = e;
      }
    }
    for (const auto& event : batch.events()) pools.Apply(event).IgnoreError();
    kvlearn::PoolsSnapshot snapshot;
    if (!pools.CaptureAll([] { return true; }, &snapshot)) continue;
    Write(dir, kvlearn::fuzz::kOnlinePolicies[p],
          std::string(1, static_cast<char>(p)) + kvlearn::EncodePoolsSnapshot(snapshot));
  }
}

// Every event kind, with the optional fields set and unset.
kvlearn::EngineEventBatch EveryEngineEventKind() {
  kvlearn::EngineEventBatch batch;
  batch.ts = 1764460800.25;
  batch.data_parallel_rank = 1;
  kvlearn::BlockStoredEvent root;
  root.block_hashes = {11, 12};
  root.block_size = 16;
  root.num_token_ids = 32;
  root.tokens_per_block = 16;
  batch.events.push_back(root);
  kvlearn::BlockStoredEvent child;
  child.block_hashes = {0xFFFFFFFFFFFFFF01u};  // above INT64_MAX: negative as an integer
  child.parent_block_hash = 12;
  child.block_size = 16;
  child.num_token_ids = 9;
  child.tokens_per_block = 16;
  child.medium = kvlearn::KvMedium::kCpu;
  child.lora_id = 3;
  child.group_idx = 1;
  batch.events.push_back(child);
  kvlearn::BlockRemovedEvent removed;
  removed.block_hashes = {11};
  removed.medium = kvlearn::KvMedium::kOther;
  removed.medium_name = "LMCache";
  batch.events.push_back(removed);
  batch.events.push_back(kvlearn::AllBlocksClearedEvent{});
  return batch;
}

void WriteEngineSeeds(const std::string& dir) {
  using kvlearn::KvEventEncoding;
  using kvlearn::KvHashEncoding;
  const kvlearn::EngineEventBatch batch = EveryEngineEventKind();
  Write(dir, "array_int_hashes",
        kvlearn::EncodeKvEventBatch(batch, {KvEventEncoding::kArray, KvHashEncoding::kInt}));
  Write(dir, "array_bytes_hashes",
        kvlearn::EncodeKvEventBatch(batch, {KvEventEncoding::kArray, KvHashEncoding::kBytes}));
  Write(dir, "map_int_hashes",
        kvlearn::EncodeKvEventBatch(batch, {KvEventEncoding::kMap, KvHashEncoding::kInt}));
  Write(dir, "map_bytes_hashes",
        kvlearn::EncodeKvEventBatch(batch, {KvEventEncoding::kMap, KvHashEncoding::kBytes}));

  // Current vLLM: an array batch of map events, keys in another order, an
  // unknown key, an event with an unknown tag, byte hashes shorter than 8.
  kvlearn::MsgpackBuilder mixed;
  mixed.Array(3).Double(12.5).Array(3);
  mixed.Map(6)
      .Str("token_ids")
      .Array(2)
      .Uint(7)
      .Uint(8)
      .Str("type")
      .Str("BlockStored")
      .Str("block_size")
      .Uint(2)
      .Str("block_hashes")
      .Array(1)
      .Bin({0x01, 0x02, 0x03})
      .Str("parent_block_hash")
      .Nil()
      .Str("extra_keys")
      .Array(1)
      .Array(2)
      .Str("mm")
      .Uint(1);
  mixed.Map(2).Str("type").Str("BlockMoved").Str("block_hashes").Array(0);
  mixed.Map(3).Str("type").Str("BlockRemoved").Str("block_hashes").Array(1).Bin({0x01, 0x02, 0x03});
  mixed.Str("medium").Str("GPU");
  mixed.Nil();  // data_parallel_rank
  Write(dir, "vllm_array_batch_of_map_events", mixed.bytes());

  // SGLang-style array events with negative integer hashes and trailing
  // fields a newer version appends.
  kvlearn::MsgpackBuilder arrays;
  arrays.Map(3).Str("events").Array(2);
  arrays.Array(8)
      .Str("BlockStored")
      .Array(2)
      .Int(-1)
      .Int(-2)
      .Int(-3)
      .Array(0)
      .Uint(0)
      .Nil()
      .Str("HBM")
      .Str("future");
  arrays.Array(4).Str("BlockRemoved").Array(1).Int(-2).Nil().Uint(9);
  arrays.Str("ts").Uint(1).Str("attn_dp_rank").Uint(0);
  Write(dir, "map_batch_of_array_events", arrays.bytes());

  // A string where a hash goes: refused, naming events[0].block_hashes[0].
  kvlearn::MsgpackBuilder bad;
  bad.Array(2).Double(0).Array(1).Array(3).Str("BlockRemoved").Array(1).Str("x").Nil();
  Write(dir, "malformed_string_hash", bad.bytes());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: seed_writer fuzz/corpus\n");
    return 2;
  }
  const std::string models = std::string(argv[1]) + "/model_file_fuzzer";
  const std::string model = models + "/test_model";
  if (auto s =
          kvlearn::SaveModelFile(model, kvlearn::TestModelLayers(), kvlearn::TestModelMetadata());
      !s.ok()) {
    std::fprintf(stderr, "seed_writer: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::filesystem::copy_file(model, models + "/test_model_cut",
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::resize_file(models + "/test_model_cut", std::filesystem::file_size(model) / 2);

  WriteSnapshotSeeds(std::string(argv[1]) + "/pools_snapshot_fuzzer");
  const std::string dir = std::string(argv[1]) + "/sidecar_handlers_fuzzer";
  Write(dir, "lru_session", Session(0, "prefill-0"));
  Write(dir, "learned_session", Session(1, "prefill-0"));
  Write(dir, "s3fifo_session", Session(5, "node/1"));
  // Admit before any request_arrival (issue 13's crash under learned).
  std::string cold(1, 1);
  kvlearn::v1::AdmitRequest admit;
  admit.set_node_id("cold");
  auto* c = admit.add_candidates();
  c->set_block_id(9);
  c->set_tokens(512);
  c->set_bytes(4096);
  Record(cold, 1, admit);
  admit.set_tier(kvlearn::v1::TIER_HBM);
  Record(cold, 1, admit);
  Write(dir, "learned_cold_admit", cold);
  // Sizes at and over the limits, an empty node id.
  std::string limits(1, 0);
  kvlearn::v1::EventBatch batch;
  Event e = Base("n", 0);
  auto* s = e.mutable_block_stored();
  s->set_block_id(1);
  s->set_tokens(1);
  s->set_bytes(INT64_MAX);
  *batch.add_events() = e;
  s->set_bytes(int64_t{1} << 40);
  *batch.add_events() = e;
  e = Base("", 0);
  e.mutable_pool_configured()->set_capacity_bytes(INT64_MAX);
  *batch.add_events() = e;
  Record(limits, 0, batch);
  Write(dir, "limits", limits);
  const std::string engine = std::string(argv[1]) + "/kv_event_decoder_fuzzer";
  std::filesystem::create_directories(engine);
  WriteEngineSeeds(engine);
  return 0;
}
