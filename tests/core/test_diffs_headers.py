"""The file a ``---``/``+++`` header names, read where GNU ``patch`` ends it, checked against ``patch`` itself.

Hand-kept diffs carry text after the name: a timestamp after a tab (``diff
-u``), ``(working copy)`` or ``(revision 123)`` after a space (svn), ``(at
77469c9)`` written by hand. ``patch`` strips it; patchkit must name the same
file, or a diff of a mounted file reads as unmatched and its overlay as
diff-less.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from patchkit.core import diffs

BASE = b"".join(b"line %d\n" % i for i in range(1, 8))
NEW = BASE.replace(b"line 4\n", b"line 4 changed\n")
SUFFIXES = [
    b"",
    b"\t2024-01-01 12:00:00.000000000 +0000",
    b"\t(revision 1234)",
    b" (at 77469c9)",
    b" (working copy)",
    b"  2024-01-01 12:00:00",
    b" ",
    b"\t",
    b" \t(at 77469c9)",
]
NAMES = [b"x.py", b"pkg/x.py", b"pkg/my file.py"]
ROUNDS = int(os.environ.get("PATCHKIT_HEADER_ROUNDS", "24"))


def _patch_names(tmp: Path, old: bytes, new: bytes) -> str | None:
    """The file GNU patch -p1 changes for a diff with these header texts (None: it changes none)."""
    tree = tmp / "tree"
    shutil.rmtree(tree, ignore_errors=True)
    for n in NAMES:
        (tree / n.decode()).parent.mkdir(parents=True, exist_ok=True)
        (tree / n.decode()).write_bytes(BASE)
    diff = b"--- " + old + b"\n+++ " + new + b"\n@@ -3,3 +3,3 @@\n line 3\n-line 4\n+line 4 changed\n line 5\n"
    run = subprocess.run(
        ["patch", "-p1", "--batch", "--force", "-s", "--no-backup-if-mismatch"],
        input=diff,
        cwd=tree,
        capture_output=True,
        check=False,
        timeout=10,
    )
    changed = [n.decode() for n in NAMES if (tree / n.decode()).read_bytes() == NEW]
    return changed[0] if run.returncode == 0 and len(changed) == 1 else None


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_the_header_names_the_file_gnu_patch_changes(tmp_path: Path) -> None:
    rng = random.Random(32)
    cases = [(n, s, s) for n in NAMES for s in SUFFIXES[:4]]
    cases += [(rng.choice(NAMES), rng.choice(SUFFIXES), rng.choice(SUFFIXES)) for _ in range(ROUNDS)]
    for name, old_suffix, new_suffix in cases:
        if b" " in name and not (
            old_suffix.lstrip(b" ").startswith(b"\t") and new_suffix.lstrip(b" ").startswith(b"\t")
        ):
            continue  # a name with a space needs a tab after it, for patch as for diff and git
        old, new = b"a/" + name + old_suffix, b"b/" + name + new_suffix
        expected = _patch_names(tmp_path, old, new)
        fd = diffs.parse(
            b"--- " + old + b"\n+++ " + new + b"\n@@ -3,3 +3,3 @@\n line 3\n-line 4\n+line 4 changed\n line 5\n"
        )[0]
        got = diffs.strip_prefix(fd.new_path)
        assert got == expected == name.decode(), (old, new, got, expected)


@pytest.mark.parametrize(
    ("header", "name"),
    [
        (b"+++ b/vllm/x.py (at 77469c9)", "b/vllm/x.py"),
        (b"+++ b/vllm/x.py\t2024-01-01 00:00:00.000000000 +0000", "b/vllm/x.py"),
        (b"+++ b/vllm/x.py (revision 88)\t", "b/vllm/x.py (revision 88)"),  # a tab ends it: spaces are the name's
        (b'+++ "b/vllm/caf\\303\\251.py"\t2024', "b/vllm/caf\u00e9.py"),
        (b'+++ "b/a \\"q\\".py" (note)', 'b/a "q".py'),
        (b"+++ /dev/null\t1970-01-01 00:00:00 +0000", None),
    ],
)
def test_text_after_the_name_is_not_part_of_it(header: bytes, name: str | None) -> None:
    fd = diffs.parse(b"--- a/vllm/x.py\n" + header + b"\n@@ -1 +1 @@\n-a\n+b\n")[0]
    assert fd.new_path == name
