#!/usr/bin/python3
"""Python torch opens the model files `kvlearn train` writes, and answers as kvlearn does.

A model is trained on a small generated trace with the real `kvlearn train`; Debian's
python3-torch loads it with torch.jit.load (compiling the TorchScript forward stored in
the file, which kvlearn itself never does), reads the metadata from the archive's extra
file, and runs forward on raw feature rows; the test helper `model_predict` runs the same
rows through kvlearn's own inference (LearnedModel::Load, the Eigen MLP). Both must agree
within 1e-5 on every output, and the metadata must describe the network: one feature name
and one normalisation pair per input, one increasing horizon per output.

Environment (set by ctest, tests/models/CMakeLists.txt): KVLEARN_BINARY (the kvlearn
executable), KVLEARN_MODEL_PREDICT (the helper). Exits non-zero on failure.
"""

import json
import os
import shutil
import subprocess
import tempfile
import unittest

import torch

METADATA = "kvlearn_metadata.json"


class PythonTorchModelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="kvlearn_pytorch_")
        kvlearn = os.environ["KVLEARN_BINARY"]
        trace = os.path.join(cls.work, "chat.jsonl")
        cls.model_path = os.path.join(cls.work, "chat.pt")
        subprocess.run([kvlearn, "gen", "--kind", "chat", "--requests", "3000", "--seed", "7",
                        "--out", trace], check=True, capture_output=True)
        subprocess.run([kvlearn, "train", "--trace", trace, "--out", cls.model_path,
                        "--epochs", "3"], check=True, capture_output=True)
        extra = {METADATA: ""}
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

    def test_forward_agrees_with_kvlearns_inference(self):
        m = self.metadata
        mean = torch.tensor(m["feature_mean"])
        std = torch.tensor(m["feature_std"])
        generator = torch.Generator().manual_seed(11)
        # Rows around the training data's own scale, some far outside it.
        rows = mean + std * 3 * torch.randn(64, len(mean), generator=generator)
        rows[:4] = mean + std * 50
        with torch.no_grad():
            torch_out = self.module(rows)
        self.assertEqual(tuple(torch_out.shape), (64, len(m["horizons_seconds"])))
        self.assertTrue(bool(((torch_out >= 0) & (torch_out <= 1)).all()))

        text = "\n".join(" ".join(f"{v:.9g}" for v in row.tolist()) for row in rows) + "\n"
        result = subprocess.run([os.environ["KVLEARN_MODEL_PREDICT"], self.model_path],
                                input=text, capture_output=True, text=True, check=True)
        kvlearn_out = torch.tensor([[float(v) for v in line.split()]
                                    for line in result.stdout.splitlines()])
        self.assertEqual(kvlearn_out.shape, torch_out.shape)
        worst = float((kvlearn_out - torch_out).abs().max())
        self.assertLessEqual(worst, 1e-5, f"largest difference {worst}")
        # Not a vacuous agreement: the outputs vary from row to row.
        self.assertGreater(float(torch_out.std()), 1e-3)


if __name__ == "__main__":
    unittest.main()
