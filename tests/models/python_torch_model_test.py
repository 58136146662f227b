#!/usr/bin/python3
"""Python torch and kvlearn read each other's model files, and answer alike.

A model is trained on a small generated trace with the real `kvlearn train`; Debian's
python3-torch loads it with torch.jit.load (compiling the TorchScript forward stored in
the file, which kvlearn itself never does), reads the metadata from the archive's extra
file, and runs forward on raw feature rows; the test helper `model_predict` runs the same
rows through kvlearn's own inference (LearnedModel::Load, the Eigen MLP). Both must agree
within 1e-5 on every output, and the metadata must describe the network: one feature name
and one normalisation pair per input, one increasing horizon per output.

The other way (docs/training.md, "A model written in Python"): a network defined
in Python (scripts/fit_model.py's class, imported from its module; also one the script
fitted on the samples `kvlearn train --samples-out` wrote), and kvlearn's model
fine-tuned in Python, saved with torch.jit.save, are read by kvlearn, which answers as
Python's forward does and runs them in `kvlearn compare`; a file whose forward computes something else (tanh between layers) or whose normalisation
buffers differ from its metadata is refused, saying what differs.

Environment (set by ctest, tests/models/CMakeLists.txt): KVLEARN_BINARY (the kvlearn
executable), KVLEARN_MODEL_PREDICT (the helper). Exits non-zero on failure.
"""

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import torch

METADATA = "kvlearn_metadata.json"
SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts")
FIT_MODEL = os.path.join(SCRIPTS, "fit_model.py")
sys.path.insert(0, SCRIPTS)
# The network as docs/training.md describes it (F.linear layers); defined in a
# module of its own, so TorchScript names it __torch__.fit_model.KvlearnReuseMlp.
from fit_model import KvlearnReuseMlp  # noqa: E402


def kvlearn_predict(path, rows):
    """kvlearn's own inference of `path` on `rows` (a 2-D tensor), as a tensor."""
    text = "\n".join(" ".join(f"{v:.9g}" for v in row.tolist()) for row in rows) + "\n"
    result = subprocess.run([os.environ["KVLEARN_MODEL_PREDICT"], path],
                            input=text, capture_output=True, text=True)
    if result.returncode != 0:
        raise ValueError(result.stderr.strip())
    return torch.tensor([[float(v) for v in line.split()]
                         for line in result.stdout.splitlines()])


class PythonTorchModelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="kvlearn_pytorch_")
        kvlearn = os.environ["KVLEARN_BINARY"]
        trace = os.path.join(cls.work, "chat.jsonl")
        cls.model_path = os.path.join(cls.work, "chat.pt")
        subprocess.run([kvlearn, "gen", "--kind", "chat", "--requests", "3000", "--seed", "7",
                        "--out", trace], check=True, capture_output=True)
        cls.samples_path = os.path.join(cls.work, "samples.csv")
        # --force: these checks are about the file, whatever train's verdict on it.
        trained = subprocess.run([kvlearn, "train", "--trace", trace, "--out", cls.model_path,
                                  "--epochs", "3", "--samples-out", cls.samples_path, "--force"],
                                 check=True, capture_output=True, text=True)
        cls.train_log = trained.stderr
        extra = {METADATA: ""}
        cls.trace = trace
        cls.module = torch.jit.load(cls.model_path, _extra_files=extra)
        cls.metadata = json.loads(extra[METADATA])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work, ignore_errors=True)

    def test_metadata_describes_the_network(self):
        m = self.metadata
        inputs = len(m["feature_names"])
        self.assertGreater(inputs, 0)
        self.assertEqual(len(m["feature_mean"]), inputs)
        self.assertEqual(len(m["feature_std"]), inputs)
        horizons = m["horizons_seconds"]
        self.assertGreater(len(horizons), 0)
        self.assertEqual(horizons, sorted(set(horizons)))
        weights = dict(self.module.named_parameters())
        self.assertEqual(weights["w0"].shape[1], inputs)
        last = max(int(name[1:]) for name in weights if name.startswith("w"))
        self.assertEqual(weights[f"w{last}"].shape[0], len(horizons))

    def rows(self, seed=11):
        """Rows around the training data's own scale, some far outside it."""
        mean = torch.tensor(self.metadata["feature_mean"])
        std = torch.tensor(self.metadata["feature_std"])
        generator = torch.Generator().manual_seed(seed)
        rows = mean + std * 3 * torch.randn(64, len(mean), generator=generator)
        rows[:4] = mean + std * 50
        return rows

    def assert_kvlearn_agrees(self, module, path):
        rows = self.rows()
        with torch.no_grad():
            torch_out = module(rows)
        self.assertEqual(tuple(torch_out.shape), (64, len(self.metadata["horizons_seconds"])))
        self.assertTrue(bool(((torch_out >= 0) & (torch_out <= 1)).all()))
        kvlearn_out = kvlearn_predict(path, rows)
        self.assertEqual(kvlearn_out.shape, torch_out.shape)
        worst = float((kvlearn_out - torch_out).abs().max())
        self.assertLessEqual(worst, 1e-5, f"largest difference {worst}")
        # Not a vacuous agreement: the outputs vary from row to row.
        self.assertGreater(float(torch_out.std()), 1e-3)
        return kvlearn_out

    def network(self, cls=KvlearnReuseMlp, hidden=(12, 6)):
        """A network of the given hidden widths normalising as the trained model does,
        traced as scripts/fit_model.py saves it."""
        m = self.metadata
        widths = [len(m["feature_names"]), *hidden, len(m["horizons_seconds"])]
        net = cls(torch.tensor(m["feature_mean"]), torch.tensor(m["feature_std"]), widths, seed=5)
        return torch.jit.trace(net, self.rows()[:1])

    def save(self, module, name, metadata=None):
        path = os.path.join(self.work, name)
        torch.jit.save(module, path,
                       _extra_files={METADATA: json.dumps(metadata or self.metadata)})
        return path

    def test_forward_agrees_with_kvlearns_inference(self):
        self.assert_kvlearn_agrees(self.module, self.model_path)

    def test_a_network_defined_in_python_is_read_and_run_by_compare(self):
        module = self.network()
        path = self.save(module, "python.pt")
        self.assert_kvlearn_agrees(module, path)
        # Any depth: kvlearn reads w0, b0, ... until one is missing.
        for hidden in [(9,), (12, 8, 6, 4)]:
            deeper = self.network(hidden=hidden)
            self.assert_kvlearn_agrees(deeper, self.save(deeper, f"depth{len(hidden)}.pt"))
        result = subprocess.run(
            [os.environ["KVLEARN_BINARY"], "compare", "--trace", self.trace, "--model", path,
             "--policies", "lru,learned", "--format", "json"],
            capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("learned", [row["policy"] for row in json.loads(result.stdout)["results"]])

    def test_kvlearns_model_fine_tuned_in_python_is_read(self):
        module = torch.jit.load(self.model_path)
        before = kvlearn_predict(self.model_path, self.rows())
        rows = self.rows(seed=12)
        target = torch.full((64, len(self.metadata["horizons_seconds"])), 0.5)
        weights = [p for name, p in module.named_parameters() if name[0] in "wb"]
        for p in weights:
            p.requires_grad_(True)
        optimiser = torch.optim.SGD(weights, lr=0.5)
        for _ in range(20):
            optimiser.zero_grad()
            torch.nn.functional.mse_loss(module(rows), target).backward()
            optimiser.step()
        path = self.save(module, "fine_tuned.pt")
        after = self.assert_kvlearn_agrees(module, path)
        self.assertGreater(float((after - before).abs().max()), 1e-3, "the weights moved")

    def test_a_network_fitted_in_python_on_kvlearns_samples_is_read(self):
        """`kvlearn train --samples-out`, then scripts/fit_model.py: kvlearn runs the result."""
        with open(self.samples_path, newline="") as f:
            rows = list(csv.DictReader(f))
        labels = [c for c in rows[0] if c.startswith("reused_within_")]
        self.assertEqual(len(labels), len(self.metadata["horizons_seconds"]))
        # As many training rows as kvlearn train said it trained on.
        trained = int(re.search(r"(\d+) training samples", self.train_log).group(1))
        self.assertEqual(sum(r["split"] == "train" for r in rows), trained)

        path = os.path.join(self.work, "fitted.pt")
        fit = [sys.executable, FIT_MODEL, "--samples", self.samples_path,
               "--metadata-from", self.model_path, "--out", path, "--hidden", "16,8",
               "--epochs", "150"]
        result = subprocess.run(fit, capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assert_kvlearn_agrees(torch.jit.load(path), path)

        # The labels go with the features: on the validation rows the first
        # horizon's output ranks reused blocks above the others (0.5 would be
        # chance, as with rows out of line; kvlearn train's model reaches ~0.9).
        valid = [r for r in rows if r["split"] == "valid" and r[labels[0]] != ""]
        vx = torch.tensor([[float(r[n]) for n in self.metadata["feature_names"]] for r in valid])
        truth = torch.tensor([float(r[labels[0]]) for r in valid])
        scores = kvlearn_predict(path, vx)[:, 0]
        pos, neg = scores[truth == 1], scores[truth == 0]
        self.assertGreater(float((pos[:, None] > neg[None, :]).float().mean()), 0.7)

        compare = subprocess.run(
            [os.environ["KVLEARN_BINARY"], "compare", "--trace", self.trace, "--model", path,
             "--policies", "lru,learned", "--format", "json"],
            capture_output=True, text=True)
        self.assertEqual(compare.returncode, 0, compare.stderr)

        # A wrong shape is refused before any work, saying what it takes.
        for hidden in ["16,0", "", "16,x"]:
            bad = subprocess.run(fit[:-4] + ["--hidden", hidden], capture_output=True, text=True)
            self.assertNotEqual(bad.returncode, 0, hidden)
            self.assertIn("one or more positive widths", bad.stderr)

    def test_another_forward_or_normalisation_is_refused(self):
        class Tanh(KvlearnReuseMlp):
            def forward(self, x):
                h = (x - self.feature_mean) / self.feature_std
                h = torch.tanh(torch.nn.functional.linear(h, self.w0, self.b0))
                h = torch.relu(torch.nn.functional.linear(h, self.w1, self.b1))
                return torch.sigmoid(torch.nn.functional.linear(h, self.w2, self.b2))
        Tanh.__name__ = Tanh.__qualname__ = "KvlearnReuseMlp"
        path = self.save(self.network(Tanh), "tanh.pt")
        with self.assertRaisesRegex(ValueError,
                                    "forward: layer 0's output goes through torch.tanh"):
            kvlearn_predict(path, self.rows())

        shifted = dict(self.metadata)
        shifted["feature_mean"] = [v + 1 for v in self.metadata["feature_mean"]]
        path = self.save(self.network(), "shifted.pt", metadata=shifted)
        with self.assertRaisesRegex(ValueError, r"tensor feature_mean\[0\] is"):
            kvlearn_predict(path, self.rows())


if __name__ == "__main__":
    unittest.main()
