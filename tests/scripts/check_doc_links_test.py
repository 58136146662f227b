#!/usr/bin/python3
"""Checks scripts/check_doc_links.py: in a throw-away tree it finds a link to a
missing file and one to a missing heading, accepts anchors made as GitHub makes
them from headings (code and punctuation dropped, repeats numbered) and explicit ones,
ignores links in code; that it finds session, round, held-out set and issue
numbers outside docs/history/ (and not in web addresses nor another repository's
issues); and the real README and docs/ have neither.
Run by ctest; standard library only."""
import importlib.util
import pathlib
import tempfile
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("check_doc_links",
                                              ROOT / "scripts/check_doc_links.py")
check_doc_links = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_doc_links)

README = """# Planted
[ok file](docs/a.md) and [ok anchor](docs/a.md#kvlearn-compare-the-table)
[missing file](docs/nope.md)
[missing anchor](docs/a.md#no-such-heading)
[repeat](docs/a.md#notes-1) [explicit](docs/a.md#here) [own](#planted) [web](https://x.org/y)
Not links: `[code](docs/gone.md)`
```
[fenced](docs/gone.md)
```
"""

DOC_A = """# A
## `kvlearn compare`: the table!
## Notes
## Notes
<a id="here"></a>
[back](../README.md#planted) [up one, missing](../docs/b.md)
"""


NUMBERED_README = """# Planted
Measured in session 30, then in Sessions 31-33.
A round trip, the rounds of a queue and round-robin are fine; round 7 is not.
Held-out set 12 and the held-out sets 3 to 5; issue 14, issue #50 and #12.
Links: [anchor](#cluster-ttft), https://github.com/o/r/issues/84#issue-84, o/r#84.
```sh
kvlearn compare --trace t.jsonl   # after round 2
```
"""

HISTORY = "# History\nSession 12 and round 3 belong here.\n"


class CheckDocLinksTest(unittest.TestCase):
    def test_a_planted_tree_shows_exactly_its_broken_links(self):
        with tempfile.TemporaryDirectory() as tmp:
            tree = pathlib.Path(tmp)
            (tree / "docs").mkdir()
            (tree / "README.md").write_text(README)
            (tree / "docs/a.md").write_text(DOC_A)
            found = [f"{w}:{n}: {t}" for w, n, t, _ in check_doc_links.broken_links(str(tree))]
        self.assertEqual(found, ["README.md:3: docs/nope.md",
                                 "README.md:4: docs/a.md#no-such-heading",
                                 "docs/a.md:6: ../docs/b.md"])

    def test_a_planted_tree_shows_exactly_its_history_numbers(self):
        with tempfile.TemporaryDirectory() as tmp:
            tree = pathlib.Path(tmp)
            (tree / "docs/history").mkdir(parents=True)
            (tree / "README.md").write_text(NUMBERED_README)
            (tree / "docs/history/old.md").write_text(HISTORY)
            found = [f"{w}:{n}: {t}" for w, n, t, _ in check_doc_links.history_numbers(str(tree))]
        self.assertEqual(found, ["README.md:2: session 30", "README.md:2: Sessions 31",
                                 "README.md:3: round 7", "README.md:4: Held-out set 12",
                                 "README.md:4: held-out sets 3", "README.md:4: issue 14",
                                 "README.md:4: issue #50", "README.md:4: #12",
                                 "README.md:7: round 2"])

    def test_the_real_docs_have_no_history_number(self):
        real = check_doc_links.history_numbers(str(ROOT))
        if real:
            self.fail("history numbers outside docs/history/:\n" +
                      "\n".join(f"{w}:{n}: {t}" for w, n, t, _ in real))

    def test_the_real_docs_have_no_broken_link(self):
        real = check_doc_links.broken_links(str(ROOT))
        self.assertEqual(real, [], "\n".join(f"{w}:{n}: {t}: {why}" for w, n, t, why in real))


if __name__ == "__main__":
    unittest.main()
