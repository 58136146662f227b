#!/usr/bin/python3
"""Checks scripts/check_layers.py: it finds an upward include planted in a
throw-away tree, accepts downward ones, and finds none in the real tree.
Run by ctest; standard library only."""
import importlib.util
import pathlib
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("check_layers", ROOT / "scripts/check_layers.py")
check_layers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_layers)


def main():
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        tree = pathlib.Path(tmp)
        for folder in ("core", "policies", "server"):
            (tree / folder).mkdir()
        (tree / "core/pool.h").write_text('#include "core/catalog.h"\n#include "policies/x.h"\n')
        (tree / "policies/x.h").write_text('#include "core/pool.h"\n')
        (tree / "server/s.cc").write_text('#include "policies/x.h"\n#  include "sim/replay.h"\n')
        found = list(check_layers.upward_includes(tree))
        want = ["core/pool.h:2: core/ includes policies/", "server/s.cc:2: server/ includes sim/"]
        if found != want:
            failures.append(f"planted tree: got {found}, want {want}")
    real = list(check_layers.upward_includes(ROOT))
    if real:
        failures.append("upward includes in the tree:\n" + "\n".join(real))
    for f in failures:
        print("FAIL:", f)
    print(f"{2 - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
