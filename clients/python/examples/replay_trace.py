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
        self.client.report_arrival(chain, input_length, request.get("output_length", 0),
                                   tokens, nbytes)
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
        self._timed("flush", self.client.flush)


def read_trace(path: str, limit: int) -> List[dict]:
    requests = []
    with open(path) as f:
        for line in f:
            if line.strip():
                requests.append(json.loads(line))
                if limit and len(requests) >= limit:
                    break
    return requests


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
    args = parser.parse_args(argv)

    requests = read_trace(args.trace, args.requests)
    client = RetentionClient(args.target, args.node_id, call_deadline_s=args.deadline_ms / 1000,
                             flush_deadline_s=args.flush_deadline_ms / 1000)
    node = EngineNode(client, args.pool_blocks * args.block_tokens * args.bytes_per_token,
                      args.block_tokens, args.bytes_per_token)
    start = time.monotonic()
    for request in requests:
        node.serve(request)
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
          f"dropped {s.events_dropped_total}, resyncs {s.resyncs_total}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
