"""A model trained on blocks of one size is refused, before any replay or
serving, where blocks of another size would be fed to it.

Its features count blocks, so on other blocks it judges other traffic (a
16-token chat trace once ran for minutes and printed a `learned` row equal to
lru's, with no word about the 512-token model). compare (one pool and
--cluster) refuses it before reading the trace (the trace given is not even
valid at 16-token blocks, so only the model can be refused), `serve` refuses to
start with it, and a reload into a sidecar of other blocks is refused while
the sidecar keeps running. Each refusal names both sizes and the fix; the same
model at its own block size is accepted everywhere (the control). The model also
says which matrix kernels trained it: train's "matrix kernels:" line is in its
metadata (training_blas), with the OPENBLAS_CORETYPE it ran under.

usage: model_fit_test.py PATH_TO_KVLEARN SAMPLE_TRACE
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import zipfile

from serve_support import head_trace, start_serve

KVLEARN, SAMPLE = sys.argv[1], sys.argv[2]


def run(args, timeout=600):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


class ModelFitTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="kvlearn_model_fit_")
        cls.trace = head_trace(SAMPLE, os.path.join(cls.work, "head.jsonl"), 200)
        cls.model = os.path.join(cls.work, "m512.pt")
        # The kernels run.sh picks on a CPU with AVX2 and FMA; elsewhere, none chosen.
        with open("/proc/cpuinfo") as f:
            flags = set(f.read().split())
        cls.coretype = "Haswell" if {"avx2", "fma"} <= flags else None
        env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
        if cls.coretype:
            env["OPENBLAS_CORETYPE"] = cls.coretype
        # --force: the model is written whatever its verdict on 200 requests.
        cls.trained = subprocess.run([KVLEARN, "train", "--trace", cls.trace, "--out", cls.model,
                                      "--epochs", "1", "--force"],
                                     capture_output=True, text=True, env=env, timeout=600)
        if cls.trained.returncode != 0:
            raise AssertionError(cls.trained.stderr)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work, ignore_errors=True)

    def assert_names_both_sizes(self, text):
        self.assertIn("trained on 512-token blocks", text)
        self.assertIn("16-token blocks (--block-size 16)", text)
        self.assertIn("kvlearn train --block-size 16", text)
        self.assertIn("--block-size 512 if the blocks are 512 tokens", text)

    def test_the_model_records_its_kernels(self):
        with zipfile.ZipFile(self.model) as z:
            name = next(n for n in z.namelist() if n.endswith("/extra/kvlearn_metadata.json"))
            blas = json.loads(z.read(name))["training_blas"]
        self.assertIn(f"matrix kernels: {blas}\n", self.trained.stderr)
        chosen = f"OPENBLAS_CORETYPE={self.coretype}" if self.coretype else "OPENBLAS_CORETYPE unset"
        if not blas.startswith("not OpenBLAS"):
            self.assertTrue(blas.startswith("OpenBLAS "), blas)
            self.assertTrue(blas.endswith("; " + chosen), blas)

    def test_compare_refuses_before_reading_the_trace(self):
        for extra in [[], ["--cluster", "--prefill-nodes", "2"]]:
            base = [KVLEARN, "compare", "--trace", self.trace, "--policies", "lru,learned",
                    "--model", self.model] + extra
            refused = run(base + ["--block-size", "16"])
            self.assertEqual(refused.returncode, 1, refused.stderr)
            self.assert_names_both_sizes(refused.stderr)
            self.assertNotIn("head.jsonl:", refused.stderr)  # the trace was not read
            self.assertEqual(refused.stdout, "")
            ok = run(base)
            self.assertEqual(ok.returncode, 0, ok.stderr)
            self.assertIn("learned", ok.stdout)

    def test_serve_refuses_to_start_and_a_reload_is_refused(self):
        refused = run([KVLEARN, "serve", "--listen", "127.0.0.1:0", "--metrics-listen", "",
                       "--data-dir", os.path.join(self.work, "refused"), "--model", self.model,
                       "--block-size", "16"], timeout=60)
        self.assertEqual(refused.returncode, 1, refused.stderr)
        self.assertIn("--model: ", refused.stderr)
        self.assert_names_both_sizes(refused.stderr)
        self.assertIn("this sidecar counts 16-token blocks", refused.stderr)

        _, port = start_serve(self, KVLEARN, os.path.join(self.work, "b16"),
                              ["--block-size", "16"])
        ctl = [KVLEARN, "ctl", "--target", f"127.0.0.1:{port}"]
        reload = run(ctl + ["reload", self.model], timeout=60)
        self.assertEqual(reload.returncode, 1, reload.stderr)
        self.assert_names_both_sizes(reload.stderr)
        status = run(ctl + ["status"], timeout=60)  # still up, still without a model
        self.assertIn("model (none)\n", status.stdout)

        _, port = start_serve(self, KVLEARN, os.path.join(self.work, "b512"),
                              ["--model", self.model])
        status = run([KVLEARN, "ctl", "--target", f"127.0.0.1:{port}", "status"], timeout=60)
        self.assertEqual(status.returncode, 0, status.stderr)
        self.assertIn("model m512.pt@", status.stdout)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
