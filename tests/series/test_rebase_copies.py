"""A copy in a series patch is rebased from the file as its mail found it, as ``git am -3`` applies it.

``git apply`` reads the source of a copy or a rename from the tree the mail
applies to, not from what an earlier section of the same mail made of it.
``git format-patch`` writes a modification of ``a.py`` before a copy of the
original ``a.py`` to ``b.py`` (sections follow the paths), so the copy's
hunks are against the original lines. Each form below is rebased with
``patchkit rebase --series`` onto a new upstream commit and compared with
``git am -3`` of the same mail on that commit: the rebased patch, applied
by git, gives exactly git's tree.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from patchkit.core.hashing import sha256_bytes
from tests.conftest import Invoke
from tests.series.queue import backport, commit, git

A = b"".join(b"value_%d = %d  # line %d of the module\n" % (i, i, i) for i in range(1, 21))
KEEP = b"x = 1\n"
COPIED = A.replace(b"line 15 of", b"line 15, edited, of")


@dataclass(frozen=True)
class Form:
    """A backport (the files it changes, the ``format-patch`` options), and the upstream commit it is moved onto."""

    changes: dict[str, bytes | None]
    options: tuple[str, ...]
    upstream: dict[str, bytes | None]


FORMS = {
    # The copy's hunk applies to the edited a.py too: read from there, b.py would silently carry a.py's edit.
    "edited, then copied with an edit": Form(
        {"pkg/a.py": A.replace(b"line 1 of", b"line 1, edited, of"), "pkg/b.py": COPIED},
        ("-C", "-C"),
        {"pkg/a.py": A.replace(b"line 10 of", b"line 10, upstream, of")},
    ),
    "emptied, then copied with an edit": Form(
        {"pkg/a.py": b"", "pkg/b.py": COPIED}, ("-C", "-C"), {"pkg/keep.py": b"x = 2\n"}
    ),
    "rewritten, then copied with an edit": Form(
        {"pkg/a.py": A.replace(b"value_", b"other_"), "pkg/b.py": COPIED},
        ("-B", "-M"),
        {"pkg/keep.py": b"x = 2\n"},
    ),
}

NAME = "tool-0001-split"


def _tree(root: Path) -> dict[str, bytes]:
    files = sorted(p for p in root.rglob("*") if p.is_file() and ".git" not in p.relative_to(root).parts)
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in files}


def _headers(patch: str) -> list[str]:
    """Each section's ``diff --git``, copy or rename and ``index`` lines: which files, from which blob to which."""
    return [ln for ln in patch.splitlines() if ln.startswith(("diff --git ", "index ", "copy ", "rename "))]


def _am(upstream: Path, at: str, patch: Path, dest: Path, *options: str) -> dict[str, bytes]:
    """The tree ``git am`` (with ``options``) makes of ``patch`` on a clone of ``upstream`` at ``at``."""
    subprocess.run(["git", "clone", "-q", str(upstream), str(dest)], check=True, capture_output=True)
    git(dest, "checkout", "-q", "--detach", at)
    git(dest, "am", "-q", *options, str(patch))
    return _tree(dest)


def _deployment(tmp: Path, form: Form, invoke: Invoke) -> tuple[Path, Path, bytes]:
    """An upstream, and a deployment whose one-patch series makes ``form`` (exported with its options)."""
    up = tmp / "up" / "tool"
    up.mkdir(parents=True)
    git(up, "init", "-q", "-b", "main")
    c1 = commit(up, {"pkg/a.py": A, "pkg/keep.py": KEEP}, "Release 1.0")
    root = tmp / "deploy"
    out = root / "patches" / "tool"
    backport(up, c1, form.changes, "tool: split b out of a (#7)", out, f"{NAME}.patch")
    git(up, "checkout", "-q", NAME)
    made = git(up, "format-patch", "-1", "--stdout", *form.options, "HEAD").encode()
    git(up, "checkout", "-q", "main")
    (out / f"{NAME}.patch").write_bytes(made)
    listing = f"{NAME}.patch\n".encode()
    (out / "series").write_bytes(listing)
    (root / "lockfile.toml").write_text(
        'schema = 1\n\n[deployment]\nname = "tool"\n\n'
        f'[upstreams.tool]\ngit = "{up.as_uri()}"\ncommit = "{c1}"\n\n'
        f'[series.tool]\ncommit = "{c1}"\ntarget = "/usr/lib/python3/dist-packages"\n'
        f'series_file = "patches/tool/series"\nseries_sha256 = "{sha256_bytes(listing)}"\n\n'
        f'[[series.tool.patches]]\nname = "{NAME}"\nfile = "patches/tool/{NAME}.patch"\n'
        f'sha256 = "{sha256_bytes(made)}"\nreason = "split"\n'
    )
    run = invoke("lock", repo=root)
    assert run.exit_code == 0, run.stdout + run.stderr
    return up, root, made


@pytest.mark.parametrize("label", list(FORMS))
def test_a_copy_after_an_edit_of_its_source_in_the_same_mail_rebases_as_git_am(
    label: str, tmp_path: Path, invoke: Invoke
) -> None:
    form = FORMS[label]
    up, root, made = _deployment(tmp_path, form, invoke)
    assert b"\ncopy from pkg/a.py\ncopy to pkg/b.py\n" in made
    assert made.index(b"diff --git a/pkg/a.py b/pkg/a.py") < made.index(b"diff --git a/pkg/a.py b/pkg/b.py")
    c2 = commit(up, form.upstream, "Release 1.1")
    expected = _am(up, c2, root / "patches/tool" / f"{NAME}.patch", tmp_path / "am", "-3")
    # git copies a.py as the new commit has it, before the mail's own change to it.
    source = form.upstream.get("pkg/a.py") or A
    assert expected["pkg/b.py"] == source.replace(b"line 15 of", b"line 15, edited, of")

    run = invoke("rebase", "--series", "tool", "--onto", c2, repo=root)
    assert run.exit_code == 0, run.stdout + run.stderr
    assert run.stdout.splitlines()[1].split()[:2] == [NAME, "clean"]
    rebased = root / "patches/tool" / f"{NAME}.patch"
    assert _am(up, c2, rebased, tmp_path / "rebased") == expected
    # Section by section, the rebased patch names what git's own export of the am'd commit names.
    theirs = git(tmp_path / "am", "format-patch", "-1", "--stdout", "--full-index", *form.options, "HEAD")
    assert _headers(rebased.read_text()) == _headers(theirs)
    assert invoke("check", repo=root).exit_code == 0


def test_in_a_file_of_several_mails_the_rebased_file_keeps_the_mails_and_a_copy_reads_the_earlier_ones(
    tmp_path: Path, invoke: Invoke
) -> None:
    """A later mail copies what an earlier one made; written back as one mail, git would copy the original."""
    edited = A.replace(b"line 1 of", b"line 1, edited, of")
    form = Form({"pkg/a.py": edited}, (), {"pkg/a.py": A.replace(b"line 10 of", b"line 10, upstream, of")})
    up, root, _ = _deployment(tmp_path, form, invoke)
    git(up, "checkout", "-q", NAME)
    commit(up, {"pkg/b.py": edited.replace(b"line 15 of", b"line 15, edited, of")}, "tool: b as a copy of a (#8)")
    mails = git(up, "format-patch", "--stdout", "-C", "-C", "HEAD~2..HEAD").encode()
    git(up, "checkout", "-q", "main")
    assert mails.count(b"\nFrom: ") == 2 and b"copy from pkg/a.py" in mails
    patch = root / "patches/tool" / f"{NAME}.patch"
    patch.write_bytes(mails)
    assert invoke("lock", repo=root).exit_code == 0
    c2 = commit(up, form.upstream, "Release 1.1")
    expected = _am(up, c2, patch, tmp_path / "am", "-3")
    assert expected["pkg/b.py"].startswith(b"value_1 = 1  # line 1, edited, of")

    run = invoke("rebase", "--series", "tool", "--onto", c2, repo=root)
    assert run.exit_code == 0, run.stdout + run.stderr
    assert _am(up, c2, patch, tmp_path / "rebased") == expected
    assert [ln for ln in patch.read_bytes().splitlines() if ln.startswith(b"Subject: ")] == [
        b"Subject: [PATCH] tool: split b out of a (#7)",
        b"Subject: [PATCH] tool: b as a copy of a (#8)",
    ]
    assert invoke("check", repo=root).exit_code == 0
