#!/usr/bin/env python3
"""Lists every #include that points upward in kvlearn's layers, exits 1 if any.

The build already refuses them (each target sees only the headers of the
layers it links); this check says it in one line per include, for review and
for files no target compiles yet. Usage: scripts/check_layers.py [ROOT]
"""
import pathlib
import re
import sys

# What each folder may include (itself always). Order: core <- features <-
# models <- policies <- sim, server, learner <- clients, cli; datasets on core
# (for core/fnv1a.h); engine (engine KV event streams) beside core.
ALLOWED = {
    "core": set(),
    "datasets": {"core"},
    "engine": set(),
    "sanitizers": set(),  # build support: the ThreadSanitizer shim for absl::Mutex
    "features": {"core"},
    "models": {"core", "features"},
    "policies": {"core", "features", "models"},
    "sim": {"core", "datasets", "features", "models", "policies"},
    "learner": {"core", "datasets", "features", "models", "policies", "sim"},
    "server": {"core", "engine", "features", "models", "policies"},
    "clients": {"core", "datasets", "engine", "features", "models", "policies", "sim"},
    "cli": {"core", "datasets", "engine", "features", "models", "policies", "sim", "learner",
            "server", "clients"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')


def upward_includes(root):
    for folder, allowed in ALLOWED.items():
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in (".h", ".cc"):
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                m = INCLUDE.match(line)
                if m and m.group(1) in ALLOWED and m.group(1) != folder and \
                        m.group(1) not in allowed:
                    yield f"{path.relative_to(root)}:{number}: {folder}/ includes {m.group(1)}/"


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    bad = list(upward_includes(root))
    for line in bad:
        print(line)
    print(f"{len(bad)} upward includes in {len(ALLOWED)} layers")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
