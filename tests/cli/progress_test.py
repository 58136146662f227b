"""`kvlearn train` shows progress on a terminal, and nothing of it elsewhere.

Run under a pseudo-terminal (stderr a tty), train draws a live line for each
phase: requests replayed while recording samples, samples trained, requests
replayed while judging; each epoch's line is printed on a line of its own
(the live line is cleared before it, "\\r\\x1b[K"). With --quiet, or with
stderr a pipe, no live line is drawn, and the epoch lines are still there.

usage: progress_test.py PATH_TO_KVLEARN SAMPLE_TRACE
"""
import os
import pty
import shutil
import subprocess
import sys
import tempfile
import unittest

from serve_support import head_trace

KVLEARN, SAMPLE = sys.argv[1], sys.argv[2]
LABELS = ["kvlearn train: recorded", "kvlearn train: trained", "kvlearn train: judged"]


def run_on_terminal(args):
    """(exit status, what the program wrote on its stderr, a pseudo-terminal)."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=follower)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the program closed its end
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    return process.wait(timeout=600), b"".join(chunks).decode(errors="replace")


class TrainProgressTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="kvlearn_progress_")
        cls.trace = head_trace(SAMPLE, os.path.join(cls.work, "head.jsonl"), 200)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work, ignore_errors=True)

    def train(self, *extra):
        # --force: the model is written whatever its verdict on 200 requests.
        return [KVLEARN, "train", "--trace", self.trace, "--out",
                os.path.join(self.work, "m.pt"), "--epochs", "2", "--force"] + list(extra)

    def test_a_terminal_gets_a_live_line_per_phase(self):
        status, err = run_on_terminal(self.train())
        self.assertEqual(status, 0, err)
        for label in LABELS:
            self.assertIn("\r" + label + " ", err)
        # Epoch 1's line is printed after the live line was drawn at least
        # once (after epoch 1's line itself), so epoch 2's clears it first.
        self.assertIn("epoch   1/2 ", err)
        self.assertIn("\r\x1b[Kepoch   2/2 ", err)
        # The judging line counts to (learned + heuristics) x 160 requests.
        self.assertRegex(err, r"kvlearn train: judged \d+/\d+ requests")

    def test_quiet_or_a_pipe_draws_none(self):
        status, err = run_on_terminal(self.train("--quiet"))
        self.assertEqual(status, 0, err)
        piped = subprocess.run(self.train(), capture_output=True, text=True)
        self.assertEqual(piped.returncode, 0, piped.stderr)
        for text in [err, piped.stderr]:
            for label in LABELS:
                self.assertNotIn(label, text)
            self.assertNotIn("\x1b[K", text)
            self.assertIn("epoch   2/2 ", text)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
