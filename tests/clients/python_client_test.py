#!/usr/bin/python3
"""The Python retention client (clients/python/kvlearn_client) against the real
`kvlearn serve`: the example's replay runs through it, the server is killed
(SIGKILL) mid-run, and every later call must return promptly from the local
fallback, counted, with no exception reaching the engine. Behind a relay that
loses the sidecar's answer to a flush it applied, the held batch is resent
with its id and applied once, without a resync. A replica that names another
owner (a replica group's redirect) is followed once, and later calls go to
the owner.

Environment (set by ctest, tests/clients/CMakeLists.txt): KVLEARN_BINARY (the
kvlearn executable), KVLEARN_TRACE (the sample trace), PYTHONPATH (the
generated stubs, clients/python, clients/python/examples). Ends with one
summary line; exits non-zero on failure.

On time bounds: the project keeps wall-clock bounds out of tests, but what is
asked of this client is that the caller never waits past its deadline. Each
call is timed and compared with a bound 5 times the deadline (5 s for 1 s; the
deadline is that long so that every answer before the kill is the sidecar's
even on a loaded machine): far above scheduling noise, far below a hang.
"""

import os
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import threading
import unittest
from concurrent import futures

import grpc

from kvlearn.v1 import retention_pb2 as pb
from kvlearn.v1 import retention_pb2_grpc as pb_grpc
from kvlearn_client import Block, FallbackLru, RetentionClient
from replay_trace import EngineNode, read_trace

DEADLINE_S = 1.0
NEVER_PAST_S = 5.0
BLOCK_TOKENS = 512
BYTES_PER_TOKEN = 131072


class ServeProcess:
    """`kvlearn serve` on a free loopback port and a temporary data directory."""

    def __init__(self, extra_args=()):
        self.data_dir = tempfile.mkdtemp(prefix="kvlearn_pyclient_")
        self.proc = subprocess.Popen(
            [os.environ["KVLEARN_BINARY"], "serve", "--listen", "127.0.0.1:0",
             "--metrics-listen", "", "--data-dir", self.data_dir, *extra_args],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        # First stdout line: "port P metrics_port M" (docs/sidecar.md).
        ready, _, _ = select.select([self.proc.stdout], [], [], 60)
        line = self.proc.stdout.readline().decode() if ready else ""
        if not line.startswith("port "):
            self.kill()
            raise RuntimeError(f"kvlearn serve did not print its port: {line!r}")
        self.port = int(line.split()[1])

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.proc.stdout.close()
        shutil.rmtree(self.data_dir, ignore_errors=True)


def sidecar_status(port: int) -> pb.GetStatusResponse:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        return pb_grpc.RetentionStub(channel).GetStatus(pb.GetStatusRequest(), timeout=10)


def resident_blocks_in_sidecar(port: int) -> int:
    return sum(p.resident_blocks for p in sidecar_status(port).pools)


def wait_until(done) -> bool:
    """Polls `done` for a generous while: a loaded machine makes a test
    slower, not flaky (as tests/server/sidecar_fixture.h's WaitUntil)."""
    give_up = time.monotonic() + 120
    while not done():
        if time.monotonic() > give_up:
            return False
        time.sleep(0.005)
    return True


class AckLosingRelay(pb_grpc.RetentionServicer):
    """Between the client and the real sidecar, on a free loopback port:
    passes every call on and records the batches of each ReportEvents stream.
    While `lose_acks` is set it still hands the batches to the sidecar but
    keeps the sidecar's answer from the client until the client gives up (its
    deadline): an acknowledgement lost on the way back, after the sidecar
    applied the batches (as the C++ test's AckLosingRelay)."""

    def __init__(self, sidecar_port: int):
        self._channel = grpc.insecure_channel(f"127.0.0.1:{sidecar_port}")
        self._sidecar = pb_grpc.RetentionStub(self._channel)
        self._lock = threading.Lock()
        self._streams = []
        self.duplicates = 0
        self.lose_acks = False
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_RetentionServicer_to_server(self, self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()

    def streams(self):
        with self._lock:
            return list(self._streams)

    def stop(self):
        self._server.stop(None)
        self._channel.close()

    def ReportEvents(self, request_iterator, context):
        batches = list(request_iterator)
        summary = self._pass_on(context, lambda: self._sidecar.ReportEvents(iter(batches),
                                                                            timeout=60))
        with self._lock:
            self._streams.append(batches)
            self.duplicates += summary.duplicate_batches
        while self.lose_acks and context.is_active():
            time.sleep(0.001)
        return summary

    def Admit(self, request, context):
        return self._pass_on(context, lambda: self._sidecar.Admit(request, timeout=60))

    def RankEviction(self, request, context):
        return self._pass_on(context, lambda: self._sidecar.RankEviction(request, timeout=60))

    @staticmethod
    def _pass_on(context, call):
        try:
            return call()
        except grpc.RpcError as error:
            context.abort(error.code(), error.details())


class RedirectingReplica(pb_grpc.RetentionServicer):
    """A replica of a group that owns no node: answers every decision with
    FAILED_PRECONDITION and `owner` in trailing metadata 'kvlearn-owner', as
    `kvlearn serve --replica-group` does for another replica's node."""

    def __init__(self):
        self.owner = ""
        self.calls = 0
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        pb_grpc.add_RetentionServicer_to_server(self, self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()

    def stop(self):
        self._server.stop(None)

    def _redirect(self, context):
        self.calls += 1
        context.set_trailing_metadata((("kvlearn-owner", self.owner),
                                       ("kvlearn-owner-name", "the-owner")))
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"owned by {self.owner}")

    def Admit(self, request, context):
        self._redirect(context)

    def RankEviction(self, request, context):
        self._redirect(context)


class RedirectTest(unittest.TestCase):
    def test_a_redirect_is_followed_once_and_kept(self):
        server = ServeProcess()
        replica = RedirectingReplica()
        owner = f"127.0.0.1:{server.port}"
        replica.owner = owner
        block = Block(1, None, 10, 1000)
        try:
            with RetentionClient(f"127.0.0.1:{replica.port}", "python-0",
                                 call_deadline_s=DEADLINE_S) as client:
                self.assertFalse(client.admit([block]).from_fallback)
                self.assertFalse(client.admit([Block(2, 1, 10, 1000)]).from_fallback)
                s = client.stats()
                self.assertEqual(s.redirects_total, 1)
                self.assertEqual(s.target, owner)
                self.assertEqual(replica.calls, 1)  # the second went to the owner
            # A replica naming itself is not followed in a loop: a fallback.
            replica.owner = f"127.0.0.1:{replica.port}"
            with RetentionClient(replica.owner, "python-0", call_deadline_s=DEADLINE_S) as client:
                self.assertTrue(client.rank_eviction(1000).from_fallback)
                self.assertEqual(client.stats().redirects_total, 0)
        finally:
            replica.stop()
            server.kill()


class FallbackLruTest(unittest.TestCase):
    def test_least_recently_used_leaves_only(self):
        # The C++ FallbackLruTest.EvictsLeastRecentlyUsedLeavesOnly, by hand:
        # recency oldest first 2 3 4 1 5; leaves 3, 4, 5.
        lru = FallbackLru(100)
        lru.begin_request()
        lru.stored(1, None, 10)
        lru.stored(2, 1, 10)
        lru.stored(3, 2, 10)
        lru.begin_request()
        lru.stored(4, None, 10)
        lru.begin_request()
        lru.hit(1)
        lru.stored(5, 1, 10)
        lru.begin_request()
        self.assertEqual([v.block_id for v in lru.evict(10)], [3])
        self.assertEqual([v.block_id for v in lru.evict(20)], [2, 4])
        self.assertEqual([v.block_id for v in lru.evict(100)], [5, 1])
        self.assertEqual(len(lru), 0)

    def test_pins_and_candidates(self):
        lru = FallbackLru(100)
        lru.begin_request()
        lru.stored(1, None, 10)
        lru.begin_request()
        lru.stored(2, None, 20)
        lru.begin_request()
        lru.hit(1)  # request 3 uses 1: pinned
        lru.stored(3, None, 30)
        self.assertEqual([v.block_id for v in lru.evict(100)], [2])
        lru.begin_request()
        self.assertEqual([(v.block_id, v.bytes) for v in lru.evict(100, [3])], [(3, 30)])


    def test_same_victims_as_a_full_scan_on_random_sequences(self):
        # A plain model of the rule: each victim is the evictable block with
        # the oldest use, found by a full scan (as the C++ test does).
        rng = random.Random(20261130)
        for _ in range(10):
            lru = FallbackLru(60)
            ref = {}  # id -> [parent, bytes, children, pinned, use]
            clock = 0
            next_id = 1
            evictions = 0

            def oldest(candidates):
                eligible = [i for i, b in ref.items() if b[2] == 0 and not b[3]
                            and (not candidates or i in candidates)]
                return min(eligible, key=lambda i: ref[i][4]) if eligible else None

            def erase(i):
                parent = ref.pop(i)[0]
                if parent in ref:
                    ref[parent][2] -= 1

            for _ in range(1500):
                op = rng.randrange(8)
                known = list(ref)
                if op == 0:
                    lru.begin_request()
                    for b in ref.values():
                        b[3] = False
                elif op <= 3:
                    parent = rng.choice(known) if known and rng.randrange(4) else None
                    nbytes = rng.randint(1, 5)
                    lru.stored(next_id, parent, nbytes)
                    clock += 1
                    ref[next_id] = [parent, nbytes, 0, True, clock]
                    if parent in ref:
                        ref[parent][2] += 1
                    if len(ref) > 60:
                        victim = oldest(())
                        if victim is not None:
                            erase(victim)
                    next_id += 1
                elif op == 4 and known:
                    i = rng.choice(known)
                    lru.hit(i)
                    clock += 1
                    ref[i][3], ref[i][4] = True, clock
                elif op == 5 and known:
                    i = rng.choice(known)
                    if ref[i][2] == 0:
                        lru.removed(i)
                        erase(i)
                elif op >= 6:
                    candidates = ([rng.choice(known) for _ in range(5)]
                                  if known and rng.randrange(3) == 0 else [])
                    nbytes = rng.randint(1, 12)
                    expected, freed = [], 0
                    while freed < nbytes:
                        victim = oldest(candidates)
                        if victim is None:
                            break
                        expected.append(victim)
                        freed += ref[victim][1]
                        erase(victim)
                    self.assertEqual([v.block_id for v in lru.evict(nbytes, candidates)],
                                     expected)
                    evictions += len(expected)
                self.assertEqual(len(lru), len(ref))
            self.assertGreater(evictions, 100)


class ResyncTest(unittest.TestCase):
    def test_dropped_events_make_the_next_flush_resend_the_pool(self):
        server = ServeProcess()
        try:
            client = RetentionClient(f"127.0.0.1:{server.port}", "python-0",
                                     call_deadline_s=DEADLINE_S, flush_deadline_s=DEADLINE_S,
                                     max_buffered_events=4,
                                     now_us=lambda: 1000)
            client.report_pool_configured(100 * 1000)
            # Chain 1 -> 2 -> 3 and a root 4: 6 events offered, room for 4.
            client.report_arrival([1, 2, 3], 0, 0, [10] * 3, [1000] * 3)
            client.report_stored(Block(1, None, 10, 1000))
            client.report_stored(Block(2, 1, 10, 1000))
            client.report_stored(Block(3, 2, 10, 1000))
            client.report_stored(Block(4, None, 10, 1000))
            self.assertEqual(client.stats().events_dropped_total, 2)
            self.assertTrue(client.flush())
            s = client.stats()
            self.assertEqual(s.events_dropped_total, 6)  # + the 4 buffered, superseded
            self.assertEqual(s.resyncs_total, 1)
            self.assertEqual(s.events_sent_total, 6)  # cleared, configured, 4 stored
            self.assertEqual(s.events_rejected_total, 0)
            self.assertEqual(resident_blocks_in_sidecar(server.port), 4)
            client.close()
        finally:
            server.kill()


class ResendTest(unittest.TestCase):
    def test_a_flush_whose_answer_was_lost_is_resent_and_applied_once(self):
        server = ServeProcess()
        relay = AckLosingRelay(server.port)
        try:
            client = RetentionClient(f"127.0.0.1:{relay.port}", "python-0",
                                     call_deadline_s=DEADLINE_S, flush_deadline_s=DEADLINE_S,
                                     now_us=lambda: 1000)
            log_start = sidecar_status(server.port).log_next_sequence
            client.report_pool_configured(100 * 1000)
            client.report_arrival([1, 2], 0, 0, [10] * 2, [1000] * 2)
            client.report_stored(Block(1, None, 10, 1000))
            client.report_stored(Block(2, 1, 10, 1000))
            self.assertTrue(client.flush())
            # Request 2 hits 2 and 1: the sidecar applies its flush, the
            # answer is lost.
            client.report_arrival([1, 2], 0, 0, [10] * 2, [1000] * 2)
            client.report_hits([2, 1])
            relay.lose_acks = True
            self.assertFalse(client.flush())
            relay.lose_acks = False
            self.assertTrue(wait_until(lambda: len(relay.streams()) == 2))  # it reached the sidecar
            # Until the held batch is acknowledged decisions are local without
            # an RPC, and the events buffer behind it.
            client.report_arrival([1, 3], 0, 0, [10] * 2, [1000] * 2)
            client.report_hits([1])
            self.assertTrue(client.admit([Block(3, 1, 10, 1000)]).from_fallback)
            client.report_stored(Block(3, 1, 10, 1000))
            self.assertTrue(client.flush())
            # Acknowledged: back to asking the sidecar.
            client.report_arrival([4], 0, 0, [10], [1000])
            self.assertFalse(client.admit([Block(4, None, 10, 1000)]).from_fallback)

            # Streams: the first flush, the lost one, its resend (same id,
            # same events) followed by the later events, admit 4's flush.
            streams = relay.streams()
            self.assertEqual([len(batches) for batches in streams], [1, 1, 2, 1])
            first = streams[0][0].batch_id
            self.assertNotEqual(first, 0)
            self.assertEqual(streams[2][0], streams[1][0])
            self.assertEqual([streams[1][0].batch_id, streams[2][1].batch_id,
                              streams[3][0].batch_id], [first + 1, first + 2, first + 3])
            self.assertEqual(streams[0][0].source, "python-0#TIER_POOL")
            self.assertEqual(relay.duplicates, 1)

            s = client.stats()
            self.assertEqual(s.batches_resent_total, 1)
            self.assertEqual(s.resyncs_total, 0)
            self.assertEqual(s.events_dropped_total, 0)
            self.assertEqual(s.sidecar_errors_total, {"DEADLINE_EXCEEDED": 1})
            self.assertEqual(s.rpc_attempts_total["Admit"], 1)  # block 4
            # pool_configured + 4 arrivals + 3 stored + 3 hits, each once.
            self.assertEqual(s.events_sent_total, 11)
            # The sidecar logged each of them once, and each batch's id (4
            # batches); no all_blocks_cleared reset the pool.
            status = sidecar_status(server.port)
            self.assertEqual(status.log_next_sequence - log_start, 11 + 4)
            self.assertEqual([(p.requests, p.evictions, p.resident_blocks)
                              for p in status.pools], [(4, 0, 3)])
            client.close()
        finally:
            relay.stop()
            server.kill()


class ReplayThroughAKilledSidecarTest(unittest.TestCase):
    def test_calls_fall_back_within_the_deadline_after_sigkill(self):
        requests = read_trace(os.environ["KVLEARN_TRACE"], 160)
        server = ServeProcess()
        try:
            client = RetentionClient(f"127.0.0.1:{server.port}", "python-0",
                                     call_deadline_s=DEADLINE_S, flush_deadline_s=DEADLINE_S,
                                     breaker_failures=3,
                                     breaker_backoff_s=0.2)
            # 200 full blocks: the first requests fill it, the rest evict.
            node = EngineNode(client, 200 * BLOCK_TOKENS * BYTES_PER_TOKEN, BLOCK_TOKENS,
                              BYTES_PER_TOKEN)
            for request in requests[:80]:
                node.serve(request)
            before = client.stats()
            self.assertEqual(before.fallbacks_total, {})
            self.assertEqual(before.sidecar_errors_total, {})
            self.assertEqual(before.events_rejected_total, 0)
            self.assertGreater(before.rpc_attempts_total["RankEviction"], 0)
            self.assertEqual(node.unusable_victims, 0)
            # The sidecar followed the node: same resident blocks.
            self.assertEqual(resident_blocks_in_sidecar(server.port), len(node.parent))
            stored_before, evicted_before = node.stored_blocks, node.evicted_blocks

            # Killed in the middle of a request: just before its third Admit.
            admits = 0

            def kill_before_the_third_admit(name):
                nonlocal admits
                if name == "admit":
                    admits += 1
                    if admits == 3:
                        server.kill()

            node.before_call = kill_before_the_third_admit
            node.max_call_seconds = 0.0
            for request in requests[80:]:
                node.serve(request)  # an exception here fails the test
            self.assertGreaterEqual(admits, 3)
            self.assertIsNotNone(server.proc.poll())
            after = client.stats()
            self.assertLess(node.max_call_seconds, NEVER_PAST_S)
            self.assertGreater(after.fallbacks_total.get("Admit", 0), 0)
            self.assertGreater(after.fallbacks_total.get("RankEviction", 0), 0)
            self.assertGreater(after.events_dropped_total, 0)
            self.assertGreaterEqual(sum(after.sidecar_errors_total.values()), 3)
            self.assertGreater(after.breaker_opens_total, 0)
            self.assertGreater(after.breaker_skips_total, 0)
            # The node kept serving from the local LRU: it stored and evicted
            # more, and every local victim was one it could evict.
            self.assertGreater(node.stored_blocks, stored_before)
            self.assertGreater(node.evicted_blocks, evicted_before)
            self.assertEqual(node.unusable_victims, 0)
            client.close()
            print(f"after SIGKILL: {node.calls} calls in all, slowest after the kill "
                  f"{node.max_call_seconds * 1000:.1f} ms; fallbacks {after.fallbacks_total}, "
                  f"errors {after.sidecar_errors_total}, breaker skips "
                  f"{after.breaker_skips_total}", file=sys.stderr)
        finally:
            server.kill()

    def test_the_local_lru_decides_as_the_sidecars_lru(self):
        # The same 300 requests through a live sidecar (lru, a deadline no call
        # reaches: every answer is the sidecar's) and through a dead one (every
        # answer local): same hits, stores and evictions.
        requests = read_trace(os.environ["KVLEARN_TRACE"], 300)
        outcomes = []
        server = ServeProcess()
        try:
            for live in (True, False):
                if not live:
                    server.kill()
                client = RetentionClient(f"127.0.0.1:{server.port}", f"lru-{live}",
                                         call_deadline_s=30, flush_deadline_s=30)
                node = EngineNode(client, 200 * BLOCK_TOKENS * BYTES_PER_TOKEN, BLOCK_TOKENS,
                                  BYTES_PER_TOKEN)
                for request in requests:
                    node.serve(request)
                s = client.stats()
                client.close()
                if live:
                    self.assertEqual(s.fallbacks_total, {})
                else:
                    self.assertEqual(s.fallbacks_total.get("Admit"), s.calls_total["Admit"])
                self.assertEqual(node.unusable_victims, 0)
                outcomes.append((node.hit_blocks, node.stored_blocks, node.evicted_blocks))
        finally:
            server.kill()
        self.assertGreater(outcomes[0][2], 0)  # the pool was full: evictions happened
        self.assertEqual(outcomes[0], outcomes[1])

    def test_breaker_stops_trying_after_n_failures(self):
        server = ServeProcess()
        port = server.port
        server.kill()  # nothing listens on the port any more
        client = RetentionClient(f"127.0.0.1:{port}", "python-0", call_deadline_s=DEADLINE_S,
                                 breaker_failures=3, breaker_backoff_s=3600)
        for _ in range(10):
            start = time.monotonic()
            result = client.admit([Block(1, None, 10, 1000)])
            self.assertLess(time.monotonic() - start, NEVER_PAST_S)
            self.assertTrue(result.from_fallback)
            self.assertEqual(result.keep, [True])
        s = client.stats()
        self.assertEqual(s.rpc_attempts_total, {"Admit": 3})
        self.assertEqual(s.breaker_skips_total, 7)
        self.assertEqual(s.fallbacks_total, {"Admit": 10})
        self.assertEqual(s.breaker_opens_total, 1)
        self.assertTrue(s.breaker_open)
        client.close()


class TokenTest(unittest.TestCase):
    """Against `kvlearn serve --auth-tokens`: the token (argument or
    $KVLEARN_TOKEN) is sent as 'authorization: Bearer TOKEN'; without it the
    sidecar answers UNAUTHENTICATED, and the call falls back locally without
    counting toward the breaker (the sidecar answered)."""

    TOKEN = "python-reporter-token-01"

    def test_the_token_is_sent_and_a_refusal_falls_back(self):
        tokens_dir = tempfile.mkdtemp(prefix="kvlearn_pytokens_")
        tokens = os.path.join(tokens_dir, "tokens.txt")
        with open(tokens, "w") as f:
            f.write(f"{self.TOKEN} reporter python-0\n")
        server = ServeProcess(["--auth-tokens", tokens])
        target = f"127.0.0.1:{server.port}"
        block = Block(1, None, 10, 1000)
        try:
            with RetentionClient(target, "python-0", call_deadline_s=DEADLINE_S,
                                 token=self.TOKEN) as client:
                self.assertFalse(client.admit([block]).from_fallback)
            os.environ["KVLEARN_TOKEN"] = self.TOKEN
            try:
                with RetentionClient(target, "python-0", call_deadline_s=DEADLINE_S) as client:
                    self.assertFalse(client.admit([block]).from_fallback)
            finally:
                del os.environ["KVLEARN_TOKEN"]
            with RetentionClient(target, "python-0", call_deadline_s=DEADLINE_S,
                                 breaker_failures=1) as client:
                for _ in range(3):
                    self.assertTrue(client.admit([block]).from_fallback)
                s = client.stats()
                self.assertEqual(s.sidecar_errors_total, {"UNAUTHENTICATED": 3})
                self.assertEqual(s.rpc_attempts_total, {"Admit": 3})
                self.assertFalse(s.breaker_open)
        finally:
            server.kill()
            shutil.rmtree(tokens_dir, ignore_errors=True)


if __name__ == "__main__":
    program = unittest.main(exit=False, verbosity=2)
    result = program.result
    ok = result.wasSuccessful()
    print(f"python_client_test: {result.testsRun} tests, {len(result.failures)} failures, "
          f"{len(result.errors)} errors: {'OK' if ok else 'FAILED'}")
    sys.exit(0 if ok else 1)
