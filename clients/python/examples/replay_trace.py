#!/usr/bin/python3
"""Replays a Mooncake JSONL trace as one serving node driving the kvlearn
sidecar through kvlearn_client.RetentionClient.

The node keeps its own pool (the engine's truth: which blocks it holds) and
follows the sidecar's protocol per request: report the arrival (the whole
chain), the hits of the resident prefix deepest first, then for each missing
block root to leaf: admit; if kept and short of room, rank_eviction for the
missing bytes, evict the victims it can (resident, unpinned leaves) and report
them removed; then store the block and report it. A discarded block, or no room,
ends admission for the request. When the sidecar is slow or down the client
answers from its local LRU, so the replay goes on.

With --follow-engine the engine is kvlearn-engine-publisher instead: it
decides (an LRU prefix cache of --capacity-blocks) and reports its stores and
removals as KV cache events, which `kvlearn serve --engine-events` follows.
What engine events lack is reported here, through the client, as a router in
front of the engine would: each request's arrival (request id, whole chain),
its hits, deepest first, and its end. Before the engine serves a request this
script asks the sidecar rank_eviction for the blocks the engine is about to
evict, then lets the publisher go on (one line on stdout per request, read by
its --step-stdin) and waits until the sidecar has applied the engine's batch.
The sidecar's proposals are compared with the engine's removals (they confirm
them): with --policy lru on the sidecar they agree every time, and the hits
and evictions equal `kvlearn compare --policies lru` on the same trace with
the engine's capacity in bytes (docs/engine_events.md).

Run with Debian's Python (python3-grpcio, python3-protobuf) and the stubs:
  PYTHONPATH=build/clients/python:clients/python /usr/bin/python3 \\
    clients/python/examples/replay_trace.py --target 127.0.0.1:50051 \\
    --trace datasets/mooncake_conversation_trace.jsonl --requests 1000
"""

import argparse
import json
import sys
import time
from typing import Dict, List, Optional, Set

import grpc

from kvlearn.v1 import retention_pb2 as pb
from kvlearn.v1 import retention_pb2_grpc as pb_grpc
from kvlearn_client import Block, RetentionClient


class EngineNode:
    """One serving node's pool and the client calls it makes per request."""

    def __init__(self, client: RetentionClient, capacity_bytes: int,
                 block_tokens: int, bytes_per_token: int):
        self.client = client
        self.capacity_bytes = capacity_bytes
        self.block_tokens = block_tokens
        self.bytes_per_token = bytes_per_token
        self.parent: Dict[int, Optional[int]] = {}  # resident block -> parent
        self.size: Dict[int, int] = {}
        self.children: Dict[int, int] = {}
        self.pinned: Set[int] = set()
        self.used_bytes = 0
        self.configured = False
        # What the node saw, for the summary and the tests.
        self.requests = 0
        self.hit_blocks = 0
        self.stored_blocks = 0
        self.evicted_blocks = 0
        self.unusable_victims = 0  # victims named that the node could not evict
        self.calls = 0
        self.max_call_seconds = 0.0
        # Called with the call's name ("admit", "rank_eviction", "flush") just
        # before it starts, outside its timing (the tests stop the server here).
        self.before_call = None

    def _timed(self, name, call):
        if self.before_call:
            self.before_call(name)
        start = time.monotonic()
        result = call()
        self.calls += 1
        self.max_call_seconds = max(self.max_call_seconds, time.monotonic() - start)
        return result

    def _evictable(self, block_id: int) -> bool:
        return (block_id in self.parent and self.children.get(block_id, 0) == 0
                and block_id not in self.pinned)

    def _evict(self, block_id: int) -> None:
        parent = self.parent.pop(block_id)
        self.used_bytes -= self.size.pop(block_id)
        self.children.pop(block_id, None)
        if parent is not None and parent in self.children:
            self.children[parent] -= 1
        self.evicted_blocks += 1
        self.client.report_removed(block_id)

    def serve(self, request: dict) -> None:
        chain: List[int] = request["hash_ids"]
        if not chain:
            return
        self.requests += 1
        input_length = request.get("input_length", 0)
        tokens = [self.block_tokens] * len(chain)
        last = input_length - self.block_tokens * (len(chain) - 1)
        if 0 < last < self.block_tokens:
            tokens[-1] = last
        nbytes = [t * self.bytes_per_token for t in tokens]
        if not self.configured:
            self.client.report_pool_configured(self.capacity_bytes)
            self.configured = True
        request_id = f"r{self.requests}"
        self.client.report_arrival(chain, input_length, request.get("output_length", 0),
                                   tokens, nbytes, request_id=request_id,
                                   request_type=request.get("type", ""),
                                   turn=request.get("turn", 0))
        self.pinned.clear()
        hits = 0
        while hits < len(chain) and chain[hits] in self.parent:
            hits += 1
        self.pinned.update(chain[:hits])
        self.hit_blocks += hits
        self.client.report_hits(list(reversed(chain[:hits])))

        for i in range(hits, len(chain)):
            block = Block(chain[i], chain[i - 1] if i else None, tokens[i], nbytes[i])
            if block.bytes > self.capacity_bytes:
                break
            if not self._timed("admit", lambda: self.client.admit([block])).keep[0]:
                break
            free = self.capacity_bytes - self.used_bytes
            if free < block.bytes:
                ranked = self._timed("rank_eviction",
                                     lambda: self.client.rank_eviction(block.bytes - free))
                for victim in ranked.victims:
                    if self._evictable(victim.block_id):
                        self._evict(victim.block_id)
                    else:
                        self.unusable_victims += 1
            if self.capacity_bytes - self.used_bytes < block.bytes:
                break  # everything left is pinned (or the victims were unusable)
            self.parent[block.block_id] = block.parent_id
            self.size[block.block_id] = block.bytes
            if block.parent_id is not None:
                self.children[block.parent_id] = self.children.get(block.parent_id, 0) + 1
            self.used_bytes += block.bytes
            self.pinned.add(block.block_id)
            self.stored_blocks += 1
            self.client.report_stored(block)
        self.client.report_finished(request_id)
        self._timed("flush", self.client.flush)


class EngineMirror:
    """The publisher's prefix cache (engine/prefix_cache_engine.h) replayed
    here, so the script knows each request's hits and the blocks the engine
    will evict, in its order, before the engine says so."""

    def __init__(self, capacity_blocks: int):
        self.capacity = capacity_blocks
        self.parent: Dict[int, Optional[int]] = {}
        self.children: Dict[int, int] = {}
        self.lru: Dict[int, None] = {}  # least recently used first
        self.evicted_total = 0

    def serve(self, chain: List[int]):
        """Returns (hits, evicted ids in order) for one request."""
        hits = 0
        while (hits < len(chain) and chain[hits] in self.parent
               and self.parent[chain[hits]] == (chain[hits - 1] if hits else None)):
            hits += 1
        pinned = set(chain[:hits])
        evicted: List[int] = []
        end = hits
        for j in range(hits, len(chain)):
            if chain[j] in self.parent:
                break  # cached under another parent: the engine stops too
            if len(self.parent) >= self.capacity:
                victim = next((b for b in self.lru
                               if self.children.get(b, 0) == 0 and b not in pinned), None)
                if victim is None:
                    break
                del self.lru[victim]
                parent = self.parent.pop(victim)
                self.children.pop(victim, None)
                if parent is not None:
                    self.children[parent] -= 1
                evicted.append(victim)
            parent = chain[j - 1] if j else None
            self.parent[chain[j]] = parent
            if parent is not None:
                self.children[parent] = self.children.get(parent, 0) + 1
            self.lru[chain[j]] = None
            pinned.add(chain[j])
            end = j + 1
        for j in range(end):  # leaf first, root ends most recent
            self.lru.pop(chain[j], None)
        for j in reversed(range(end)):
            self.lru[chain[j]] = None
        self.evicted_total += len(evicted)
        return hits, evicted


class FollowedEngine:
    """Reports what engine events lack (arrivals, hits, ends) and asks the
    sidecar for the victims of each request before the engine evicts them."""

    def __init__(self, client: RetentionClient, status_stub, node_id: str, tier: int,
                 capacity_blocks: int, block_bytes: int, step_out):
        self.client = client
        self.status_stub = status_stub
        self.node_id = node_id
        self.tier = tier
        self.mirror = EngineMirror(capacity_blocks)
        self.block_bytes = block_bytes
        self.step_out = step_out
        self.requests = 0
        self.hit_blocks = 0
        self.proposals_agreed = 0
        self.proposals_differed = 0

    def _pool(self):
        status = self.status_stub.GetStatus(pb.GetStatusRequest(), timeout=10)
        for p in status.pools:
            if p.node_id == self.node_id and p.tier == self.tier:
                return p
        return None

    def wait_for_engine(self, timeout_s: float = 60.0) -> None:
        """Until the sidecar holds what the engine holds after the requests so
        far (its removals counted, its stores applied)."""
        want_resident = len(self.mirror.parent)
        give_up = time.monotonic() + timeout_s
        while True:
            p = self._pool()
            if (want_resident == 0 and p is None) or (
                    p is not None and p.resident_blocks == want_resident
                    and p.evictions == self.mirror.evicted_total):
                return
            if time.monotonic() > give_up:
                raise RuntimeError(
                    f"the sidecar did not follow the engine: it holds "
                    f"{p.resident_blocks if p else 0} blocks and saw "
                    f"{p.evictions if p else 0} removals, the engine "
                    f"{want_resident} and {self.mirror.evicted_total}")
            time.sleep(0.001)

    def serve(self, request: dict) -> None:
        chain: List[int] = request["hash_ids"]
        request_id = f"r{self.requests}"
        self.requests += 1
        hits, evicted = self.mirror.serve(chain)
        self.hit_blocks += hits
        self.client.report_arrival(chain, request.get("input_length", 0),
                                   request.get("output_length", 0), request_id=request_id,
                                   request_type=request.get("type", ""),
                                   turn=request.get("turn", 0))
        self.client.report_hits(list(reversed(chain[:hits])))
        if evicted:
            ranked = self.client.rank_eviction(len(evicted) * self.block_bytes)
            if [v.block_id for v in ranked.victims] == evicted and not ranked.from_fallback:
                self.proposals_agreed += 1
            else:
                self.proposals_differed += 1
        if not self.client.flush():
            raise RuntimeError("could not report the request to the sidecar")
        self.step_out.write(f"{request_id}\n")  # the publisher serves it now
        self.step_out.flush()
        self.wait_for_engine()
        self.client.report_finished(request_id)


def read_trace(path: str, limit: int) -> List[dict]:
    requests = []
    with open(path) as f:
        for line in f:
            if line.strip():
                requests.append(json.loads(line))
                if limit and len(requests) >= limit:
                    break
    return requests


class ProgressLine:
    """A live line on stderr, as kvlearn's commands draw it (core/progress_line.h):
    "LABEL done/total requests (P%), R requests/s, ETA S s", redrawn in place at most
    four times a second and cleared at the end; nothing unless `enabled` (stderr a
    terminal and no --quiet)."""

    def __init__(self, label, total, enabled, out=sys.stderr):
        self.label, self.total, self.enabled, self.out = label, total, enabled, out
        self.start = time.monotonic()
        self.drawn_at = None

    def text(self, done, seconds):
        rate = done / seconds if seconds > 0 else 0.0
        line = f"{self.label} {done}/{self.total} requests ({100 * done / max(self.total, 1):.0f}%), " \
               f"{rate:.0f} requests/s"
        if rate > 0 and done <= self.total:
            line += f", ETA {(self.total - done) / rate:.0f} s"
        return line

    def update(self, done):
        now = time.monotonic()
        if not self.enabled or (self.drawn_at is not None and now - self.drawn_at < 0.25):
            return
        self.out.write("\r" + self.text(done, now - self.start) + "\x1b[K")
        self.out.flush()
        self.drawn_at = now

    def finish(self):
        if self.drawn_at is not None:
            self.out.write("\r\x1b[K")
            self.out.flush()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True, help="host:port of kvlearn serve")
    parser.add_argument("--trace", required=True, help="Mooncake JSONL trace")
    parser.add_argument("--requests", type=int, default=0, help="first N requests (0 = all)")
    parser.add_argument("--node-id", default="python-0")
    parser.add_argument("--pool-blocks", type=int, default=2000,
                        help="pool capacity in full blocks (default 2000)")
    parser.add_argument("--block-tokens", type=int, default=512)
    parser.add_argument("--bytes-per-token", type=int, default=131072,
                        help="KV bytes per token (default Llama-3-8B: 128 KiB)")
    parser.add_argument("--deadline-ms", type=float, default=5.0,
                        help="deadline of each admit / rank_eviction (default 5)")
    parser.add_argument("--flush-deadline-ms", type=float, default=100.0,
                        help="deadline of each flush, which may resend the pool (default 100)")
    parser.add_argument("--follow-engine", action="store_true",
                        help="the engine is kvlearn-engine-publisher --step-stdin reading "
                             "this script's stdout (see above)")
    parser.add_argument("--engine-capacity-blocks", type=int, default=4096,
                        help="with --follow-engine: the publisher's --capacity-blocks")
    parser.add_argument("--summary-json", help="also write the summary counters here")
    parser.add_argument("--quiet", action="store_true",
                        help="no progress line (drawn on stderr only when it is a terminal: "
                             "requests served, rate, ETA)")
    args = parser.parse_args(argv)

    requests = read_trace(args.trace, args.requests)
    if args.follow_engine:
        return follow_engine(args, requests)
    client = RetentionClient(args.target, args.node_id, call_deadline_s=args.deadline_ms / 1000,
                             flush_deadline_s=args.flush_deadline_ms / 1000)
    node = EngineNode(client, args.pool_blocks * args.block_tokens * args.bytes_per_token,
                      args.block_tokens, args.bytes_per_token)
    start = time.monotonic()
    progress = ProgressLine("replay_trace: served", len(requests),
                            sys.stderr.isatty() and not args.quiet)
    for done, request in enumerate(requests, start=1):
        node.serve(request)
        progress.update(done)
    progress.finish()
    wall = time.monotonic() - start
    s = client.stats()
    client.close()
    print(f"replay_trace: {node.requests} requests, {node.hit_blocks} block hits, "
          f"{node.stored_blocks} stored, {node.evicted_blocks} evicted, "
          f"{node.unusable_victims} unusable victims; {node.calls} calls, "
          f"slowest {node.max_call_seconds * 1000:.2f} ms; wall {wall:.2f} s")
    print(f"  rpc attempts {s.rpc_attempts_total}, fallbacks {s.fallbacks_total}, "
          f"sidecar errors {s.sidecar_errors_total}, breaker skips {s.breaker_skips_total}, "
          f"events sent {s.events_sent_total} rejected {s.events_rejected_total} "
          f"dropped {s.events_dropped_total}, resyncs {s.resyncs_total}, "
          f"batches resent {s.batches_resent_total}")
    return 0


def follow_engine(args, requests: List[dict]) -> int:
    # Engine events land in the node's HBM tier (the publisher's GPU medium).
    client = RetentionClient(args.target, args.node_id, tier=pb.TIER_HBM,
                             call_deadline_s=args.deadline_ms / 1000,
                             flush_deadline_s=args.flush_deadline_ms / 1000)
    channel = grpc.insecure_channel(args.target)
    engine = FollowedEngine(client, pb_grpc.RetentionStub(channel), args.node_id,
                            pb.TIER_HBM, args.engine_capacity_blocks,
                            args.block_tokens * args.bytes_per_token, sys.stdout)
    start = time.monotonic()
    for request in requests:
        if request["hash_ids"]:
            engine.serve(request)
    client.flush()
    wall = time.monotonic() - start
    summary = {"requests": engine.requests, "hit_blocks": engine.hit_blocks,
               "evicted_blocks": engine.mirror.evicted_total,
               "resident_blocks": len(engine.mirror.parent),
               "proposals_agreed": engine.proposals_agreed,
               "proposals_differed": engine.proposals_differed}
    client.close()
    channel.close()
    print(f"replay_trace --follow-engine: {engine.requests} requests, {engine.hit_blocks} "
          f"block hits, {engine.mirror.evicted_total} evicted, "
          f"{len(engine.mirror.parent)} resident; proposals agreed with the engine "
          f"{engine.proposals_agreed}, differed {engine.proposals_differed}; "
          f"wall {wall:.2f} s", file=sys.stderr)
    if args.summary_json:
        with open(args.summary_json, "w") as f:
            json.dump(summary, f)
    return 0 if engine.proposals_differed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
