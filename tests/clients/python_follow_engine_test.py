#!/usr/bin/python3
"""The Python example beside the engine publisher equals `kvlearn compare`.

`kvlearn-engine-publisher --step-stdin` plays the engine (an LRU prefix cache)
and publishes its stores and removals; `kvlearn serve --engine-events` (lru)
follows them; clients/python/examples/replay_trace.py --follow-engine reports
what engine events lack (arrivals with request ids, hits, ends) and asks the
sidecar RankEviction before each request the engine will evict for. Checked:

* every proposal of the sidecar equals the victims the engine then removes;
* the sidecar ends holding what the engine holds, having seen its removals;
* hits and stored blocks equal `kvlearn compare --policies lru` on the same
  trace with the engine's capacity in bytes, hence evictions too: every
  stored block is still resident or was evicted once, and both caches end
  full (same-size blocks: an eviction is made only for an insert, so a full
  LRU cache stays full).

The trace is the first 200 requests of the sample trace with every block made
full (input_length = 512 x blocks): engines cache full blocks only, and
compare would give a partial last block fewer bytes than the engine does.

Environment (tests/clients/CMakeLists.txt): KVLEARN_BINARY, KVLEARN_PUBLISHER,
KVLEARN_TRACE, PYTHONPATH (stubs, clients/python, the examples).
"""

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import unittest

REQUESTS = 200
CAPACITY_BLOCKS = 150
BLOCK_TOKENS = 512
BYTES_PER_TOKEN = 131072  # the sidecar's and compare's default profile (Llama-3-8B)
BLOCK_BYTES = BLOCK_TOKENS * BYTES_PER_TOKEN
EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python", "examples",
                       "replay_trace.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FollowEngineTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kvlearn_follow_")
        self.trace = os.path.join(self.dir, "trace.jsonl")
        with open(os.environ["KVLEARN_TRACE"]) as src, open(self.trace, "w") as out:
            for line, _ in zip(src, range(REQUESTS)):
                r = json.loads(line)
                r["input_length"] = BLOCK_TOKENS * len(r["hash_ids"])
                out.write(json.dumps(r) + "\n")
        self.processes = []
        self.logs = {}

    def tearDown(self):
        for p in self.processes:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            p.wait()
        self.saved_logs = {}
        for name, f in self.logs.items():
            f.seek(0)
            self.saved_logs[name] = f.read()[-4000:]
            f.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def log(self, name: str):
        """A file for a child's stderr, printed if the test fails (a failure
        seen once under a loaded ctest said nothing of which child stalled)."""
        self.logs[name] = open(os.path.join(self.dir, name + ".log"), "w+")
        return self.logs[name]

    def run(self, result=None):
        result = super().run(result)
        if result is not None and not result.wasSuccessful():
            for name, f in getattr(self, "saved_logs", {}).items():
                sys.stderr.write(f"--- {name} stderr ---\n{f}\n")
        return result

    def start_sidecar(self, engine_port: int) -> int:
        serve = subprocess.Popen(
            [os.environ["KVLEARN_BINARY"], "serve", "--listen", "127.0.0.1:0",
             "--metrics-listen", "", "--data-dir", os.path.join(self.dir, "data"),
             "--policy", "lru", "--engine-events", f"engine-0=tcp://127.0.0.1:{engine_port}"],
            stdout=subprocess.PIPE, stderr=self.log("serve"))
        self.processes.append(serve)
        ready, _, _ = select.select([serve.stdout], [], [], 60)
        line = serve.stdout.readline().decode() if ready else ""
        self.assertTrue(line.startswith("port "), f"kvlearn serve printed {line!r}")
        return int(line.split()[1])

    def test_sidecar_decides_as_compare(self):
        engine_port = free_port()
        port = self.start_sidecar(engine_port)
        publisher = subprocess.Popen(
            [os.environ["KVLEARN_PUBLISHER"], "--trace", self.trace,
             "--endpoint", f"tcp://127.0.0.1:{engine_port}", "--replay-endpoint", "",
             "--capacity-blocks", str(CAPACITY_BLOCKS), "--encoding", "map",
             "--hash-type", "int", "--wait-subscribers", "1", "--linger-ms", "0",
             "--step-stdin", "--print-resident"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log("publisher"))
        self.processes.append(publisher)
        summary_path = os.path.join(self.dir, "summary.json")
        example = subprocess.run(
            [sys.executable, EXAMPLE, "--follow-engine", "--target", f"127.0.0.1:{port}",
             "--trace", self.trace, "--node-id", "engine-0",
             "--engine-capacity-blocks", str(CAPACITY_BLOCKS), "--deadline-ms", "10000",
             "--flush-deadline-ms", "10000", "--summary-json", summary_path],
            stdout=publisher.stdin, stderr=subprocess.PIPE, timeout=600)
        resident_out, _ = publisher.communicate(timeout=120)
        self.assertEqual(example.returncode, 0, example.stderr.decode())
        self.assertEqual(publisher.returncode, 0)
        with open(summary_path) as f:
            summary = json.load(f)

        # The engine's own resident set (--print-resident: one id per line
        # after the summary line) is what the example's mirror of it holds.
        engine_resident = [int(x) for x in resident_out.decode().split("\n")[1:] if x]
        self.assertEqual(len(engine_resident), summary["resident_blocks"])
        self.assertEqual(summary["requests"], REQUESTS)
        self.assertGreater(summary["proposals_agreed"], 10)
        self.assertEqual(summary["proposals_differed"], 0)

        compare = subprocess.run(
            [os.environ["KVLEARN_BINARY"], "compare", "--trace", self.trace,
             "--policies", "lru", "--pool-bytes", str(CAPACITY_BLOCKS * BLOCK_BYTES),
             "--format", "json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300, check=True)
        row = next(p for p in json.loads(compare.stdout)["results"] if p["policy"] == "lru")
        self.assertEqual(row["loaded_bytes"], summary["hit_blocks"] * BLOCK_BYTES)
        stored = summary["evicted_blocks"] + summary["resident_blocks"]
        self.assertEqual(row["admitted_bytes"], stored * BLOCK_BYTES)
        self.assertEqual(summary["resident_blocks"], CAPACITY_BLOCKS)
        self.assertGreater(summary["evicted_blocks"], 100)


if __name__ == "__main__":
    unittest.main()
