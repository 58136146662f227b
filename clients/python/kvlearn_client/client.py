"""RetentionClient: what a Python serving engine uses to ask the kvlearn
sidecar what to keep, without ever waiting on it longer than a deadline.

The behaviour is the C++ client's (clients/retention_client.h, docs/clients.md):

* One client speaks for one (node, tier) pool and follows the sidecar's call
  protocol: report_arrival with the prompt's chain (and a request id),
  report_hits (deepest first), then per new block admit, rank_eviction when
  short of room (it only proposes: the sidecar's view changes when
  report_removed confirms a victim), report_removed for the victims the
  engine drops and report_stored; report_finished when the request ends (its
  blocks are pinned, never proposed, until then).
* report_* only buffer events (no I/O; dropped and counted when the buffer is
  full). flush() sends them as one ReportEvents batch; admit and rank_eviction
  flush first, so the sidecar sees the events in protocol order.
* admit and rank_eviction have one deadline (`call_deadline_s`) covering that
  flush and the decision RPC together; flush() has `flush_deadline_s` (gRPC
  timeouts). When a call fails or runs out of time it is answered locally:
  admit keeps every candidate, rank_eviction picks least recently used leaves
  among the blocks stored (fallback_lru.py).
* Every batch carries a batch_id (a counter from a random start, so a
  restarted client does not reuse its predecessor's ids) and a source
  ("<node_id>#<tier>"; the node id alone past 128 bytes), which make a resend
  idempotent in the sidecar. A flush that fails without a refusal (deadline,
  UNAVAILABLE, ...) may have been applied, so its batch is held: the next
  flush() sends it again first, same id, same events (the sidecar
  acknowledges a duplicate without applying it); newer events buffer behind
  it, within max_buffered_events. Until then admit and rank_eviction answer
  locally without asking the sidecar.
* Events are dropped only when the buffer is full, the breaker is open or the
  sidecar refused the batch (INVALID_ARGUMENT, ...). Then the sidecar's view
  is stale: until it is repaired, admit and rank_eviction answer locally,
  events are not buffered, and the next flush() resends the pool instead (a
  resync: all_blocks_cleared, pool_configured, block_stored for every block
  the fallback tracks, parents first), which restarts the sidecar's policy
  state for the pool. Call flush() regularly (after each request).
* Circuit breaker: after `breaker_failures` consecutive failures saying the
  sidecar is unreachable or slow, calls skip it for `breaker_backoff_s`; the
  first call after that probes it again. Refusals that prove it alive
  (INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION, UNAUTHENTICATED,
  PERMISSION_DENIED) do not count.
* `token` (or $KVLEARN_TOKEN): sent on every call as gRPC metadata
  'authorization: Bearer TOKEN', for a sidecar started with --auth-tokens.

Thread-safety: every method may be called from any thread (one lock guards the
buffer, the fallback and the counters; RPCs run outside it). The protocol is
sequential per pool, so drive one client from one thread at a time.
"""

import copy
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

import grpc

from kvlearn.v1 import retention_pb2 as pb
from kvlearn.v1 import retention_pb2_grpc as pb_grpc

from .fallback_lru import FallbackLru, FallbackVictim


def _request_type(label: str) -> int:
    """The RequestArrival.request_type of a trace's type label."""
    if not label:
        return pb.REQUEST_TYPE_UNSPECIFIED
    known = {"text": pb.REQUEST_TYPE_TEXT, "search": pb.REQUEST_TYPE_SEARCH,
             "image": pb.REQUEST_TYPE_IMAGE, "file": pb.REQUEST_TYPE_FILE}
    return known.get(label, pb.REQUEST_TYPE_OTHER)


REPORT_EVENTS = "ReportEvents"
ADMIT = "Admit"
RANK_EVICTION = "RankEviction"

# Codes that say the sidecar answered: the request was wrong for its state, the
# sidecar is neither slow nor gone. They do not count toward the breaker.
_SIDECAR_ALIVE = {
    grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.PERMISSION_DENIED,
}


@dataclass
class Block:
    """A block the engine stores or asks to admit."""
    block_id: int
    parent_id: Optional[int]  # None for the first block of a chain
    tokens: int
    bytes: int


@dataclass
class AdmitResult:
    keep: List[bool]  # parallel to the candidates
    from_fallback: bool = False


@dataclass
class RankResult:
    victims: List[FallbackVictim]  # evict in this order
    bytes_freed: int = 0
    from_fallback: bool = False


@dataclass
class RetentionClientStats:
    """Counters since the client was made; map keys are RPC names
    ("ReportEvents", "Admit", "RankEviction") or gRPC code names."""
    calls_total: Dict[str, int] = field(default_factory=dict)
    rpc_attempts_total: Dict[str, int] = field(default_factory=dict)
    fallbacks_total: Dict[str, int] = field(default_factory=dict)
    sidecar_errors_total: Dict[str, int] = field(default_factory=dict)
    breaker_skips_total: int = 0
    breaker_opens_total: int = 0
    breaker_open: bool = False
    events_sent_total: int = 0
    events_rejected_total: int = 0
    # Never acknowledged as such: buffer full, breaker open, refused flush, or
    # held or buffered when a resync (which carries their effect) superseded them.
    events_dropped_total: int = 0
    resyncs_total: int = 0
    batches_resent_total: int = 0  # held batches sent again (same id, same events)
    fallback_forgotten_total: int = 0
    fallback_blocks: int = 0
    redirects_total: int = 0  # times a replica named another owner and the client moved
    target: str = ""  # where calls go now (the constructor's target until a redirect)


class _Failed(Exception):
    """A sidecar call that did not succeed (carries the status code; `sent`:
    the RPC was made, not skipped by the breaker)."""

    def __init__(self, code: grpc.StatusCode, sent: bool = True):
        super().__init__(code.name)
        self.code = code
        self.sent = sent


def _source(node_id: str, tier: int) -> str:
    """"<node_id>#<tier>": '#' is not a node id character, so pools do not
    share a source; past the sidecar's 128 bytes the node id, its default."""
    source = f"{node_id}#{pb.Tier.Name(tier)}"
    return source if len(source.encode()) <= 128 else node_id


def _bump(counter: Dict[str, int], key: str, n: int = 1) -> None:
    counter[key] = counter.get(key, 0) + n


class RetentionClient:
    def __init__(self, target: str, node_id: str, *, tier: int = pb.TIER_POOL,
                 call_deadline_s: float = 0.005, flush_deadline_s: float = 0.1,
                 fallback_capacity_blocks: int = 1 << 20,
                 max_buffered_events: int = 4096,
                 breaker_failures: int = 3, breaker_backoff_s: float = 1.0,
                 now_us: Optional[Callable[[], int]] = None,
                 credentials: Optional[grpc.ChannelCredentials] = None,
                 token: Optional[str] = None):
        """`token`: a token of the sidecar's --auth-tokens file, sent on every
        call as 'authorization: Bearer TOKEN'; None: $KVLEARN_TOKEN if set."""
        self._node_id = node_id
        self._tier = tier
        self._deadline_s = call_deadline_s
        self._flush_deadline_s = flush_deadline_s
        self._max_buffered = max_buffered_events
        self._breaker_failures = breaker_failures
        self._breaker_backoff_s = breaker_backoff_s
        self._now_us = now_us or (lambda: int(time.time() * 1e6))
        self._credentials = credentials
        self._entry = target  # where a failed redirected call goes back to
        self._target = target
        self._channels: Dict[str, grpc.Channel] = {}  # by target, closed by close()
        self._open_channel(target)
        if token is None:
            token = os.environ.get("KVLEARN_TOKEN") or None
        self._metadata = (("authorization", f"Bearer {token}"),) if token else None
        self._lock = threading.Lock()
        self._pending = pb.EventBatch()
        # Sent, not acknowledged, maybe applied: resent first (same ids).
        self._held: List[pb.EventBatch] = []
        self._source = _source(node_id, tier)
        # 1..2^63: never 0 (no id). Random, because the sidecar remembers a
        # source's ids across its restarts and a restarted client with the
        # same source must not resend a predecessor's id with new events.
        self._next_batch_id = secrets.randbits(63) + 1
        self._fallback = FallbackLru(fallback_capacity_blocks)
        self._resync_pending = False
        self._pool_capacity_bytes: Optional[int] = None
        self._consecutive_failures = 0
        self._open_until = 0.0  # time.monotonic()
        self._stats = RetentionClientStats()

    def _open_channel(self, target: str) -> None:
        channel = self._channels.get(target)
        if channel is None:
            channel = (grpc.secure_channel(target, self._credentials) if self._credentials
                       else grpc.insecure_channel(target))
            self._channels[target] = channel
        self._target = target
        self._stub = pb_grpc.RetentionStub(channel)

    def _follow_redirect(self, error: grpc.RpcError) -> bool:
        """A replica group's redirect (FAILED_PRECONDITION with the owner's
        address in trailing metadata 'kvlearn-owner', docs/scale_out.md):
        moves every later call to the owner and returns True. A redirected
        target that does not answer (the owner may have died) sends the next
        call to the first target again, which names the new owner."""
        if error.code() not in _SIDECAR_ALIVE:
            with self._lock:
                if self._target != self._entry:
                    self._open_channel(self._entry)
            return False
        if error.code() != grpc.StatusCode.FAILED_PRECONDITION:
            return False
        owner = dict(error.trailing_metadata() or ()).get("kvlearn-owner")
        with self._lock:
            if not owner or owner == self._target:
                return False
            self._open_channel(owner)
            self._stats.redirects_total += 1
        return True

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # Buffered events (no I/O).
    def _buffered_events(self) -> int:
        """Events held and buffered: what max_buffered_events bounds."""
        return len(self._pending.events) + sum(len(b.events) for b in self._held)

    def _number(self, batch: pb.EventBatch) -> pb.EventBatch:
        batch.batch_id = self._next_batch_id
        batch.source = self._source
        self._next_batch_id += 1
        return batch

    def _new_event(self) -> Optional[pb.Event]:
        if self._resync_pending or self._buffered_events() >= self._max_buffered:
            self._stats.events_dropped_total += 1
            self._resync_pending = True
            return None
        event = self._pending.events.add()
        event.node_id = self._node_id
        event.tier = self._tier
        event.timestamp_us = self._now_us()
        return event

    def _resync_batches(self) -> List[pb.EventBatch]:
        per_batch = max(1, self._max_buffered)
        now = self._now_us()
        events = [pb.Event(all_blocks_cleared=pb.AllBlocksCleared())]
        if self._pool_capacity_bytes is not None:
            events.append(pb.Event(pool_configured=pb.PoolConfigured(
                capacity_bytes=self._pool_capacity_bytes)))
        for b in self._fallback.blocks():
            stored = pb.BlockStored(block_id=b.block_id, tokens=b.tokens, bytes=b.bytes)
            if b.parent_id is not None:
                stored.parent_id = b.parent_id
            events.append(pb.Event(block_stored=stored))
        for e in events:
            e.node_id = self._node_id
            e.tier = self._tier
            e.timestamp_us = now
        return [self._number(pb.EventBatch(events=events[i:i + per_batch]))
                for i in range(0, len(events), per_batch)]

    def report_pool_configured(self, capacity_bytes: int) -> None:
        with self._lock:
            self._pool_capacity_bytes = capacity_bytes
            event = self._new_event()
            if event is not None:
                event.pool_configured.capacity_bytes = capacity_bytes

    def report_arrival(self, block_ids: Sequence[int], input_length: int = 0,
                       output_length: int = 0, block_tokens: Sequence[int] = (),
                       block_bytes: Sequence[int] = (), request_id: str = "",
                       served_above: int = 0, request_type: str = "",
                       turn: int = 0) -> None:
        """A request arrived needing `block_ids` (root first). Send block_tokens
        and block_bytes when the sidecar's model profile does not give them.
        With a request_id its blocks stay pinned until report_finished(id);
        without one, until the next arrival. served_above: how many leading
        blocks a cache in front of this pool served (the engine's own prefix
        cache, for a KV store behind it). request_type ("text", "search",
        "image", "file"; another label is sent as other) and turn (1 for a
        conversation's first), as a Bailian trace labels requests, reach the
        learned policy's features; "" and 0: not known."""
        with self._lock:
            self._fallback.begin_request()
            event = self._new_event()
            if event is not None:
                a = event.request_arrival
                a.block_ids.extend(block_ids)
                a.input_length = input_length
                a.output_length = output_length
                a.block_tokens.extend(block_tokens)
                a.block_bytes.extend(block_bytes)
                a.request_id = request_id
                a.served_above = served_above
                a.request_type = _request_type(request_type)
                a.turn = turn

    def report_finished(self, request_id: str) -> None:
        """The request reported with this id ended: its blocks may be proposed."""
        with self._lock:
            event = self._new_event()
            if event is not None:
                event.request_finished.request_id = request_id

    def report_hits(self, block_ids_deepest_first: Sequence[int]) -> None:
        with self._lock:
            for block_id in block_ids_deepest_first:
                self._fallback.hit(block_id)
                event = self._new_event()
                if event is not None:
                    event.block_hit.block_id = block_id

    def report_stored(self, block: Block) -> None:
        with self._lock:
            self._fallback.stored(block.block_id, block.parent_id, block.bytes, block.tokens)
            event = self._new_event()
            if event is not None:
                s = event.block_stored
                s.block_id = block.block_id
                if block.parent_id is not None:
                    s.parent_id = block.parent_id
                s.tokens = block.tokens
                s.bytes = block.bytes

    def report_removed(self, block_id: int) -> None:
        with self._lock:
            self._fallback.removed(block_id)
            event = self._new_event()
            if event is not None:
                event.block_removed.block_id = block_id

    # Calls to the sidecar.
    def _call(self, rpc: str, deadline: float, invoke: Callable[[float], object],
              follow_redirect: bool = False):
        """Runs `invoke(timeout)` unless the breaker is open; raises _Failed.
        With `follow_redirect`, a replica's redirect is followed once: the
        owner is asked the same within the same deadline."""
        with self._lock:
            if (self._consecutive_failures >= self._breaker_failures
                    and time.monotonic() < self._open_until):
                self._stats.breaker_skips_total += 1
                raise _Failed(grpc.StatusCode.UNAVAILABLE, sent=False)
            _bump(self._stats.rpc_attempts_total, rpc)
        code = grpc.StatusCode.OK
        result = None
        try:
            # gRPC refuses a zero timeout: an exhausted deadline still gets a
            # microsecond, which fails as DEADLINE_EXCEEDED at once.
            try:
                result = invoke(max(deadline - time.monotonic(), 1e-6))
            except grpc.RpcError as error:
                if not (follow_redirect and self._follow_redirect(error)):
                    raise
                result = invoke(max(deadline - time.monotonic(), 1e-6))
        except grpc.RpcError as error:
            code = error.code()
        with self._lock:
            if code != grpc.StatusCode.OK:
                _bump(self._stats.sidecar_errors_total, code.name)
            if code == grpc.StatusCode.OK or code in _SIDECAR_ALIVE:
                self._consecutive_failures = 0
            else:
                self._consecutive_failures += 1
                if self._consecutive_failures >= self._breaker_failures:
                    self._open_until = time.monotonic() + self._breaker_backoff_s
                    self._stats.breaker_opens_total += 1
        if code != grpc.StatusCode.OK:
            raise _Failed(code)
        return result

    def _flush_until(self, deadline: float, may_repair: bool) -> bool:
        """Sends the buffer; when batches are held or a resync is pending, only
        if `may_repair` (else False at once): the held batches first, or the
        pool. False if the sidecar did not acknowledge."""
        with self._lock:
            resync = self._resync_pending
            if (resync or self._held) and not may_repair:
                return False
            resent = 0
            if resync:
                # The held and buffered events are already reflected in the fallback.
                batches = self._resync_batches()
                self._stats.events_dropped_total += self._buffered_events()
                self._pending, self._held = pb.EventBatch(), []
                self._resync_pending = False
            else:
                resent = len(self._held)
                if self._pending.events:
                    self._held.append(self._number(self._pending))
                    self._pending = pb.EventBatch()
                if not self._held:
                    return True
                batches, self._held = self._held, []
        events = sum(len(b.events) for b in batches)
        try:
            summary = self._call(REPORT_EVENTS, deadline,
                                 lambda t: self._stub.ReportEvents(iter(batches), timeout=t,
                                                                   metadata=self._metadata))
        except _Failed as failure:
            with self._lock:
                _bump(self._stats.fallbacks_total, REPORT_EVENTS)
                if failure.sent:
                    self._stats.batches_resent_total += resent
                # After a failure other than a refusal the sidecar may have
                # applied the batches: held, resent first by the next flush()
                # with the same ids. Refused or skipped (breaker open): dropped
                # and the pool resent; a failed resync loses nothing reported.
                if failure.sent and failure.code not in _SIDECAR_ALIVE and not resync:
                    self._held = batches + self._held
                    return False
                if not resync:
                    self._stats.events_dropped_total += events
                self._resync_pending = True
            return False
        with self._lock:
            self._stats.batches_resent_total += resent
            self._stats.events_sent_total += events
            self._stats.events_rejected_total += summary.rejected
            if resync:
                self._stats.resyncs_total += 1
        return True

    def flush(self) -> bool:
        """Sends the buffered events, or resends the pool after a drop; False
        if that failed. Returns within flush_deadline_s."""
        with self._lock:
            _bump(self._stats.calls_total, REPORT_EVENTS)
        return self._flush_until(time.monotonic() + self._flush_deadline_s, may_repair=True)

    def admit(self, candidates: Sequence[Block]) -> AdmitResult:
        """New blocks of one chain, root to leaf. Returns within call_deadline_s."""
        deadline = time.monotonic() + self._deadline_s
        with self._lock:
            _bump(self._stats.calls_total, ADMIT)
            now_us = self._now_us()
        try:
            if not self._flush_until(deadline, may_repair=False):
                raise _Failed(grpc.StatusCode.UNAVAILABLE)
            request = pb.AdmitRequest(node_id=self._node_id, tier=self._tier,
                                      timestamp_us=now_us)
            for b in candidates:
                c = request.candidates.add(block_id=b.block_id, tokens=b.tokens, bytes=b.bytes)
                if b.parent_id is not None:
                    c.parent_id = b.parent_id
            response = self._call(ADMIT, deadline,
                                  lambda t: self._stub.Admit(request, timeout=t,
                                                             metadata=self._metadata),
                                  follow_redirect=True)
            if len(response.decisions) != len(candidates):
                raise _Failed(grpc.StatusCode.INTERNAL)
            return AdmitResult(keep=[d.keep for d in response.decisions])
        except _Failed:
            with self._lock:
                _bump(self._stats.fallbacks_total, ADMIT)
            return AdmitResult(keep=[True] * len(candidates), from_fallback=True)

    def rank_eviction(self, bytes_to_free: int, candidate_ids: Sequence[int] = ()) -> RankResult:
        """Victims for `bytes_to_free` (> 0), optionally among `candidate_ids`.
        Returns within call_deadline_s."""
        deadline = time.monotonic() + self._deadline_s
        with self._lock:
            _bump(self._stats.calls_total, RANK_EVICTION)
        try:
            if not self._flush_until(deadline, may_repair=False):
                raise _Failed(grpc.StatusCode.UNAVAILABLE)
            request = pb.RankRequest(node_id=self._node_id, tier=self._tier,
                                     bytes_to_free=bytes_to_free, candidate_ids=candidate_ids)
            response = self._call(RANK_EVICTION, deadline,
                                  lambda t: self._stub.RankEviction(request, timeout=t,
                                                                    metadata=self._metadata),
                                  follow_redirect=True)
            return RankResult(victims=[FallbackVictim(v.block_id, v.bytes)
                                       for v in response.victims],
                              bytes_freed=response.bytes_freed)
        except _Failed:
            with self._lock:
                _bump(self._stats.fallbacks_total, RANK_EVICTION)
                victims = self._fallback.evict(bytes_to_free, candidate_ids)
            return RankResult(victims=victims, bytes_freed=sum(v.bytes for v in victims),
                              from_fallback=True)

    def stats(self) -> RetentionClientStats:
        with self._lock:
            s = copy.deepcopy(self._stats)
            s.breaker_open = (self._consecutive_failures >= self._breaker_failures
                              and time.monotonic() < self._open_until)
            s.fallback_forgotten_total = self._fallback.forgotten
            s.fallback_blocks = len(self._fallback)
            s.target = self._target
            return s
