"""Refusals that say what to do, made before any long work.

Each case used to do something unhelpful:
`--router` without `--cluster` was ignored; `train --out` into a missing directory
trained every epoch and then failed to write; a CSV file given as a trace got "field
'json': expected an object, got a boolean"; `plot_ttft.py --routers` with a misspelt
router wrote an empty figure and exited 0; `loadgen` against a dead port waited 10 s
for "GetStatus: Deadline Exceeded"; `export-log` of a log without request arrivals wrote
an empty trace with exit status 0, and of several nodes' arrivals gave no hint of
`--node`; compare on a trace mixing nodes' numberings gave no hint, and
`--lenient` still exited 1. Each is now refused with a one-line error
naming the flag or file and the fix (and `--lenient` skips the requests that
contradict earlier lines and replays the rest, exit status 0); a control run with the right input succeeds, so
the refusal is about the input and not the command.

usage: errors_test.py PATH_TO_KVLEARN SAMPLE_TRACE PLOT_TTFT_SCRIPT ENGINE_PUBLISHER
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest

from serve_support import head_trace, start_serve

KVLEARN, SAMPLE, PLOT_TTFT, PUBLISHER = sys.argv[1:5]


def run(args):
    return subprocess.run(args, capture_output=True, text=True)


class ErrorsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="kvlearn_errors_")
        cls.trace = head_trace(SAMPLE, os.path.join(cls.work, "head.jsonl"), 200)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work, ignore_errors=True)

    def assert_refused(self, result, *words):
        self.assertNotEqual(result.returncode, 0, result.stdout + result.stderr)
        for word in words:
            self.assertIn(word, result.stderr)

    def test_router_without_cluster(self):
        base = [KVLEARN, "compare", "--trace", self.trace, "--policies", "lru"]
        self.assert_refused(run(base + ["--router", "least-load"]), "--router", "--cluster")
        self.assert_refused(run(base + ["--hbm-gb", "40"]), "--hbm-gb", "--cluster")
        ok = run(base + ["--cluster", "--prefill-nodes", "2", "--router", "least-load"])
        self.assertEqual(ok.returncode, 0, ok.stderr)

    def test_train_out_unwritable_is_refused_before_training(self):
        # --force: the control model is written whatever its verdict on 200 requests.
        base = [KVLEARN, "train", "--trace", self.trace, "--epochs", "1", "--force"]
        missing = os.path.join(self.work, "no-such-dir", "m.pt")
        result = run(base + ["--out", missing])
        self.assert_refused(result, "--out", "no-such-dir", "create it first")
        self.assertNotIn("epoch", result.stderr + result.stdout)  # nothing trained
        self.assert_refused(run(base + ["--out", self.work]), "--out", "is a directory")
        samples = run(base + ["--out", os.path.join(self.work, "m.pt"),
                              "--samples-out", missing])
        self.assert_refused(samples, "--samples-out", "create it first")
        self.assertFalse(os.path.exists(os.path.join(self.work, "m.pt")))
        ok = run(base + ["--out", os.path.join(self.work, "m.pt")])
        self.assertEqual(ok.returncode, 0, ok.stderr)

    def test_csv_trace_is_named_as_csv(self):
        csv = os.path.join(self.work, "trace.csv")
        with open(csv, "w") as f:
            f.write("timestamp,input_length,output_length,hash_ids\n0,1024,10,1;2\n")
        result = run([KVLEARN, "compare", "--trace", csv, "--policies", "lru"])
        self.assert_refused(result, "trace.csv:1:", "looks like CSV", "Mooncake JSONL")
        # A JSON line that is not an object keeps the JSON message.
        not_object = os.path.join(self.work, "true.jsonl")
        with open(not_object, "w") as f:
            f.write("true\n")
        result = run([KVLEARN, "compare", "--trace", not_object, "--policies", "lru"])
        self.assert_refused(result, "expected an object, got a boolean")
        self.assertNotIn("CSV", result.stderr)

    def test_mixed_numberings_suggest_node_and_lenient_skips_them(self):
        # Line 2 numbers its chain its own way: id 2 begins it, but follows 1 on line 1.
        mixed = os.path.join(self.work, "mixed.jsonl")
        with open(mixed, "w") as f:
            for t, ids in enumerate([[1, 2], [2, 3], [1, 2, 4]]):
                f.write(json.dumps({"timestamp": t, "input_length": 512 * len(ids),
                                    "output_length": 1, "hash_ids": ids}) + "\n")
        for extra in [[], ["--cluster", "--prefill-nodes", "1"]]:
            base = [KVLEARN, "compare", "--trace", mixed, "--policies", "lru"] + extra
            strict = run(base)
            self.assert_refused(strict, "mixed.jsonl:2:", "follows nothing here but 1 on line 1",
                                "kvlearn export-log --node ID", "--lenient")
            lenient = run(base + ["--lenient"])
            self.assertEqual(lenient.returncode, 0, lenient.stderr)
            self.assertIn("skipped 1 requests whose block ids contradict earlier lines' "
                          "(the first on line 2)", lenient.stderr)
            self.assertIn("lru", lenient.stdout)
        # --lenient with nothing left to replay still fails, saying so.
        bad = os.path.join(self.work, "all-bad.jsonl")
        with open(bad, "w") as f:
            f.write("true\n")
        nothing = run([KVLEARN, "compare", "--trace", bad, "--policies", "lru", "--lenient"])
        self.assert_refused(nothing, "skipped 1 bad lines", "trace has no requests left")

    def test_loadgen_dead_port_names_address_and_serve(self):
        with socket.socket() as s:  # a port nothing listens on once closed
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        result = run([KVLEARN, "loadgen", "--target", f"127.0.0.1:{port}", "--trace", self.trace])
        self.assert_refused(result, f"cannot reach 127.0.0.1:{port}",
                            "is `kvlearn serve` running there?")
        self.assertNotIn("Deadline Exceeded", result.stderr)

    def test_export_log_without_arrivals_is_refused_and_several_nodes_noted(self):
        empty = os.path.join(self.work, "empty-log")
        server, _ = start_serve(self, KVLEARN, empty)
        server.terminate()
        server.wait()
        out = os.path.join(self.work, "empty.jsonl")
        result = run([KVLEARN, "export-log", "--data-dir", empty, "--out", out])
        self.assert_refused(result, "no request arrivals among", "--engine-events")
        self.assertFalse(os.path.exists(out))

        two = os.path.join(self.work, "two-nodes")
        _, port = start_serve(self, KVLEARN, two)
        loadgen = run([KVLEARN, "loadgen", "--target", f"127.0.0.1:{port}", "--trace",
                       self.trace, "--nodes", "2"])
        self.assertEqual(loadgen.returncode, 0, loadgen.stderr)
        both = run([KVLEARN, "export-log", "--data-dir", two, "--out", out])
        self.assertEqual(both.returncode, 0, both.stderr)
        self.assertIn("requests of 2 nodes (loadgen-0, loadgen-1)", both.stderr)
        self.assertIn("pass --node ID", both.stderr)
        one = run([KVLEARN, "export-log", "--data-dir", two, "--out", out, "--node", "loadgen-1"])
        self.assertEqual(one.returncode, 0, one.stderr)
        self.assertNotIn("nodes (", one.stderr)
        self.assertIn("wrote 100 requests", one.stderr)  # every other of the 200
        nobody = run([KVLEARN, "export-log", "--data-dir", two, "--out", out, "--node", "x"])
        self.assert_refused(nobody, "no request arrivals of node x",
                            "nodes with arrivals: loadgen-0, loadgen-1")
        listed = run([KVLEARN, "export-log", "--data-dir", two, "--list-nodes"])
        self.assertEqual(listed.returncode, 0, listed.stderr)
        self.assertEqual(listed.stdout, "loadgen-0\t100\nloadgen-1\t100\n")
        neither = run([KVLEARN, "export-log", "--data-dir", two])
        self.assert_refused(neither, "--out is required (or --list-nodes)")

    def test_export_log_of_engine_events_only_says_why(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            endpoint = f"tcp://127.0.0.1:{s.getsockname()[1]}"
        data = os.path.join(self.work, "engine-only")
        server, port = start_serve(self, KVLEARN, data, ["--engine-events", f"e1={endpoint}"])
        published = run([PUBLISHER, "--trace", self.trace, "--requests", "50",
                         "--endpoint", endpoint, "--replay-endpoint", "", "--capacity-blocks",
                         "200", "--wait-subscribers", "1", "--linger-ms", "1000"])
        self.assertEqual(published.returncode, 0, published.stderr)
        # Until the sidecar has logged what it received and nothing more arrives.
        logged, last = 0, -1
        for _ in range(100):
            status = run([KVLEARN, "ctl", "--target", f"127.0.0.1:{port}", "status"])
            line = next(l for l in status.stdout.splitlines() if l.startswith("log next sequence"))
            logged = int(line.split()[3].rstrip(","))
            if logged > 0 and logged == last:
                break
            last = logged
            time.sleep(0.2)
        self.assertGreater(logged, 0, "the sidecar logged none of the engine's events")
        server.terminate()
        server.wait()
        out = os.path.join(self.work, "engine-only.jsonl")
        result = run([KVLEARN, "export-log", "--data-dir", data, "--out", out])
        self.assert_refused(result, "no request arrivals among", "--engine-events",
                            "engines do not report requests")
        among = int(result.stderr.split("no request arrivals among ")[1].split()[0])
        self.assertGreater(among, 0, result.stderr)  # the engine's events, none a request
        self.assertFalse(os.path.exists(out))

    def test_plot_ttft_unknown_router(self):
        samples = os.path.join(self.work, "s.json")
        with open(samples, "w") as f:
            json.dump({"trace": "t", "samples": [
                {"router": "least-load", "policy": "lru", "ttft_ms": [1.0, 2.0]},
                {"router": "cache-aware", "policy": "lru", "ttft_ms": [1.0]}]}, f)
        png = os.path.join(self.work, "cdf.png")
        result = run([PLOT_TTFT, samples, "--routers", "leastload", "-o", png])
        self.assert_refused(result, "leastload", "cache-aware, least-load")
        self.assertFalse(os.path.exists(png))
        ok = run([PLOT_TTFT, samples, "--routers", "least-load", "-o", png])
        self.assertEqual(ok.returncode, 0, ok.stderr)
        self.assertTrue(os.path.exists(png))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
