#!/usr/bin/env python3
"""Benchmark: ``patchkit check`` on deployments of 1,000 and 5,000 patches, against a shell loop.

SPEC.md promises that checks scale to thousands of patches, linearly. For
each size in ``--patches`` (default 1000 and 5000) this script builds, in
``--workdir`` (default ``bench/work/check``), a patchkit deployment of that
many overlays, each a Python module of 40 functions with one line changed,
pinned with its base and its canonical diff under ``upstream/`` (the lockfile
written through ``patchkit.lockfile``, ``SHA256SUMS`` by ``patchkit sums``),
and times, best and median of ``--repeat`` runs taking turns:

  a.  ``patchkit check``: every file hashed, the lockfile parsed
      (``tomllib``) and validated, its canonical form rendered
      (``tomli_w``) and compared, every diff reversed on every core. Nothing
      is remembered between runs, so every run is a fresh clone's first;
  b.  the shell loop: ``patch -R --dry-run`` of every diff onto its overlay,
      then ``sha256sum -c`` (it checks less: no lockfile, no base hashes).

Every row shows wall time, CPU time (user + system) and peak RSS; on a busy
machine the CPU figures are the steady ones. patchkit runs from compiled
bytecode, with a cache directory of the benchmark's own (check only reads it).

Run: ``python bench/bench_check.py [--patches 1000 5000] [--repeat 3] [--workdir DIR]``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
from pathlib import Path

import benchlib

PROG = "bench_check"
TARGET_S = 0.6  # issue 18: under 0.6 s at 5,000 patches
COMMIT = "a" * 40

LOOP = (
    'set -e; for d in upstream/*.diff; do f=patches/$(basename "$d" .diff).py; '
    'patch -R --dry-run -s -p1 "$f" < "$d" >/dev/null; done; sha256sum -c --quiet SHA256SUMS'
)
"""The obvious check of the same tree: every diff undone onto its overlay, then every hash."""


def module(i: int) -> tuple[bytes, bytes]:
    """One upstream module and its overlay (one line changed)."""
    base = b"".join(b"def f%d_%d(x):\n    return x + %d\n\n" % (i, j, j) for j in range(40))
    return base, base.replace(b"    return x + 20\n", b"    return x + 21  # fixed\n")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def build(root: Path, n: int) -> None:
    """A deployment of ``n`` overlays with their diffs, canonical lockfile and SHA256SUMS."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from patchkit.core import diffs
    from patchkit.core.values import UpstreamPath
    from patchkit.lockfile.reader import loads
    from patchkit.lockfile.writer import dumps, expected_sums

    if root.exists():
        shutil.rmtree(root)
    (root / "patches").mkdir(parents=True)
    (root / "upstream").mkdir()
    parts = [
        'schema = 1\n\n[deployment]\nname = "bench"\n\n[upstreams.pkg]\n'
        f'git = "https://github.com/example/pkg"\ncommit = "{COMMIT}"\n\n'
    ]
    for i in range(n):
        base, overlay = module(i)
        path = f"pkg/m{i}.py"
        diff = diffs.canonical_diff(base, overlay, UpstreamPath(path))
        (root / f"patches/m{i}.py").write_bytes(overlay)
        (root / f"upstream/m{i}.diff").write_bytes(diff)
        parts.append(
            f'[[patches]]\nname = "p{i}"\nkind = "overlay"\nfile = "patches/m{i}.py"\nsha256 = "{sha(overlay)}"\n'
            f'target = "/usr/lib/pkg/m{i}.py"\nreason = "fix {i}"\n\n[patches.base]\nupstream = "pkg"\n'
            f'commit = "{COMMIT}"\npath = "{path}"\nsha256 = "{sha(base)}"\n\n'
            f'[patches.diff]\nfile = "upstream/m{i}.diff"\nsha256 = "{sha(diff)}"\n\n'
        )
    text = dumps(loads("".join(parts)))
    (root / "lockfile.toml").write_text(text)
    (root / "SHA256SUMS").write_bytes(expected_sums(loads(text), text.encode()))


def measure(n: int, args: argparse.Namespace, patchkit: str, out: benchlib.Out) -> dict[str, benchlib.Timing]:
    """Build the deployment of ``n`` patches and time every row on it."""
    root = args.workdir.resolve() / f"deployment-{n}"
    out.progress(f"building {root}: {n} overlays with their diffs")
    build(root, n)
    cache = args.workdir.resolve() / "cache"
    env = benchlib.cached_env(args.workdir.resolve() / "pycache", {**os.environ, "PATCHKIT_CACHE": str(cache)})
    meter = benchlib.Meter.find(args.workdir.resolve() / "peak-rss.txt")

    def check() -> benchlib.Cost:
        return benchlib.run_measured_ok(PROG, [patchkit, "check"], root, env, meter)

    def loop() -> benchlib.Cost:
        return benchlib.run_measured_ok(PROG, ["bash", "-c", LOOP], root, None, meter)

    runs = {"a": check, "b": loop}
    rows = {
        "a": benchlib.Timing("a", "a", "patchkit check"),
        "b": benchlib.Timing("b", "b", "patch -R --dry-run loop + sha256sum -c"),
    }
    for fn in runs.values():
        fn()  # warm the page cache and the bytecode cache; every candidate must pass
    for r in range(args.repeat):
        out.progress(f"{n} patches: round {r + 1}/{args.repeat}")
        for key, row in rows.items():
            row.record(runs[key])
    return rows


def report(n: int, rows: dict[str, benchlib.Timing], out: benchlib.Out) -> None:
    out.line(f"{n} patches (best / median of {len(rows['a'].seconds)}; CPU = user + system, least of the runs)")
    loop = rows["b"]
    for row in rows.values():
        ratio = f"{loop.best / row.best:5.1f}x the loop" if row is not loop else ""
        peak = f"{row.peak_mib:6.1f} MiB" if row.peak_mib is not None else ""
        cpu = row.best_cpu or 0.0
        out.line(
            f"  {row.tag:2s} {row.label:42s} {row.best:6.3f} s / {row.median:6.3f} s  CPU {cpu:6.3f} s"
            f"  {1000 * row.best / n:5.3f} ms/patch  {peak}  {ratio}"
        )
    if n == 5000:
        met = "met" if rows["a"].best < TARGET_S else "MISSED"
        out.line(f"  target: a under {TARGET_S} s at 5,000 patches: {rows['a'].best:.3f} s ({met})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--patches", type=int, nargs="+", default=[1000, 5000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=Path(__file__).resolve().parent / "work" / "check")
    args = ap.parse_args()
    benchlib.require_tools(PROG, ("patch", "sha256sum", "bash"))
    out = benchlib.Out(sys.stdout)
    patchkit = benchlib.find_patchkit(PROG)
    results = {n: measure(n, args, patchkit, out) for n in args.patches}
    for n, rows in results.items():
        report(n, rows, out)
    if len(results) > 1:
        (small, a), (large, b) = sorted(results.items())[0], sorted(results.items())[-1]
        per = (b["a"].best - a["a"].best) / (large - small)
        out.line(f"linear fit a: {1000 * (a['a'].best - per * small):.0f} ms + {1000 * per:.3f} ms/patch")


if __name__ == "__main__":
    main()
