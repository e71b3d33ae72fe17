#!/usr/bin/env python3
"""Benchmark: adopting and checking a hand-kept repository of 1,000 overlays, against a shell loop.

SPEC.md promises that checks scale to thousands of patches. A hand-kept
repository is verified by hand today with a loop: ``patch -R --dry-run`` for
each diff against its overlay, then ``sha256sum -c SHA256SUMS``. This script
builds (in ``--workdir``, default ``bench/work/import``) a hand-kept
repository of ``--patches`` overlays, each mounted by ``compose.yaml`` and
described by its own diff under ``patches/diffs/`` (upstream path against
overlay file name, as people write them), with a ``SHA256SUMS`` over them, and
times, best and median of ``--repeat`` runs taking turns:

  a. ``patchkit import --dry-run``: read compose, every diff, SHA256SUMS; match and undo every diff;
  b. ``patchkit check`` on the imported copy: hashes, every hand-kept diff undone, mounts, sums;
  c. the shell loop: ``patch -R --dry-run -s`` per diff, then ``sha256sum -c --quiet SHA256SUMS``.

Run: ``python bench/bench_import.py [--patches 1000] [--repeat 3] [--workdir DIR]``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import benchlib

PROG = "bench_import"
SITE = "/usr/local/lib/python3.12/dist-packages"


def module(i: int) -> bytes:
    lines = [f"# module {i}\n", "import os\n", "\n"]
    for f in range(12):
        lines.append(f"def f{f}_{i}(x):\n")
        lines.extend(f"    x = x + {f * 7 + k}  # step {k}\n" for k in range(14))
        lines.append("    return x\n\n")
    return "".join(lines).encode()


def build(root: Path, n: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from patchkit.core import diffs
    from patchkit.core.hashing import sha256_bytes

    if root.exists():
        shutil.rmtree(root)
    (root / "patches/diffs").mkdir(parents=True)
    mounts, sums = [], []
    for i in range(n):
        base = module(i)
        overlay = base.replace(b"    x = x + 37  # step 2\n", b"    x = x + 37  # step 2\n    x = fence(x)\n")
        upstream = f"vllm/generated/m{i:04d}.py"
        name = f"m{i:04d}_fixed.py"
        (root / "patches" / name).write_bytes(overlay)
        (root / f"patches/diffs/{i:04d}-m{i:04d}.patch").write_bytes(
            diffs.make(base, overlay, f"a/{upstream}", f"b/{name}")
        )
        mounts.append(f"      # vLLM PR #{40000 + i}\n      - ./patches/{name}:{SITE}/{upstream}:ro\n")
        sums.append(f"{sha256_bytes(overlay)}  patches/{name}\n")
    digest = "sha256:" + "e6" * 32
    (root / "compose.yaml").write_text(
        f"services:\n  vllm:\n    image: vllm/vllm-openai-rocm@{digest}\n    volumes:\n" + "".join(mounts)
    )
    (root / "SHA256SUMS").write_text("".join(sums))


LOOP = (
    "set -e; for d in patches/diffs/*.patch; do "
    'f=patches/$(sed -n "2s|^+++ b/||p" "$d"); patch -R --dry-run -s "$f" < "$d" >/dev/null; done; '
    "sha256sum -c --quiet SHA256SUMS"
)
"""The shell loop a hand-kept repository is checked with, run by bash in the repository."""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--patches", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=Path(__file__).resolve().parent / "work" / "import")
    args = ap.parse_args()
    benchlib.require_tools(PROG, ("patch", "sha256sum", "bash"))
    out = benchlib.Out(sys.stdout)
    patchkit = benchlib.find_patchkit(PROG)
    handkept, imported = args.workdir / "handkept", args.workdir / "imported"
    out.progress(f"building a hand-kept repository of {args.patches} overlays in {handkept}")
    build(handkept, args.patches)
    if imported.exists():
        shutil.rmtree(imported)
    shutil.copytree(handkept, imported)
    benchlib.run_checked(PROG, [patchkit, "import", "."], imported)
    benchlib.run_checked(PROG, [patchkit, "sums"], imported)
    benchlib.run_checked(PROG, [patchkit, "check"], imported, hint="\nthe imported repository should pass")

    rows = [
        benchlib.Timing("import", "a", "patchkit import --dry-run"),
        benchlib.Timing("check", "b", "patchkit check (imported)"),
        benchlib.Timing("loop", "c", "patch -R --dry-run loop + sha256sum -c"),
    ]
    # patchkit runs from compiled bytecode, as installed (see benchlib.cached_env).
    env = benchlib.cached_env(args.workdir.resolve() / "pycache")
    meter = benchlib.Meter.find(args.workdir.resolve() / "peak-rss.txt")
    loop = ["bash", "-c", LOOP]
    runs = {
        "import": lambda: benchlib.run_measured_ok(PROG, [patchkit, "import", "--dry-run", "."], handkept, env, meter),
        "check": lambda: benchlib.run_measured_ok(PROG, [patchkit, "check"], imported, env, meter),
        "loop": lambda: benchlib.run_measured_ok(PROG, loop, handkept, None, meter),
    }
    for fn in runs.values():
        fn()  # warm the page cache and check every candidate passes
    for r in range(args.repeat):
        out.progress(f"round {r + 1}/{args.repeat}")
        for row in rows:
            row.record(runs[row.key])
    best_loop = rows[2].best
    out.line(f"{args.patches} overlays, each with a hand-kept diff; best / median of {args.repeat}, peak RSS")
    out.line(f"  (peak RSS: {meter.method}; the loop's is its largest process)")
    for row in rows:
        ratio = f"{best_loop / row.best:5.1f}x the loop" if row.key != "loop" else ""
        peak = f"{row.peak_mib:6.1f} MiB" if row.peak_mib is not None else ""
        out.line(f"  {row.tag}. {row.label:42s} {row.best:7.3f} s / {row.median:7.3f} s  {peak}  {ratio}")


if __name__ == "__main__":
    main()
