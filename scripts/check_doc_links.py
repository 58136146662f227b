#!/usr/bin/python3
"""Checks that every relative link in the README and docs/ leads somewhere: the
file exists and, for a link with #anchor into a Markdown file, that file has a
heading whose GitHub anchor is that (or an explicit <a id|name="...">). Also
checks that the README and docs/ outside docs/history/ describe the system as
it is: no "session N", "round N", "held-out set N", "issue N" or "#N" (the
history of how it got there goes in docs/history/ and git log).

    scripts/check_doc_links.py [ROOT]

ROOT is the repository (default: this script's parent folder). Links inside
fenced code blocks and inline code are not links; http(s) and mailto links are
not followed. History numbers are looked for everywhere in a file, code
included, except inside web addresses and after a repository name
(owner/repo#12 is another project's issue). Prints one line per problem,
FILE:LINE: target: what is wrong, and exits 1 if there is any, 0 otherwise.
"""

import os
import re
import sys

LINK = re.compile(r"\[[^\]]*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
EXPLICIT_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
# A mention of the project's own history: work sessions, tuning rounds,
# held-out seed sets and issue numbers mean nothing to a reader of the docs.
HISTORY_NUMBER = re.compile(
    r"\b(?:sessions?|rounds?|held-out\s+sets?|issues?)\s+#?\d+"
    r"|(?<![\w/&#])#\d+\b", re.IGNORECASE)
WEB_ADDRESS = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)


def github_anchor(heading):
    """The anchor GitHub gives a heading: lower case, markup and punctuation
    dropped (letters, digits, spaces, hyphens and underscores kept), spaces
    turned into hyphens."""
    text = INLINE_CODE.sub(lambda m: m.group(2), heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text).lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def lines_outside_code(path):
    """(line number, text) of the lines outside fenced code blocks."""
    fence = None
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            stripped = line.lstrip()
            if fence is None and (stripped.startswith("```") or stripped.startswith("~~~")):
                fence = stripped[:3]
                continue
            if fence is not None:
                if stripped.startswith(fence):
                    fence = None
                continue
            yield number, line.rstrip("\n")


def anchors_of(path, cache):
    """Every anchor a Markdown file offers; repeated headings get -1, -2, ..."""
    if path not in cache:
        seen, anchors = {}, set()
        for _, line in lines_outside_code(path):
            anchors.update(EXPLICIT_ANCHOR.findall(line))
            m = HEADING.match(line)
            if not m:
                continue
            base = github_anchor(m.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            anchors.add(base if count == 0 else f"{base}-{count}")
        cache[path] = anchors
    return cache[path]


def markdown_files(root):
    files = [os.path.join(root, "README.md")]
    for folder, _, names in os.walk(os.path.join(root, "docs")):
        files += [os.path.join(folder, n) for n in sorted(names) if n.endswith(".md")]
    return [f for f in files if os.path.isfile(f)]


def broken_links(root):
    """(file, line, target, why) for every link that leads nowhere."""
    problems, cache = [], {}
    for path in markdown_files(root):
        for number, line in lines_outside_code(path):
            for target in LINK.findall(INLINE_CODE.sub("", line)):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                    continue
                file_part, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) \
                    if file_part else path
                where = os.path.relpath(path, root)
                if not os.path.exists(dest):
                    problems.append((where, number, target, "no such file"))
                elif anchor and dest.endswith(".md") and anchor not in anchors_of(dest, cache):
                    problems.append((where, number, target,
                                     f"no heading with anchor #{anchor} in "
                                     f"{os.path.relpath(dest, root)}"))
    return problems


def history_numbers(root):
    """(file, line, mention, why) for every history number in README.md and
    docs/ outside docs/history/."""
    history = os.path.join(root, "docs", "history") + os.sep
    problems = []
    for path in markdown_files(root):
        if path.startswith(history):
            continue
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                for m in HISTORY_NUMBER.finditer(WEB_ADDRESS.sub("", line)):
                    problems.append((os.path.relpath(path, root), number, m.group(0),
                                     "a session, round, held-out set or issue number "
                                     "(the docs say what the system does; history goes in "
                                     "docs/history/)"))
    return problems


def main():
    if len(sys.argv) > 2 or (len(sys.argv) == 2 and sys.argv[1] in ("-h", "--help")):
        print(__doc__)
        return 0 if len(sys.argv) == 2 else 2
    root = sys.argv[1] if len(sys.argv) == 2 else \
        os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    problems = broken_links(root) + history_numbers(root)
    for where, number, target, why in problems:
        print(f"{where}:{number}: {target}: {why}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
