"""``patchkit rebase`` on a git upstream writes what ``git cherry-pick`` of the patches would: git's own merge."""

from __future__ import annotations

import os
import random
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from conftest import Invoke

from patchkit.rebase.merge import BASE_MARKER, OURS_MARKER, THEIRS_MARKER
from patchkit.vcs import gitmerge
from tests.rebase.test_merge_git import generate
from tests.rebase.test_overlays import WORKER, Upstream, make_deploy, outcomes, rebase_json

# Edits where patchkit's old merge and git's disagreed, and ordinary ones.
OTHER = b"def a():\n    return 1\n\n\ndef b():\n    return 2\n"
SWAP = b"x = 1\ny = 2\n"


@pytest.fixture
def upstream(tmp_path: Path) -> Upstream:
    return Upstream(tmp_path / "vllm")


def _git(upstream: Upstream, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
    config = ["-c", "merge.conflictStyle=diff3", "-c", "user.name=t", "-c", "user.email=t@t"]
    return subprocess.run(["git", "-C", str(upstream.path), *config, *args], capture_output=True, check=check, env=env)


def _patches_commit(upstream: Upstream, c1: str, patched: dict[str, bytes]) -> str:
    """A commit on ``c1`` holding every patched file: what cherry-pick and merge-tree take as the patch."""
    _git(upstream, "checkout", "-q", "-b", "patches", c1)
    for rel, data in patched.items():
        (upstream.path / rel).write_bytes(data)
    _git(upstream, "commit", "-qam", "patches")
    return _git(upstream, "rev-parse", "HEAD").stdout.decode().strip()


def _cherry_pick(upstream: Upstream, commit: str, onto: str, paths: list[str]) -> dict[str, bytes]:
    """Each file as ``git cherry-pick COMMIT`` onto ``onto`` writes it (a clean pick)."""
    _git(upstream, "checkout", "-q", "--detach", onto)
    _git(upstream, "cherry-pick", commit)
    return {rel: (upstream.path / rel).read_bytes() for rel in paths}


def _merge_tree(upstream: Upstream, commit: str, onto: str, rel: str) -> tuple[bool, bytes]:
    """``git merge-tree --write-tree COMMIT ONTO``'s file ``rel`` (patch first, as patchkit has it), relabelled."""
    done = _git(upstream, "merge-tree", "--write-tree", commit, onto, check=False)
    tree = done.stdout.decode().split("\n", 1)[0]
    data = _git(upstream, "cat-file", "blob", f"{tree}:{rel}").stdout
    data = re.sub(rb"(?m)^<<<<<<< %s(?=\r?\n)" % commit.encode(), OURS_MARKER, data)
    data = re.sub(rb"(?m)^>>>>>>> %s(?=\r?\n)" % onto.encode(), THEIRS_MARKER, data)
    data = re.sub(rb"(?m)^\|\|\|\|\|\|\| [0-9a-f]+(?=\r?\n)", BASE_MARKER, data)
    return done.returncode == 1, data


def test_clean_rebase_writes_what_cherry_pick_writes(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    files = {"vllm/worker.py": WORKER, "vllm/twice.py": b"z\na\n", "vllm/other.py": OTHER}
    c1 = upstream.commit(files)
    patched = {
        "vllm/worker.py": WORKER.replace(b"        return len(blocks)\n", b"        return len(blocks) + 0\n"),
        "vllm/twice.py": b"z\na\na\n",  # upstream adds the same line, and one more above
        "vllm/other.py": OTHER.replace(b"return 1", b"return 10"),
    }
    root = make_deploy(invoke, tmp_path, upstream, c1, patched)
    c2 = upstream.commit(
        {
            "vllm/worker.py": WORKER.replace(b"import torch\n", b"import torch\nimport os\n"),
            "vllm/twice.py": b"b\nz\na\na\n",
            "vllm/other.py": b"import os\n\n\n" + OTHER.replace(b"return 2", b"return 20"),
        }
    )
    code, doc = rebase_json(invoke, root, "--onto", c2)
    assert code == 0, doc
    assert outcomes(doc) == {"worker": "clean", "twice": "upstreamed", "other": "clean"}
    commit = _patches_commit(upstream, c1, patched)
    picked = _cherry_pick(upstream, commit, c2, list(patched))
    for rel, data in picked.items():
        assert _merge_tree(upstream, commit, c2, rel) == (False, data), rel
        # An upstreamed patch is a drop candidate: its overlay is upstream's file, the merge.
        assert (root / "patches" / Path(rel).name).read_bytes() == data, rel


def test_conflicted_rebase_writes_cherry_picks_markers(invoke: Invoke, tmp_path: Path, upstream: Upstream) -> None:
    c1 = upstream.commit({"vllm/swap.py": SWAP})
    patched = {"vllm/swap.py": b"y = 2\nx = 1\n"}
    root = make_deploy(invoke, tmp_path, upstream, c1, patched)
    c2 = upstream.commit({"vllm/swap.py": b"x = 1\n"})
    code, doc = rebase_json(invoke, root, "--onto", c2)
    assert code == 1 and outcomes(doc) == {"swap": "conflict"}
    work = root / doc["work_files"][0]  # type: ignore[index]
    commit = _patches_commit(upstream, c1, patched)
    assert _merge_tree(upstream, commit, c2, "vllm/swap.py") == (True, work.read_bytes())
    assert work.read_bytes() == (
        OURS_MARKER + b"\ny = 2\nx = 1\n" + BASE_MARKER + b"\nx = 1\ny = 2\n=======\nx = 1\n" + THEIRS_MARKER + b"\n"
    )


# --- generated: every overlay of a rebase against git's merge of the same commits ----------------------------

CLI_N = int(os.environ.get("PATCHKIT_REBASE_CLI_N", "24"))
CLI_SEED = int(os.environ.get("PATCHKIT_REBASE_CLI_SEED", "31"))


def _generated(n: int, seed: int) -> list[tuple[bytes, bytes, bytes]]:
    """``n`` text triples of the merge differential's generator whose patch changes something."""
    rng = random.Random(seed)
    out: list[tuple[bytes, bytes, bytes]] = []
    while len(out) < n:
        triple = generate(rng)
        if triple[1] != triple[0] and not any(gitmerge.is_binary(d) for d in triple):
            out.append(triple)
    return out


def _merge_tree_files(upstream: Upstream, commit: str, onto: str, paths: list[str]) -> dict[str, tuple[bool, bytes]]:
    """Each of ``paths`` as ``git merge-tree --write-tree COMMIT ONTO`` writes it, and whether it conflicted."""
    done = _git(upstream, "merge-tree", "--write-tree", "--name-only", "-z", commit, onto, check=False)
    fields = done.stdout.split(b"\0")
    conflicted = set(fields[1 : fields.index(b"", 1)]) if done.returncode == 1 else set()
    out = {}
    for rel in paths:
        _, data = _merge_tree(upstream, commit, onto, rel)
        out[rel] = (rel.encode() in conflicted, data)
    return out


def test_a_generated_rebase_writes_what_git_merge_tree_writes(
    invoke: Invoke, tmp_path: Path, upstream: Upstream
) -> None:
    """``patchkit rebase --onto`` of many overlays: each file and its status as merge-tree of the same commits.

    The triples are the merge differential's (``tests/rebase/test_merge_git.py``), text ones whose patch
    changes something, at paths with spaces, quotes, a tab and non-ASCII names.
    ``PATCHKIT_REBASE_CLI_N`` sets how many, ``PATCHKIT_REBASE_CLI_SEED`` another seed.

    The conflicted files are compared as the rebase leaves them to resolve;
    (with any clean merge the semantic checks stopped); then each is resolved
    and ``--continue`` writes the rest, compared as the overlays the rebase
    committed.
    """
    triples = _generated(CLI_N, CLI_SEED)
    dirs = ["", "", "sp ace/", "caf\u00e9/", "q'uote/", "t\tab/", 'd"q/']  # names git quotes, or a reader splits
    paths = [f"vllm/{dirs[k % len(dirs)]}g{k}.py" for k in range(len(triples))]
    c1 = upstream.commit({p: t[0] for p, t in zip(paths, triples, strict=True)})
    patched = {p: t[1] for p, t in zip(paths, triples, strict=True)}
    root = make_deploy(invoke, tmp_path, upstream, c1, patched)
    c2 = upstream.commit({p: t[2] for p, t in zip(paths, triples, strict=True)})
    code, doc = rebase_json(invoke, root, "--onto", c2)
    assert code in (0, 1), doc
    got = outcomes(doc)
    want = _merge_tree_files(upstream, _patches_commit(upstream, c1, patched), c2, paths)
    work = {Path(rel).name: root / rel for rel in doc["work_files"]}  # type: ignore[union-attr]
    bad = [
        f"{rel}: {triples[k]!r}: patchkit {got[f'g{k}']}, git conflicted={want[rel][0]}"
        for k, rel in enumerate(paths)
        if (got[f"g{k}"] == "conflict") != want[rel][0] or (want[rel][0] and Path(rel).name not in work)
    ]
    assert bad == [], "\n".join(bad[:3])
    # A work file holds git's merge: its conflict, or a clean merge the semantic checks stopped (broken).
    stopped = [rel for rel in paths if Path(rel).name in work]
    bad = [rel for rel in stopped if work[Path(rel).name].read_bytes() != want[rel][1]]
    assert bad == [], [(rel, work[Path(rel).name].read_bytes(), want[rel][1]) for rel in bad[:2]]
    for file in work.values():
        file.write_bytes(b"# resolved\n")
    if code == 1:
        done = invoke("rebase", "--continue", repo=root)
        assert done.exit_code == 0, done.stderr
    merged = {rel: (root / "patches" / Path(rel).name).read_bytes() for rel in paths if rel not in stopped}
    bad = [rel for rel, data in merged.items() if data != want[rel][1]]
    assert bad == [], [(rel, merged[rel], want[rel][1]) for rel in bad[:2]]
    print(f"{len(paths)} overlays rebased: {sorted(Counter(got.values()).items())}, {len(stopped)} work files")
    assert "conflict" in got.values() and set(got.values()) - {"conflict"}, got  # both answers exercised
