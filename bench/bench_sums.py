#!/usr/bin/env python3
"""Benchmark: how fast ``patchkit sums --check`` verifies a deployment, against what the machine can do.

SPEC.md ("Scale and speed") promises that hashing runs at the machine's limit
(SHA-256 over all cores) and that the CLI starts fast. This script measures
both claims, side by side with the obvious alternative, in one run:

* It builds (or reuses) a deterministic deployment tree of about ``--size-gb``
  GB under ``--workdir``: a few large files (hundreds of MB) and a few
  thousand small ones (4 KiB to 1 MiB), all pinned as artifacts in a real
  ``lockfile.toml`` with a ``SHA256SUMS`` written by ``patchkit sums``.
* With a warm page cache (every candidate runs once, untimed, first; the
  figures therefore measure hashing and overhead, not the disk), it times,
  best and median of ``--repeat`` runs, interleaved round by round:

  a. ``patchkit sums --check`` as a subprocess (what a user or CI runs);
  b. ``sha256sum -c --strict --quiet SHA256SUMS`` (the obvious alternative);
  d. ``patchkit.hashing.sha256_many`` in this process, on all cores and on
     one thread, which separates CLI start-up and lockfile parsing from the
     hashing itself, and threading from per-core hashing speed.

* The ceiling (c) is OpenSSL's single-core SHA-256 rate, from
  ``openssl speed -evp sha256 -bytes 16384 -seconds 3``, times the number
  of usable cores. The project's target is at least 85% of that ceiling.
* Start-up: the median wall time of ``patchkit --help`` and of
  ``patchkit check`` on this repository's own deployment, next to
  ``python -c pass`` as the interpreter's floor.

Throughputs are in decimal GB/s (1 GB = 10**9 bytes, as OpenSSL reports
1000s of bytes) over every byte that SHA256SUMS lists, the lockfile included.

Run: ``python bench/bench_sums.py [--size-gb 2] [--workdir DIR] [--repeat 3] [--json]``.
With ``--json`` the human-readable report goes to stderr and a JSON document
to stdout.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import re
import shutil
import ssl
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# bench/benchlib.py: bench/ is sys.path[0] when this runs as a script (isort files it as third-party)
from benchlib import Out, Timing, fail, find_patchkit, run_checked, timed

from patchkit.hashing import sha256_many
from patchkit.lockfile import Artifact, Lockfile, dumps
from patchkit.values import RepoPath, Sha256

PROG = "bench_sums"  # prefixes its error messages
BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent

TREE_VERSION = 1  # bump when the layout or content generator changes, to force a rebuild
SEED = 0x5EED_5A45
KIB = 1024
MIB = 1024 * KIB
GB = 10**9
LARGE_SHARES = (0.25, 0.20, 0.15)  # of the total size; the rest goes to small files
LARGE_COUNT = 16  # files in the "large" shape
SMALL_MIN, SMALL_MAX = 4 * KIB, 1 * MIB
FILES_PER_DIR = 250
POOL_SIZE = 32 * MIB  # seeded random bytes that every file's content is cut from
WRITE_CHUNK = 8 * MIB
TARGET_SHARE = 0.85  # the project's target: patchkit >= 85% of cores x OpenSSL
OPENSSL_BLOCK = 16384

# --------------------------------------------------------------------------- the tree


@dataclass(frozen=True)
class FileSpec:
    rel: str
    size: int
    offset: int  # where in the random pool the file's content starts


def plan_tree(total: int, seed: int, shape: str = "mixed") -> list[FileSpec]:
    """The deterministic layout of ``total`` bytes.

    ``mixed``: a few large files, then thousands of small ones (per-file
    overhead dominates the small part). ``large``: sixteen equal files, the
    shape of a model shard directory (hashing throughput dominates).
    """
    rng = random.Random(seed)  # noqa: S311 - reproducible test data, not cryptography
    specs: list[FileSpec] = []
    if shape == "large":
        size = max(MIB, total // LARGE_COUNT // MIB * MIB)
        return [
            FileSpec(f"data/large/shard-{i:02d}.safetensors", size, rng.randrange(POOL_SIZE))
            for i in range(LARGE_COUNT)
        ]
    for i, share in enumerate(LARGE_SHARES):
        size = max(MIB, round(total * share / MIB) * MIB)
        specs.append(FileSpec(f"data/large/shard-{i:02d}.safetensors", size, rng.randrange(POOL_SIZE)))
    budget = total - sum(s.size for s in specs)
    lo, hi = math.log(SMALL_MIN), math.log(SMALL_MAX)
    n = 0
    while budget > 0:
        size = min(budget, max(1, int(math.exp(rng.uniform(lo, hi)))))
        rel = f"data/small/{n // FILES_PER_DIR:03d}/file-{n:05d}.bin"
        specs.append(FileSpec(rel, size, rng.randrange(POOL_SIZE)))
        budget -= size
        n += 1
    return specs


def _chunks(pool: memoryview, offset: int, size: int) -> Iterator[memoryview]:
    """``size`` bytes of the pool from ``offset`` on, wrapping around, in write-sized pieces."""
    pos = offset % len(pool)
    left = size
    while left > 0:
        n = min(left, len(pool) - pos, WRITE_CHUNK)
        yield pool[pos : pos + n]
        left -= n
        pos = (pos + n) % len(pool)


def write_file(path: Path, spec: FileSpec, pool: memoryview) -> str:
    """Write one file (its name, then pool bytes) and return its sha256."""
    h = hashlib.sha256()
    head = f"patchkit bench file {spec.rel}\n".encode()[: spec.size]
    with path.open("wb") as f:
        f.write(head)
        h.update(head)
        for piece in _chunks(pool, spec.offset, spec.size - len(head)):
            f.write(piece)
            h.update(piece)
    return h.hexdigest()


@dataclass(frozen=True)
class Tree:
    root: Path
    reused: bool
    build_seconds: float
    large: int
    small: int


def tree_manifest(size_gb: float, specs: list[FileSpec], shape: str) -> dict[str, Any]:
    return {
        "version": TREE_VERSION,
        "shape": shape,
        "seed": SEED,
        "size_gb": size_gb,
        "files": len(specs),
        "bytes": sum(s.size for s in specs),
    }


def tree_is_current(root: Path, manifest_path: Path, want: dict[str, Any], specs: list[FileSpec]) -> bool:
    try:
        have = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        return False
    if have != {**want, "complete": True}:
        return False
    if not (root / "lockfile.toml").is_file() or not (root / "SHA256SUMS").is_file():
        return False
    try:
        return all((root / s.rel).stat().st_size == s.size for s in specs)
    except OSError:
        return False


def ensure_tree(workdir: Path, size_gb: float, patchkit: str, out: Out, shape: str) -> Tree:
    """Reuse the tree when its manifest and every file size match; rebuild it otherwise."""
    specs = plan_tree(int(size_gb * GB), SEED, shape)
    large = sum(1 for s in specs if s.rel.startswith("data/large/"))
    root = workdir / "deployment"
    manifest_path = workdir / "deployment.json"
    want = tree_manifest(size_gb, specs, shape)
    if tree_is_current(root, manifest_path, want, specs):
        out.progress(f"reusing {root} ({want['bytes'] / GB:.2f} GB, {len(specs)} files)")
        return Tree(root, True, 0.0, large, len(specs) - large)

    if root.exists():
        if not manifest_path.exists():
            fail(PROG, f"{root} exists but was not made by this benchmark ({manifest_path} is missing); move it away")
        out.progress(f"removing stale {root}")
        shutil.rmtree(root)
    workdir.mkdir(parents=True, exist_ok=True)
    manifest_path.write_text(json.dumps({**want, "complete": False}, indent=2) + "\n")

    out.progress(f"building {root}: {want['bytes'] / GB:.2f} GB in {len(specs)} files")
    started = time.perf_counter()
    run_checked(PROG, [patchkit, "init", str(root), "--name", "bench-sums"], cwd=workdir)
    pool = memoryview(random.Random(SEED).randbytes(POOL_SIZE))  # noqa: S311 - test data
    artifacts: list[Artifact] = []
    for i, spec in enumerate(specs):
        path = root / spec.rel
        path.parent.mkdir(parents=True, exist_ok=True)
        digest = write_file(path, spec, pool)
        name = Path(spec.rel).stem.replace("_", "-").lower()
        artifacts.append(Artifact(name=name, file=RepoPath(spec.rel), sha256=Sha256(digest)))
        if (i + 1) % 1000 == 0:
            out.progress(f"  {i + 1}/{len(specs)} files written")
    # Pinning thousands of files with `patchkit add` one by one is too slow: write the
    # lockfile through the library, then let patchkit itself write SHA256SUMS.
    lock = Lockfile(name="bench-sums", artifacts=tuple(artifacts))
    (root / "lockfile.toml").write_text(dumps(lock), encoding="utf-8")
    out.progress("running `patchkit sums` to write SHA256SUMS")
    run_checked(PROG, [patchkit, "sums"], cwd=root)
    manifest_path.write_text(json.dumps({**want, "complete": True}, indent=2) + "\n")
    return Tree(root, False, time.perf_counter() - started, large, len(specs) - large)


def listed_files(root: Path) -> dict[Path, str]:
    """Every file SHA256SUMS lists (plain names only, as this tree has), with its digest."""
    out: dict[Path, str] = {}
    for line in (root / "SHA256SUMS").read_text(encoding="utf-8").splitlines():
        digest, name = line.split("  ", 1)
        out[root / name] = digest
    return out


# --------------------------------------------------------------------------- timing


def subprocess_runner(argv: Sequence[str], cwd: Path, env: dict[str, str] | None = None) -> Callable[[], object]:
    hint = f"\n(was the tree modified? delete {cwd} and {cwd}.json to rebuild it)"

    def run() -> object:
        return run_checked(PROG, argv, cwd, env=env, hint=hint)

    return run


def library_runner(paths: list[Path], jobs: int) -> Callable[[], object]:
    def run() -> object:
        return sha256_many(paths, jobs=jobs)

    return run


def verify_digests(label: str, got: dict[Path, str | OSError], expected: dict[Path, str]) -> None:
    bad = [str(p) for p, digest in expected.items() if got.get(p) != digest]
    if bad:
        fail(PROG, f"{label}: {len(bad)} digests differ from SHA256SUMS, e.g. {bad[0]}")


@dataclass(frozen=True)
class Startup:
    label: str
    runs: int
    median_ms: float
    min_ms: float
    exit_code: int


def startup(label: str, argv: Sequence[str], cwd: Path, runs: int) -> Startup:
    """Wall time of ``runs`` runs of a short command, after one untimed run."""
    first = subprocess.run(argv, cwd=cwd, capture_output=True, check=False)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, cwd=cwd, capture_output=True, check=False)
        times.append(time.perf_counter() - started)
    return Startup(label, runs, statistics.median(times) * 1000, min(times) * 1000, first.returncode)


def bytecode_note(patchkit_dir: Path) -> str | None:
    """Why start-up may include compiling patchkit's own modules, if it does."""
    if os.environ.get("PYTHONDONTWRITEBYTECODE") and not (patchkit_dir / "__pycache__").is_dir():
        return (
            "PYTHONDONTWRITEBYTECODE is set and patchkit/ has no __pycache__: "
            "every start compiles patchkit's modules from source"
        )
    return None


# --------------------------------------------------------------------------- openssl


def parse_openssl_speed(text: str, block: int = OPENSSL_BLOCK) -> float:
    """Bytes per second for ``block``-byte blocks from ``openssl speed`` output.

    Reads the result table (a ``type ... <n> bytes`` header, then a row of
    ``<rate>k`` values in 1000s of bytes/s); falls back to the progress line
    ``Doing sha256 [ops] for 3s on 16384 size blocks: N sha256['s|ops] in T s``.
    """
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("type"):
            continue
        columns = re.findall(r"(\d+) bytes", line)
        if str(block) not in columns:
            continue
        for row in lines[i + 1 :]:
            rates = re.findall(r"(\d+(?:\.\d+)?)k(?=\s|$)", row)
            if len(rates) == len(columns):
                return float(rates[columns.index(str(block))]) * 1000
    m = re.search(rf"on {block} size blocks?: (\d+) .*? in (\d+(?:\.\d+)?)\s*s", text)
    if m and float(m.group(2)) > 0:
        return int(m.group(1)) * block / float(m.group(2))
    raise ValueError(f"no rate for {block}-byte blocks in openssl speed output:\n{text}")


@dataclass(frozen=True)
class OpenSSL:
    version: str
    core_rate: float  # bytes/s on one core


def openssl_rate() -> OpenSSL | None:
    exe = shutil.which("openssl")
    if exe is None:
        return None
    version = subprocess.run([exe, "version"], capture_output=True, text=True, check=False).stdout.strip()
    argv = [exe, "speed", "-evp", "sha256", "-bytes", str(OPENSSL_BLOCK), "-seconds", "3"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        Out.progress(f"`{' '.join(argv)}` exited {done.returncode}; no ceiling")
        return None
    try:
        return OpenSSL(version, parse_openssl_speed(done.stdout + "\n" + done.stderr))
    except ValueError as e:
        Out.progress(str(e))
        return None


# --------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    p.add_argument("--size-gb", type=float, default=2.0, help="size of the deployment tree in GB (default 2)")
    p.add_argument(
        "--workdir", type=Path, default=BENCH_DIR / "work", help="where the tree lives (default bench/work/)"
    )
    p.add_argument("--repeat", type=int, default=3, help="timed runs per candidate (default 3)")
    p.add_argument(
        "--shape",
        choices=("mixed", "large"),
        default="mixed",
        help="mixed: 3 large files and thousands of small ones (default); large: 16 equal files",
    )
    p.add_argument("--json", action="store_true", help="report to stderr, results as JSON to stdout")
    args = p.parse_args(argv)
    if args.size_gb <= 0 or args.repeat < 1:
        p.error("--size-gb must be > 0 and --repeat >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    out = Out(sys.stderr if args.json else sys.stdout)
    cores = len(os.sched_getaffinity(0))
    patchkit = find_patchkit(PROG)
    sha256sum = shutil.which("sha256sum")

    tree = ensure_tree(args.workdir.resolve() / args.shape, args.size_gb, patchkit, out, args.shape)
    expected = listed_files(tree.root)
    paths = list(expected)
    total = sum(p.stat().st_size for p in paths)

    # An installed patchkit runs from compiled bytecode. Where the environment
    # disables bytecode writing (PYTHONDONTWRITEBYTECODE), every start
    # recompiles patchkit from source: row a runs with a bytecode cache of its
    # own (PYTHONPYCACHEPREFIX, filled by the warm-up), row a0 as-is.
    cached_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cached_env["PYTHONPYCACHEPREFIX"] = str(args.workdir.resolve() / "pycache")
    candidates: list[tuple[Timing, Callable[[], object]]] = [
        (
            Timing("patchkit", "a", "patchkit sums --check (CLI)"),
            subprocess_runner([patchkit, "sums", "--check"], tree.root, cached_env),
        ),
    ]
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        candidates.append(
            (
                Timing("patchkit_nocache", "a0", "  same, no bytecode cache (as env)"),
                subprocess_runner([patchkit, "sums", "--check"], tree.root),
            )
        )
    if sha256sum is not None:
        candidates.append(
            (
                Timing("sha256sum", "b", "sha256sum -c --strict --quiet"),
                subprocess_runner([sha256sum, "-c", "--strict", "--quiet", "SHA256SUMS"], tree.root),
            )
        )
    candidates += [
        (Timing("library", "d", f"sha256_many, {cores} threads"), library_runner(paths, cores)),
        (Timing("library_1", "d1", "sha256_many, 1 thread"), library_runner(paths, 1)),
    ]

    out.progress("warm-up: one untimed pass of every candidate (also checks they all pass)")
    for timing, run in candidates:
        result = run()
        if isinstance(result, dict):  # an in-process run: its digests must match too
            verify_digests(timing.label, result, expected)
    for r in range(args.repeat):
        out.progress(f"timed round {r + 1}/{args.repeat}")
        for timing, run in candidates:
            timing.seconds.append(timed(run))

    out.progress("openssl speed -evp sha256 -bytes 16384 -seconds 3")
    ossl = openssl_rate()
    ceiling = ossl.core_rate * cores if ossl else None

    out.progress("start-up times")
    starts = [
        startup("python -c pass", [sys.executable, "-c", "pass"], REPO_ROOT, 20),
        startup("patchkit --help", [patchkit, "--help"], REPO_ROOT, 20),
        startup(f"patchkit check ({REPO_ROOT})", [patchkit, "check"], REPO_ROOT, 10),
    ]

    by_key = {t.key: t for t, _ in candidates}

    def rate(key: str) -> float:
        return total / by_key[key].best

    pk = rate("patchkit")
    results: dict[str, Any] = {
        "machine": {
            "cores": cores,
            "python": sys.version.split()[0],
            "python_openssl": ssl.OPENSSL_VERSION,
            "openssl_cli": ossl.version if ossl else None,
            "openssl_core_gbps": ossl.core_rate / GB if ossl else None,
            "ceiling_gbps": ceiling / GB if ceiling else None,
        },
        "patchkit": patchkit,
        "tree": {
            "root": str(tree.root),
            "shape": args.shape,
            "files": len(paths),
            "large_files": tree.large,
            "small_files": tree.small,
            "bytes": total,
            "reused": tree.reused,
            "build_seconds": round(tree.build_seconds, 2),
        },
        "cache": "warm",
        "repeat": args.repeat,
        "hashing": {
            t.key: {
                "tag": t.tag,
                "label": t.label,
                "seconds": [round(s, 4) for s in t.seconds],
                "best_s": round(t.best, 4),
                "median_s": round(t.median, 4),
                "gbps": round(total / t.best / GB, 3),
                "share_of_ceiling": round(total / t.best / ceiling, 4) if ceiling else None,
            }
            for t, _ in candidates
        },
        "ratios": {
            "patchkit_over_sha256sum": round(pk / rate("sha256sum"), 2) if sha256sum else None,
            "patchkit_share_of_ceiling": round(pk / ceiling, 4) if ceiling else None,
            "library_share_of_ceiling": round(rate("library") / ceiling, 4) if ceiling else None,
            "library_1_share_of_core": round(rate("library_1") / ossl.core_rate, 4) if ossl else None,
            "cli_overhead_s": round(by_key["patchkit"].best - by_key["library"].best, 4),
            "target_share": TARGET_SHARE,
            "target_met": (pk / ceiling >= TARGET_SHARE) if ceiling else None,
        },
        "startup": [{**asdict(s), "median_ms": round(s.median_ms, 1), "min_ms": round(s.min_ms, 1)} for s in starts],
        "notes": [n for n in (bytecode_note(REPO_ROOT / "patchkit"),) if n],
    }
    report(out, results)
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        sys.stdout.write("\n")
    return 0


def report(out: Out, r: dict[str, Any]) -> None:
    m, t, ratios = r["machine"], r["tree"], r["ratios"]
    ceiling = m["ceiling_gbps"]
    out.line()
    out.line("patchkit SHA256SUMS benchmark: WARM page cache (every candidate ran once, untimed, first)")
    built = "reused" if t["reused"] else f"built in {t['build_seconds']:.1f} s"
    out.line(f"tree      {t['root']} ({built})")
    out.line(
        f"          {t['files']} files in SHA256SUMS ({t['large_files']} large, {t['small_files']} small, "
        f"lockfile.toml), {t['bytes'] / GB:.3f} GB"
    )
    out.line(f"machine   {m['cores']} usable cores; Python {m['python']} with {m['python_openssl']}")
    out.line(f"openssl   {m['openssl_cli'] or 'not found'}")
    out.line(f"patchkit  {r['patchkit']}")
    out.line()
    title = f"hashing (best/median of {r['repeat']})"
    out.line(f"   {title:<37} {'best s':>8} {'median s':>9} {'GB/s':>7} {'of c':>7}")
    for h in r["hashing"].values():
        share = f"{h['share_of_ceiling']:7.1%}" if ceiling else f"{'n/a':>7}"
        out.line(f"{h['tag']:<2} {h['label']:<37} {h['best_s']:8.3f} {h['median_s']:9.3f} {h['gbps']:7.2f} {share}")
    if ceiling:
        label = f"ceiling: {m['cores']} cores x {m['openssl_core_gbps']:.2f} GB/s"
        out.line(f"c  {label:<37} {'':8} {'':9} {ceiling:7.2f} {1:7.1%}")
    else:
        out.line("c  ceiling: `openssl speed` unavailable")
    out.line()
    rows: list[tuple[str, str]] = []
    if ratios["patchkit_over_sha256sum"] is not None:
        rows.append(("patchkit / sha256sum (throughput)", f"{ratios['patchkit_over_sha256sum']:.2f}x"))
    if ratios["patchkit_share_of_ceiling"] is not None:
        verdict = "met" if ratios["target_met"] else "MISSED"
        target = f"target >= {ratios['target_share']:.0%}: {verdict}"
        rows += [
            ("patchkit / ceiling", f"{ratios['patchkit_share_of_ceiling']:.1%}  ({target})"),
            (f"sha256_many ({m['cores']} threads) / ceiling", f"{ratios['library_share_of_ceiling']:.1%}"),
            ("sha256_many (1 thread) / one core", f"{ratios['library_1_share_of_core']:.1%}"),
        ]
    rows.append(("CLI overhead, a - d (best)", f"{ratios['cli_overhead_s'] * 1000:.0f} ms"))
    out.line("ratios (from best times)")
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        out.line(f"  {label:<{width}} : {value}")
    out.line()
    out.line("start-up (wall time of a subprocess)")
    width = max(len(s["label"]) for s in r["startup"])
    for s in r["startup"]:
        note = "" if s["exit_code"] == 0 else f"  (exit {s['exit_code']})"
        out.line(
            f"  {s['label']:<{width}}  median {s['median_ms']:6.1f} ms  min {s['min_ms']:6.1f} ms  "
            f"(n={s['runs']}){note}"
        )
    for note in r["notes"]:
        out.line(f"note: {note}")


if __name__ == "__main__":
    sys.exit(main())
