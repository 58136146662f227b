#!/usr/bin/python3
"""Checks that every shell script in scripts/ answers -h and --help with its
header comment and does nothing else (no package check, no build), and that
setup.sh refuses an argument it does not know. Run by ctest; standard
library only."""
import os
import pathlib
import subprocess
import tempfile
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPTS = ["run.sh", "test.sh", "build.sh", "ci_stages.sh", "fuzz.sh", "setup.sh", "demo_ab.sh",
           "cluster_demo.sh"]


def run_script(script, arg, env=None):
    return subprocess.run(["bash", str(ROOT / "scripts" / script), arg], env=env,
                          capture_output=True, text=True, timeout=60)


class ScriptHelpTest(unittest.TestCase):
    def test_help_prints_the_header_and_does_nothing_else(self):
        with tempfile.TemporaryDirectory() as tmp:
            # Were --help not honoured, build.sh would configure this directory.
            build_dir = pathlib.Path(tmp) / "build"
            env = dict(os.environ, KVLEARN_BUILD_DIR=str(build_dir),
                       KVLEARN_CI_BUILD_PREFIX=str(build_dir),
                       KVLEARN_FUZZ_BUILD_DIR=str(build_dir))
            for script in SCRIPTS:
                # Line 1 is the shebang, line 2 the header's first line.
                header = (ROOT / "scripts" / script).read_text().splitlines()[1].removeprefix("# ")
                for flag in ("-h", "--help"):
                    with self.subTest(script=script, flag=flag):
                        r = run_script(script, flag, env)
                        self.assertEqual(r.returncode, 0, r.stderr)
                        out = r.stdout.splitlines()
                        self.assertEqual(out[:1], [header])
                        for line in out:
                            self.assertFalse(line.startswith(("setup: ", "-- ", "ninja:", "ci: ")),
                                             f"did more than print its usage: {line!r}")
            self.assertFalse(build_dir.exists(), f"a script's --help created {build_dir}")

    def test_setup_refuses_an_unknown_argument_naming_it(self):
        r = run_script("setup.sh", "--bogus")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--bogus", r.stderr)


if __name__ == "__main__":
    unittest.main()
