#!/usr/bin/python3
"""`kvlearn serve`'s /metrics is text that Prometheus' own client library parses.

Runs the real `kvlearn serve` on loopback (with an engine event stream configured, so
its families are there too), drives it with `kvlearn loadgen` (two nodes
replaying the first 300 requests of the sample trace: Admit, RankEviction and the event
stream all run), then reads /metrics and parses it with Debian's python3-prometheus-client
(prometheus_client.parser, the reference parser of the text format). Checks what a
scraper and its dashboards rely on beyond parsing: every family has HELP and TYPE, counter
samples end in _total, every histogram series has cumulative buckets ending at +Inf whose
count equals _count, the traffic shows in the counters (decisions, events ingested), and the
live traffic summary equals the one computed here from the requests sent.

Environment (set by ctest, tests/server/CMakeLists.txt): KVLEARN_BINARY, KVLEARN_TRACE.
Exits non-zero on failure.
"""

import json
import math
import os
import select
import shutil
import subprocess
import tempfile
import unittest
import urllib.request
from collections import defaultdict

from prometheus_client.parser import text_string_to_metric_families


class PrometheusMetricsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="kvlearn_prom_")
        kvlearn = os.environ["KVLEARN_BINARY"]
        cls.server = subprocess.Popen(
            [kvlearn, "serve", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
             "--data-dir", os.path.join(cls.work, "data"),
             # An engine stream nobody publishes on: its families are rendered too.
             "--engine-events", "engine0=tcp://127.0.0.1:9",
             # So the kvlearn_resize_* families are checked too.
             "--resize-estimates"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        # First stdout line: "port P metrics_port M" (docs/sidecar.md).
        ready, _, _ = select.select([cls.server.stdout], [], [], 60)
        line = cls.server.stdout.readline().decode() if ready else ""
        if not line.startswith("port "):
            cls.server.kill()
            raise RuntimeError(f"kvlearn serve did not print its ports: {line!r}")
        words = line.split()
        port, metrics_port = words[1], words[3]
        trace = os.path.join(cls.work, "head.jsonl")
        with open(os.environ["KVLEARN_TRACE"]) as full, open(trace, "w") as head:
            for _, request in zip(range(300), full):
                head.write(request)
        cls.trace = trace
        subprocess.run([kvlearn, "loadgen", "--target", f"127.0.0.1:{port}", "--trace", trace,
                        "--nodes", "2", "--pool-fraction", "0.05"],
                       check=True, capture_output=True)
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30) as r:
            cls.content_type = r.headers.get("Content-Type", "")
            cls.text = r.read().decode()
        cls.families = {f.name: f for f in text_string_to_metric_families(cls.text)}

    @classmethod
    def tearDownClass(cls):
        cls.server.kill()
        cls.server.wait()
        shutil.rmtree(cls.work, ignore_errors=True)

    def test_text_format_version(self):
        self.assertTrue(self.content_type.startswith("text/plain"), self.content_type)

    def test_every_family_has_help_and_type(self):
        helped = {line.split()[2] for line in self.text.splitlines() if line.startswith("# HELP ")}
        typed = {line.split()[2]: line.split()[3] for line in self.text.splitlines()
                 if line.startswith("# TYPE ")}
        self.assertEqual(helped, set(typed))
        for name, kind in typed.items():
            self.assertIn(kind, ("counter", "gauge", "histogram"), name)
        self.assertGreater(len(self.families), 10)
        self.assertIn("kvlearn_engine_batches", self.families)

    def test_counters_end_in_total(self):
        for family in self.families.values():
            if family.type == "counter":
                for sample in family.samples:
                    self.assertTrue(sample.name.endswith(("_total", "_created")), sample.name)

    def test_histograms_are_cumulative_and_end_at_inf(self):
        histograms = [f for f in self.families.values() if f.type == "histogram"]
        self.assertTrue(histograms)
        for family in histograms:
            series = defaultdict(lambda: {"buckets": [], "count": None})
            for s in family.samples:
                key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
                if s.name.endswith("_bucket"):
                    series[key]["buckets"].append((float(s.labels["le"]), s.value))
                elif s.name.endswith("_count"):
                    series[key]["count"] = s.value
            for key, data in series.items():
                bounds = [b for b, _ in data["buckets"]]
                counts = [c for _, c in data["buckets"]]
                self.assertEqual(bounds, sorted(bounds), key)
                self.assertEqual(bounds[-1], math.inf, key)
                self.assertEqual(counts, sorted(counts), f"{family.name} {key} not cumulative")
                self.assertEqual(counts[-1], data["count"], key)

    def test_traffic_shows(self):
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for f in self.families.values() for s in f.samples}

        def total(name, **labels):
            return sum(v for (n, l), v in samples.items()
                       if n == name and all(dict(l).get(k) == w for k, w in labels.items()))

        self.assertGreater(total("kvlearn_events_ingested_total"), 300)
        self.assertGreater(total("kvlearn_decisions_total", rpc="RankEviction"), 0)
        self.assertGreater(total("kvlearn_decision_latency_seconds_count", rpc="RankEviction"), 0)
        self.assertEqual(total("kvlearn_pools"), 2)

    def test_live_traffic_summary_matches_the_requests_sent(self):
        """The sidecar's running summary equals the one computed here from the 300 requests
        loadgen sent (loadgen stamps each arrival with the trace's time). The reuse ratio is
        (accesses - distinct blocks) / accesses whatever order the two nodes' requests arrive
        in, and exact: 300 requests hold far fewer than the 65,536 blocks tracked before the
        summary samples."""
        live = {s.labels["quantity"]: s.value
                for s in self.families["kvlearn_live_traffic"].samples}
        with open(self.trace) as f:
            requests = [json.loads(line) for line in f]
        accesses = sum(len(r["hash_ids"]) for r in requests)
        distinct = len({b for r in requests for b in r["hash_ids"]})
        span_s = (requests[-1]["timestamp"] - requests[0]["timestamp"]) / 1000
        self.assertEqual(live["requests"], 300)
        self.assertAlmostEqual(live["request_rate"], 299 / span_s, delta=1e-6 * 299 / span_s)
        self.assertAlmostEqual(live["prompt_blocks"], accesses / 300, delta=1e-6)
        self.assertAlmostEqual(live["block_reuse"], (accesses - distinct) / accesses, delta=1e-6)
        self.assertEqual(live["block_size"], 512)
        # No model serves: no verdict and no drift.
        self.assertNotIn("kvlearn_model_fit", self.families)
        self.assertNotIn("kvlearn_traffic_drift_ratio", self.families)


if __name__ == "__main__":
    unittest.main()
