#!/usr/bin/env python3
"""Benchmark: how fast ``patchkit bundle`` packs a deployment of 1,000 patches, against tar | gzip.

Issue 5 ("Speed") asks for the bundle of a repository with 1,000 synthetic
patches, timed beside ``tar --sort=name … | gzip -n`` of the same files, in
one run. This script:

* builds (or reuses) under ``--workdir`` a patchkit deployment of
  ``--patches`` committed modules (``patches/pkgNN/mod_NNNN.py``, generated
  Python-like text of 2 to 40 KB, log-uniform, deterministic), a small
  ``compose.yaml`` and an executable ``entrypoint.sh``; the lockfile is
  written through ``patchkit.lockfile`` and ``SHA256SUMS`` by ``patchkit
  sums``, and ``patchkit check`` must pass;
* with a warm page cache and bytecode cache (every candidate runs once,
  untimed, first), times best and median of ``--repeat`` runs, taking turns
  round by round:

  a. ``patchkit bundle -o OUT.tar.gz`` as a subprocess in the deployment;
  b. ``tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf -
     <the same top-level files> | gzip -n -9 > OUT2.tar.gz`` in bash;
  c. ``patchkit.bundle.archive.build_bundle`` in this process (reading the lockfile
     included, writing the file not), which separates start-up from the work;

* checks that patchkit's output is byte-identical across every run (and to
  the in-process one), that ``patchkit verify-bundle`` accepts it, and that
  both archives hold the same names.

Run: ``python bench/bench_bundle.py [--patches 1000] [--workdir DIR] [--repeat 3] [--json]``.
With ``--json`` the human-readable report goes to stderr and a JSON document
to stdout.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# bench/benchlib.py: bench/ is sys.path[0] when this runs as a script (isort files it as third-party)
from benchlib import Cost, Meter, Out, Timing, fail, find_patchkit, run_checked, run_measured_ok

from patchkit.bundle.archive import build_bundle
from patchkit.core.values import ContainerPath, RepoPath, Sha256
from patchkit.lockfile.model import Lockfile, Patch, PatchKind
from patchkit.lockfile.writer import dumps
from patchkit.store.repo import Repo

PROG = "bench_bundle"  # prefixes its error messages
BENCH_DIR = Path(__file__).resolve().parent

TREE_VERSION = 1  # bump when the generator or the layout changes, to force a rebuild
SEED = 0x5EED_B0D1
KB = 1000
SIZE_MIN, SIZE_MAX = 2 * KB, 40 * KB
PER_DIR = 100
TARGET_PREFIX = "/opt/app/lib"
WORDS = (
    "block", "cache", "tensor", "layer", "rank", "shard", "token", "batch", "head", "expert", "weight",
    "scale", "offset", "stride", "page", "slot", "queue", "request", "sequence", "prefix", "kernel",
    "stream", "event", "buffer", "device", "worker", "engine", "sampler", "logit", "prompt", "budget",
    "chunk", "window", "group", "bucket", "index", "mask", "bias", "norm", "rotary", "limit", "count",
)  # fmt: skip
COMPOSE_YAML = """\
# patchkit bench deployment (synthetic)
services:
  app:
    image: registry.example.invalid/app@sha256:{digest}
    entrypoint: ["/entrypoint.sh"]
    volumes:
      - ./entrypoint.sh:/entrypoint.sh:ro
      - ./patches:/opt/app/lib:ro
"""
ENTRYPOINT = '#!/bin/sh\n# patchkit bench entrypoint (synthetic)\nset -eu\nexec "$@"\n'


# --------------------------------------------------------------------------- the tree


@dataclass(frozen=True)
class Spec:
    name: str
    rel: str
    size: int


def plan(n: int) -> list[Spec]:
    """The modules: names, paths and sizes (each seeded on its own, so the first N are the same whatever N)."""
    lo, hi = math.log(SIZE_MIN), math.log(SIZE_MAX)
    out = []
    for i in range(n):
        rng = random.Random(SEED * 100_003 + i)  # noqa: S311 - reproducible test data
        size = int(math.exp(rng.uniform(lo, hi)))
        out.append(Spec(f"mod-{i:04d}", f"patches/pkg{i // PER_DIR:02d}/mod_{i:04d}.py", size))
    return out


def module_text(i: int, size: int) -> bytes:
    """``size`` bytes of deterministic Python-like source, ending in a newline."""
    rng = random.Random(SEED * 7 + i)  # noqa: S311 - reproducible test data
    parts = [f'"""Synthetic patch module {i} for the patchkit bundle benchmark."""\n\nimport math\n']
    length = len(parts[0])
    while length < size:
        fn = "_".join(rng.choice(WORDS) for _ in range(2))
        args = [rng.choice(WORDS) for _ in range(rng.randint(1, 3))]
        lines = [f"\n\ndef {fn}_{rng.randrange(1000)}({', '.join(args)}):\n"]
        for _ in range(rng.randint(2, 9)):
            a, b = rng.choice(args), rng.choice(WORDS)
            lines.append(f"    {b} = {a} * {rng.randint(1, 4096)} + math.ceil({rng.random():.4f})\n")
            args.append(b)
        lines.append(f"    return {rng.choice(args)}\n")
        chunk = "".join(lines)
        parts.append(chunk)
        length += len(chunk)
    return "".join(parts).encode()[: size - 1] + b"\n"


@dataclass(frozen=True)
class Tree:
    root: Path
    reused: bool
    build_seconds: float
    files: int
    bytes: int


def ensure_tree(base: Path, n: int, patchkit: str, out: Out) -> Tree:
    """Reuse the deployment when its manifest and every file size match; rebuild it otherwise."""
    specs = plan(n)
    root = base / "deployment"
    manifest_path = base / "manifest.json"
    want = {"version": TREE_VERSION, "seed": SEED, "patches": n, "bytes": sum(s.size for s in specs)}
    total = want["bytes"]
    try:
        have = json.loads(manifest_path.read_text())
        current = have == {**want, "complete": True} and all((root / s.rel).stat().st_size == s.size for s in specs)
        current = current and all((root / f).is_file() for f in ("lockfile.toml", "SHA256SUMS", "compose.yaml"))
    except (OSError, ValueError):
        current = False
    if current:
        out.progress(f"reusing {root} ({n} modules, {total / 1e6:.1f} MB)")
        return Tree(root, True, 0.0, n, total)

    if root.exists():
        if not manifest_path.exists():
            fail(PROG, f"{root} exists but was not made by this benchmark ({manifest_path} is missing); move it away")
        out.progress(f"removing stale {root}")
        shutil.rmtree(root)
    base.mkdir(parents=True, exist_ok=True)
    manifest_path.write_text(json.dumps({**want, "complete": False}, indent=2) + "\n")
    out.progress(f"building {root}: {n} modules, {total / 1e6:.1f} MB")
    started = time.perf_counter()
    run_checked(PROG, [patchkit, "init", str(root), "--name", "bench-bundle"], cwd=base)
    patches = []
    for i, spec in enumerate(specs):
        data = module_text(i, spec.size)
        path = root / spec.rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        target = f"{TARGET_PREFIX}/{spec.rel.removeprefix('patches/')}"
        patches.append(
            Patch(
                name=spec.name,
                kind=PatchKind.MODULE,
                file=RepoPath(spec.rel),
                sha256=Sha256(hashlib.sha256(data).hexdigest()),
                target=ContainerPath(target),
            )
        )
    digest = hashlib.sha256(b"bench-bundle").hexdigest()
    (root / "compose.yaml").write_text(COMPOSE_YAML.format(digest=digest), encoding="utf-8")
    (root / "entrypoint.sh").write_text(ENTRYPOINT, encoding="utf-8")
    (root / "entrypoint.sh").chmod(0o755)
    # A thousand `patchkit add` calls would be slow: write the lockfile through the
    # library, then let patchkit itself write SHA256SUMS.
    (root / "lockfile.toml").write_text(dumps(Lockfile(name="bench-bundle", patches=tuple(patches))), encoding="utf-8")
    out.progress("running `patchkit sums` to write SHA256SUMS")
    run_checked(PROG, [patchkit, "sums"], cwd=root)
    manifest_path.write_text(json.dumps({**want, "complete": True}, indent=2) + "\n")
    return Tree(root, False, time.perf_counter() - started, n, total)


# --------------------------------------------------------------------------- archives


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def member_names(data: bytes) -> list[str]:
    """The members of a .tar.gz, directories without their trailing slash."""
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data)), mode="r:") as tar:
        return [m.name.rstrip("/") for m in tar.getmembers()]


def member_bytes(data: bytes, name: str) -> bytes | None:
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data)), mode="r:") as tar:
        f = tar.extractfile(name)
        return f.read() if f is not None else None


def tar_bytes(data: bytes) -> int:
    return len(gzip.decompress(data))


# --------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    p.add_argument("--patches", type=int, default=1000, help="committed modules in the deployment (default 1000)")
    p.add_argument(
        "--workdir", type=Path, default=BENCH_DIR / "work", help="where the tree lives (default bench/work/)"
    )
    p.add_argument("--repeat", type=int, default=3, help="timed runs per candidate (default 3)")
    p.add_argument("--json", action="store_true", help="report to stderr, results as JSON to stdout")
    args = p.parse_args(argv)
    if args.patches < 1 or args.repeat < 1:
        p.error("--patches and --repeat must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    out = Out(sys.stderr if args.json else sys.stdout)
    missing_tools = [tool for tool in ("bash", "tar", "gzip") if shutil.which(tool) is None]
    if missing_tools:
        fail(PROG, f"needs {missing_tools[0]} on PATH")
    patchkit = find_patchkit(PROG)
    workdir = args.workdir.resolve()
    base = workdir / "bundle"
    tree = ensure_tree(base, args.patches, patchkit, out)
    outdir = base / "out"
    outdir.mkdir(parents=True, exist_ok=True)
    pk_out, tar_out = outdir / "patchkit.tar.gz", outdir / "tar.tar.gz"

    # Installed patchkit runs from bytecode: give it a cache even where PYTHONDONTWRITEBYTECODE
    # is set (as bench_sums.py does), and a bench-private patchkit cache.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(workdir / "pycache")
    env["PATCHKIT_CACHE"] = str(base / "cache")
    hint = f"\n(was the tree modified? delete {base} to rebuild it)"

    out.progress("patchkit check on the deployment")
    run_checked(PROG, [patchkit, "check"], tree.root, env=env, hint=hint)

    pk_argv = [patchkit, "bundle", "-o", str(pk_out)]
    out.progress("warm-up: patchkit bundle (untimed)")
    run_checked(PROG, pk_argv, tree.root, env=env, hint=hint)
    pk_data = pk_out.read_bytes()
    pk_names = member_names(pk_data)
    top = sorted({n.split("/", 1)[0] for n in pk_names})
    missing = [n for n in top if not (tree.root / n).exists()]
    if missing:
        fail(PROG, f"bundle members with no counterpart in the tree: {missing}")
    script = (
        "set -euo pipefail; out=$1; shift; "
        'tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - "$@" | gzip -n -9 > "$out"'
    )
    tar_argv = ["bash", "-c", script, "bench-tar", str(tar_out), *top]
    out.progress("warm-up: tar | gzip (untimed)")
    run_checked(PROG, tar_argv, tree.root)
    tar_data = tar_out.read_bytes()
    tar_names = member_names(tar_data)
    out.progress("patchkit verify-bundle on patchkit's output")
    run_checked(PROG, [patchkit, "verify-bundle", str(pk_out)], tree.root, env=env)

    repo = Repo(tree.root)
    in_process: list[bytes] = []

    def library() -> None:
        lock, data = repo.read_lockfile()
        in_process.append(build_bundle(repo, lock, data, {}))

    pk_digests: list[str] = [hashlib.sha256(pk_data).hexdigest()]
    tar_digests: list[str] = [hashlib.sha256(tar_data).hexdigest()]

    meter = Meter.find(workdir / "peak-rss.txt")

    def cli() -> Cost:
        cost = run_measured_ok(PROG, pk_argv, tree.root, env, meter, hint)
        pk_digests.append(sha256_file(pk_out))
        return cost

    def shell() -> Cost:
        cost = run_measured_ok(PROG, tar_argv, tree.root, None, meter)
        tar_digests.append(sha256_file(tar_out))
        return cost

    candidates: list[tuple[Timing, Callable[[], object]]] = [
        (Timing("patchkit", "a", "patchkit bundle -o OUT (CLI)"), cli),
        (Timing("tar_gzip", "b", "tar --sort=name ... | gzip -n -9"), shell),
        (Timing("library", "c", "build_bundle in process"), library),
    ]
    library()  # warm-up of row c
    for r in range(args.repeat):
        out.progress(f"timed round {r + 1}/{args.repeat}")
        for timing, run in candidates:
            # A subprocess row is timed by run_measured, without the output digest recorded after it.
            timing.record(run)

    identical = len(set(pk_digests)) == 1
    library_same = all(d == pk_data for d in in_process)
    if not identical:
        fail(PROG, f"patchkit bundle gave {len(set(pk_digests))} different outputs over {len(pk_digests)} runs")
    notes = comparison_notes(
        library_same=library_same,
        tar_runs_same=len(set(tar_digests)) == 1,
        pk_names=pk_names,
        tar_names=tar_names,
        sums_same=(tree.root / "SHA256SUMS").read_bytes() == member_bytes(pk_data, "SHA256SUMS"),
    )

    pk, tg, lib = (t for t, _ in candidates)
    results: dict[str, Any] = {
        "machine": {
            "cores": len(os.sched_getaffinity(0)),
            "python": sys.version.split()[0],
            "tar": tool_version("tar"),
            "gzip": tool_version("gzip"),
            "peak_rss": meter.method,
        },
        "patchkit": patchkit,
        "tree": {
            "root": str(tree.root),
            "patches": tree.files,
            "patch_bytes": tree.bytes,
            "reused": tree.reused,
            "build_seconds": round(tree.build_seconds, 2),
        },
        "cache": "warm",
        "repeat": args.repeat,
        "timings": {
            t.key: {
                "tag": t.tag,
                "label": t.label,
                "seconds": [round(s, 4) for s in t.seconds],
                "best_s": round(t.best, 4),
                "median_s": round(t.median, 4),
                "peak_rss_mib": round(t.peak_mib, 1) if t.peak_mib is not None else None,
            }
            for t in (pk, tg, lib)
        },
        "ratios": {
            "patchkit_over_tar_best": round(pk.best / tg.best, 2),
            "patchkit_over_tar_median": round(pk.median / tg.median, 2),
            "library_over_tar_best": round(lib.best / tg.best, 2),
        },
        "outputs": {
            "patchkit": {
                "bytes": len(pk_data),
                "tar_bytes": tar_bytes(pk_data),
                "members": len(pk_names),
                "sha256": pk_digests[0],
                "runs": len(pk_digests),
                "byte_identical": identical,
                "in_process_identical": library_same,
            },
            "tar_gzip": {
                "bytes": len(tar_data),
                "tar_bytes": tar_bytes(tar_data),
                "members": len(tar_names),
                "sha256": tar_digests[0],
                "runs": len(tar_digests),
                "byte_identical": len(set(tar_digests)) == 1,
            },
        },
        "notes": notes,
    }
    report(out, results)
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        sys.stdout.write("\n")
    return 0


def comparison_notes(
    *, library_same: bool, tar_runs_same: bool, pk_names: list[str], tar_names: list[str], sums_same: bool
) -> list[str]:
    """Where the outputs differ in ways worth a note (not a failure): in-process bytes, tar's runs, members, sums."""
    notes: list[str] = []
    if not library_same:
        notes.append("build_bundle in process gave other bytes than the CLI")
    if not tar_runs_same:
        notes.append("tar | gzip gave different outputs across runs")
    if set(pk_names) != set(tar_names):
        only_pk = sorted(set(pk_names) - set(tar_names))
        only_tar = sorted(set(tar_names) - set(pk_names))
        notes.append(f"member names differ: only in patchkit's {only_pk[:3]}, only in tar's {only_tar[:3]}")
    if not sums_same:
        notes.append(
            "the bundle's SHA256SUMS (generated: it also lists compose.yaml and entrypoint.sh) "
            "differs from the tree's, which tar packs"
        )
    return notes


def tool_version(tool: str) -> str | None:
    """The first line of ``tool --version``, or None when it prints nothing."""
    text = subprocess.run([tool, "--version"], capture_output=True, text=True, check=False).stdout
    return text.splitlines()[0] if text else None


def report(out: Out, r: dict[str, Any]) -> None:
    t, m, o = r["tree"], r["machine"], r["outputs"]
    out.line()
    out.line(f"patchkit bundle benchmark: {t['patches']} committed modules, WARM (page and bytecode caches)")
    built = "reused" if t["reused"] else f"built in {t['build_seconds']:.1f} s"
    out.line(f"tree      {t['root']} ({built}); patches {t['patch_bytes'] / 1e6:.1f} MB, 2-40 KB each")
    out.line(f"machine   {m['cores']} usable cores; Python {m['python']}; {m['tar']}; {m['gzip']}")
    out.line(f"patchkit  {r['patchkit']}")
    out.line()
    title = f"bundle (best/median of {r['repeat']})"
    out.line(f"   {title:<36} {'best s':>8} {'median s':>9} {'peak RSS':>10}")
    for row in r["timings"].values():
        rss = f"{row['peak_rss_mib']:6.1f} MiB" if row["peak_rss_mib"] is not None else "in process"
        out.line(f"{row['tag']:<2} {row['label']:<36} {row['best_s']:8.3f} {row['median_s']:9.3f} {rss:>10}")
    ra = r["ratios"]
    out.line(
        f"ratio a / b: {ra['patchkit_over_tar_best']:.2f}x (best), {ra['patchkit_over_tar_median']:.2f}x (median); "
        f"c / b: {ra['library_over_tar_best']:.2f}x (best)"
    )
    out.line()
    for key, label in (("patchkit", "patchkit"), ("tar_gzip", "tar|gzip")):
        x = o[key]
        same = "byte-identical" if x["byte_identical"] else "DIFFERENT"
        out.line(
            f"{label:<9} {x['bytes']:>10,} B .tar.gz ({x['tar_bytes']:,} B tar, {x['members']} members); "
            f"{same} over {x['runs']} runs; sha256 {x['sha256'][:16]}"
        )
    if o["patchkit"]["in_process_identical"]:
        out.line("          patchkit's in-process build_bundle gave the same bytes")
    for note in r["notes"]:
        out.line(f"note: {note}")


if __name__ == "__main__":
    sys.exit(main())
