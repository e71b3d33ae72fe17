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

  a. ``patchkit sums --check`` as a subprocess (what a user or CI runs),
     from compiled bytecode; a0 the same as the environment has it;
  f. the plain baseline: ``hashlib.file_digest`` on one thread per core, a
     ten-line script (``benchlib.FILE_DIGEST_SCRIPT``);
  b. ``sha256sum -c --strict --quiet SHA256SUMS`` (the obvious alternative);
  o. OpenSSL's own C tool end to end: ``openssl dgst -sha256`` over the
     same files, split by size over one process per core. It starts,
     opens and reads every file from the page cache as any hasher must, so
     it shows what end to end costs over ``openssl speed`` (c), which
     hashes one buffer already in the CPU's cache;
  d. ``patchkit.core.hashing.sha256_many`` in this process, on all cores and on
     one thread, which separates CLI start-up and lockfile parsing from the
     hashing itself, and threading from per-core hashing speed.

  Every subprocess row also gets its CPU time and peak RSS.

* The ceiling (c) is measured in every round, ``openssl speed -multi <cores>
  -evp sha256``: its bytes over the CPU seconds its processes used, times
  the cores, which other processes hardly move (the best round counts). A round where the
  library on all cores was hardly faster than on one thread (d/d1) had a
  core taken by another process: it is reported and left out of the shares
  of the ceiling instead of printing a halved percentage. The project's
  targets: at least 90% of the ceiling end to end, at least the speed of
  the file_digest baseline, and a peak RSS under 64 MiB.
* The bound (r): the page cache's copy. Every reader that is not a memory
  map copies each byte out of the page cache before it hashes it; OpenSSL's
  ceiling hashes one buffer already in the CPU's cache. Each round also
  reads every listed file once, without hashing, on one thread into a
  page-aligned 1 MiB buffer: bytes over the CPU seconds that took, times
  the cores. Copying then hashing costs 1/c + 1/r per byte, so
  ``c*r/(c+r)`` is the most any such reader reaches (the best round's r
  counts), reported beside the target, which stays 90% of c.
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
import functools
import hashlib
import json
import math
import mmap
import os
import random
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
from benchlib import (
    FILE_DIGEST_SCRIPT,
    Cost,
    Meter,
    Out,
    Timing,
    cached_env,
    fail,
    find_patchkit,
    held_core,
    openssl_ceiling,
    openssl_version,
    run_checked,
    run_measured_ok,
)

from patchkit.core.hashing import sha256_many
from patchkit.core.values import RepoPath, Sha256
from patchkit.lockfile.model import Artifact, Lockfile
from patchkit.lockfile.writer import dumps

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
TARGET_SHARE = 0.90  # the project's target: patchkit >= 90% of cores x OpenSSL, end to end
TARGET_PEAK_MIB = 64  # and a peak RSS under 64 MiB whatever the file sizes

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


def library_runner(paths: list[Path], jobs: int) -> Callable[[], object]:
    def run() -> object:
        return sha256_many(paths, jobs=jobs)

    return run


READ_BUFFER = 1024 * 1024  # row r's read size; page-aligned, so the kernel copies at its best


def read_rate(paths: list[Path], cores: int) -> float:
    """Row r: bytes per CPU second of copying every file out of the page cache (no hashing), times ``cores``.

    Per CPU second, like the ceiling, so another process on a core hardly
    moves it. One thread: reading is per core work, as hashing is.
    """
    buf = memoryview(mmap.mmap(-1, READ_BUFFER))
    done = 0
    started = time.process_time()
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            while n := os.readv(fd, [buf]):
                done += n
        finally:
            os.close(fd)
    cpu = time.process_time() - started
    buf.release()
    return done / cpu * cores if cpu > 0 else math.inf


def bound(ceiling: float, reads: float) -> float:
    """What a reader that copies each byte then hashes it reaches at most: 1/c + 1/r seconds per byte."""
    return ceiling * reads / (ceiling + reads)


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


def startup(label: str, argv: Sequence[str], cwd: Path, runs: int, env: dict[str, str] | None = None) -> Startup:
    """Wall time of ``runs`` runs of a short command, after one untimed run."""
    first = subprocess.run(argv, cwd=cwd, capture_output=True, check=False, env=env)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, cwd=cwd, capture_output=True, check=False, env=env)
        times.append(time.perf_counter() - started)
    return Startup(label, runs, statistics.median(times) * 1000, min(times) * 1000, first.returncode)


def bytecode_note(patchkit_dir: Path) -> str | None:
    """Why row a0 compiles patchkit's own modules at every start, if it does."""
    if os.environ.get("PYTHONDONTWRITEBYTECODE") and not (patchkit_dir / "__pycache__").is_dir():
        return (
            "PYTHONDONTWRITEBYTECODE is set and patchkit/ has no __pycache__: "
            "row a0 compiles patchkit's modules from source at every start"
        )
    return None


@dataclass
class Round:
    """What one round measured besides the candidates: the ceiling then, and whether a core was taken."""

    ceiling: float | None  # bytes/s, openssl -multi over all cores, per CPU second (Ceiling.total)
    available: float | None  # what the cores gave openssl in wall time then (Ceiling.wall_total)
    reads: float  # bytes/s, copying the files out of the page cache, per CPU second x cores (row r)
    speedup: float  # library on all cores over library on one thread
    held: bool


def best_quiet(timing: Timing, rounds: list[Round]) -> tuple[float, bool]:
    """The best time over the rounds where no other process held a core; over all rounds (flagged) if none was."""
    quiet = [s for s, r in zip(timing.seconds, rounds, strict=True) if not r.held]
    return (min(quiet), False) if quiet else (timing.best, True)


# --------------------------------------------------------------------------- main


def baseline_env(env: dict[str, str], baseline: Path | None) -> dict[str, str] | None:
    """The environment that runs the patchkit of the source tree ``baseline`` instead, or None."""
    if baseline is None:
        return None
    if not (baseline / "patchkit" / "__init__.py").is_file():
        fail(PROG, f"--baseline {baseline}: no patchkit/__init__.py there")
    return {**env, "PYTHONPATH": str(baseline.resolve())}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    p.add_argument("--size-gb", type=float, default=2.0, help="size of the deployment tree in GB (default 2)")
    p.add_argument(
        "--workdir", type=Path, default=BENCH_DIR / "work", help="where the tree lives (default bench/work/)"
    )
    p.add_argument("--repeat", type=int, default=3, help="timed rounds (default 3)")
    p.add_argument(
        "--shape",
        choices=("mixed", "large"),
        default="mixed",
        help="mixed: 3 large files and thousands of small ones (default); large: 16 equal files",
    )
    p.add_argument("--json", action="store_true", help="report to stderr, results as JSON to stdout")
    p.add_argument(
        "--baseline",
        type=Path,
        metavar="DIR",
        help="another patchkit source tree (e.g. a `git archive` of main) timed beside this one, rows a' and s'",
    )
    args = p.parse_args(argv)
    if args.size_gb <= 0 or args.repeat < 1:
        p.error("--size-gb must be > 0 and --repeat >= 1")
    return args


OPENSSL_SCRIPT = """\
openssl=$1; shift; pids=""
for part in "$@"; do xargs -0 -a "$part" "$openssl" dgst -sha256 -r > "$part.out" & pids="$pids $!"; done
rc=0; for pid in $pids; do wait "$pid" || rc=1; done; exit $rc
"""
"""Row o: ``openssl dgst`` over each list of NUL-separated names (``$2...``), all lists at once, one process each."""


def openssl_parts(root: Path, paths: list[Path], cores: int, workdir: Path) -> list[Path]:
    """Split ``paths`` into ``cores`` lists of about equal bytes (largest file first, to the lightest list)."""
    loads = [[0, i, []] for i in range(cores)]
    for p in sorted(paths, key=lambda p: -p.stat().st_size):
        lightest = min(loads)
        lightest[0] += p.stat().st_size
        lightest[2].append(str(p.relative_to(root)))
    parts = []
    for _, i, names in loads:
        part = workdir / f"openssl-part-{i}"
        part.write_bytes(b"".join(os.fsencode(n) + b"\0" for n in names))
        parts.append(part)
    return parts


def checked_openssl(run: Callable[[], Cost], parts: list[Path], root: Path) -> Callable[[], Cost]:
    """``run``, then (untimed) every digest openssl printed compared with SHA256SUMS: the row must hash every file."""
    expected = {str(p.relative_to(root)): digest for p, digest in listed_files(root).items()}

    def checked() -> Cost:
        cost = run()
        got = {}
        for part in parts:
            for line in Path(f"{part}.out").read_text(encoding="utf-8").splitlines():
                digest, name = line.split(" *", 1)
                got[name] = digest
        if got != expected:
            differ = sum(got.get(name) != digest for name, digest in expected.items())
            fail(PROG, f"openssl dgst: {differ} of {len(expected)} digests differ from SHA256SUMS")
        return cost

    return checked


def make_candidates(
    root: Path,
    patchkit: str,
    sha256sum: str | None,
    paths: list[Path],
    cores: int,
    env: dict[str, str],
    meter: Meter,
    hint: str,
    workdir: Path,
) -> list[tuple[Timing, Callable[[], object]]]:
    """The rows: patchkit (also without bytecode when the environment says so), file_digest, sha256sum,
    openssl dgst, library."""

    def child(argv: Sequence[str], child_env: dict[str, str] | None = None) -> Callable[[], Cost]:
        return lambda: run_measured_ok(PROG, argv, root, env if child_env is None else child_env, meter, hint)

    candidates: list[tuple[Timing, Callable[[], object]]] = [
        (Timing("patchkit", "a", "patchkit sums --check (CLI)"), child([patchkit, "sums", "--check"])),
    ]
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        candidates.append(
            (
                Timing("patchkit_nocache", "a0", "  same, no bytecode cache (as env)"),
                child([patchkit, "sums", "--check"], dict(os.environ)),
            )
        )
    candidates.append(
        (
            Timing("file_digest", "f", f"hashlib.file_digest, {cores} threads"),
            child([sys.executable, "-c", FILE_DIGEST_SCRIPT, "SHA256SUMS", str(cores)]),
        )
    )
    if sha256sum is not None:
        candidates.append(
            (
                Timing("sha256sum", "b", "sha256sum -c --strict --quiet"),
                child([sha256sum, "-c", "--strict", "--quiet", "SHA256SUMS"]),
            )
        )
    openssl = shutil.which("openssl")
    if openssl is not None:
        parts = openssl_parts(root, paths, cores, workdir)
        candidates.append(
            (
                Timing("openssl_dgst", "o", f"openssl dgst -sha256, {cores} processes"),
                checked_openssl(child(["sh", "-c", OPENSSL_SCRIPT, "sh", openssl, *map(str, parts)]), parts, root),
            )
        )
    candidates += [
        (Timing("library", "d", f"sha256_many, {cores} threads"), library_runner(paths, cores)),
        (Timing("library_1", "d1", "sha256_many, 1 thread"), library_runner(paths, 1)),
    ]
    return candidates


def timed_round(
    r: int,
    repeat: int,
    candidates: list[tuple[Timing, Callable[[], object]]],
    by_key: dict[str, Timing],
    paths: list[Path],
    out: Out,
) -> Round:
    """One round: openssl's ceiling, the page cache's reads, then every candidate once; how much the threads helped,
    whether a core was held."""
    cores = len(os.sched_getaffinity(0))
    out.progress(f"round {r + 1}/{repeat}: openssl speed -multi {cores}, reads alone, then every candidate")
    ceiling = openssl_ceiling(cores)
    reads = read_rate(paths, cores)
    for timing, run in candidates:
        timing.record(run)
    d, d1 = by_key["library"].seconds[-1], by_key["library_1"].seconds[-1]
    return Round(
        ceiling.total if ceiling else None,
        ceiling.wall_total if ceiling else None,
        reads,
        d1 / d,
        held_core(d, d1, cores),
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    out = Out(sys.stderr if args.json else sys.stdout)
    cores = len(os.sched_getaffinity(0))
    patchkit = find_patchkit(PROG)
    sha256sum = shutil.which("sha256sum")
    workdir = args.workdir.resolve()
    meter = Meter.find(workdir / "peak-rss.txt")

    tree = ensure_tree(workdir / args.shape, args.size_gb, patchkit, out, args.shape)
    expected = listed_files(tree.root)
    paths = list(expected)
    total = sum(p.stat().st_size for p in paths)

    # Row a runs as an installed patchkit does, from compiled bytecode (see benchlib.cached_env);
    # row a0, only where the environment disables bytecode, as the environment has it.
    env = cached_env(workdir / "pycache")
    hint = f"\n(was the tree modified? delete {tree.root} and {tree.root}.json to rebuild it)"

    candidates = make_candidates(tree.root, patchkit, sha256sum, paths, cores, env, meter, hint, workdir)
    base_env = baseline_env(env, args.baseline)
    if base_env is not None:
        argv = [patchkit, "sums", "--check"]
        row = Timing("baseline", "a'", f"  same, {args.baseline.name} (baseline)")
        candidates.insert(1, (row, functools.partial(run_measured_ok, PROG, argv, tree.root, base_env, meter, hint)))

    out.progress("warm-up: one untimed pass of every candidate (also checks they all pass)")
    for timing, run in candidates:
        result = run()
        if isinstance(result, dict):  # an in-process run: its digests must match too
            verify_digests(timing.label, result, expected)
    by_key = {t.key: t for t, _ in candidates}
    load_before = os.getloadavg()[0]
    rounds = [timed_round(r, args.repeat, candidates, by_key, paths, out) for r in range(args.repeat)]
    load_after = os.getloadavg()[0]

    out.progress("start-up times")
    starts = [
        startup("python -c pass", [sys.executable, "-c", "pass"], REPO_ROOT, 20),
        startup("patchkit --help", [patchkit, "--help"], REPO_ROOT, 20, env),
        startup(f"patchkit check ({REPO_ROOT})", [patchkit, "check"], REPO_ROOT, 10, env),
        startup("patchkit sums --check (its 11 files)", [patchkit, "sums", "--check"], REPO_ROOT, 20, env),
    ]
    if base_env is not None:
        starts.append(startup("  same, baseline", [patchkit, "sums", "--check"], REPO_ROOT, 20, base_env))

    def rate(key: str) -> float:
        return total / by_key[key].best

    ceilings = [r.ceiling for r in rounds if r.ceiling]
    ceiling = max(ceilings) if ceilings else None
    reads = max(r.reads for r in rounds)
    limit = bound(ceiling, reads) if ceiling else None
    quiet = [r for r in rounds if not r.held]

    def share(key: str) -> float | None:
        """Throughput in the best quiet round over the ceiling (the best round's)."""
        return total / best_quiet(by_key[key], rounds)[0] / ceiling if ceiling else None

    def cpu_share(key: str) -> float | None:
        """Bytes per CPU second over one core's rate: the work done, unaffected by other processes."""
        t = by_key[key]
        return total / t.best_cpu / (ceiling / cores) if ceiling and t.best_cpu else None

    pk_flagged = best_quiet(by_key["patchkit"], rounds)[1]
    pk_share = share("patchkit")
    pk_over_fd = rate("patchkit") / rate("file_digest")
    results: dict[str, Any] = {
        "machine": {
            "cores": cores,
            "python": sys.version.split()[0],
            "python_openssl": ssl.OPENSSL_VERSION,
            "openssl_cli": openssl_version(),
            "load_average_1min": [round(load_before, 2), round(load_after, 2)],
            "peak_rss": meter.method,
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
        "rounds": [
            {
                "openssl_gbps": round(r.ceiling / GB, 3) if r.ceiling else None,
                "openssl_wall_gbps": round(r.available / GB, 3) if r.available else None,
                "reads_gbps": round(r.reads / GB, 3),
                "threads_speedup": round(r.speedup, 2),
                "core_held_by_another_process": r.held,
            }
            for r in rounds
        ],
        "hashing": {
            t.key: {
                "tag": t.tag,
                "label": t.label,
                "seconds": [round(s, 4) for s in t.seconds],
                "best_s": round(t.best, 4),
                "median_s": round(t.median, 4),
                "gbps": round(total / t.best / GB, 3),
                "cpu_s": [round(c, 4) for c in t.cpu],
                "peak_rss_mib": round(t.peak_mib, 1) if t.peak_mib is not None else None,
                "share_of_ceiling": round(s, 4) if (s := share(t.key)) is not None else None,
                "cpu_share_of_core": round(c, 4) if (c := cpu_share(t.key)) is not None else None,
            }
            for t, _ in candidates
        },
        "ratios": {
            "quiet_rounds": len(quiet),
            "ceiling_gbps": round(ceiling / GB, 3) if ceiling else None,
            "reads_gbps": round(reads / GB, 3),
            "bound_gbps": round(limit / GB, 3) if limit else None,
            "bound_share_of_ceiling": round(limit / ceiling, 4) if limit and ceiling else None,
            "patchkit_share_of_bound": (
                round(pk_share * ceiling / limit, 4) if pk_share is not None and ceiling and limit else None
            ),
            "patchkit_over_file_digest": round(pk_over_fd, 3),
            "patchkit_over_file_digest_cpu": round(
                (by_key["file_digest"].best_cpu or 0) / (by_key["patchkit"].best_cpu or 1), 3
            ),
            "patchkit_over_sha256sum": round(rate("patchkit") / rate("sha256sum"), 2) if sha256sum else None,
            "patchkit_over_openssl_dgst": (
                round(rate("patchkit") / rate("openssl_dgst"), 3) if "openssl_dgst" in by_key else None
            ),
            "patchkit_share_of_ceiling": round(pk_share, 4) if pk_share is not None else None,
            "share_from_contended_rounds": pk_flagged,
            "cli_overhead_s": round(by_key["patchkit"].best - by_key["library"].best, 4),
            "patchkit_over_baseline": round(rate("patchkit") / rate("baseline"), 3) if "baseline" in by_key else None,
            "target_share": TARGET_SHARE,
            "target_peak_rss_mib": TARGET_PEAK_MIB,
            "target_met": (
                pk_share >= TARGET_SHARE and not pk_flagged and pk_over_fd >= 1.0 if pk_share is not None else None
            ),
            "peak_target_met": (by_key["patchkit"].peak_mib or 0) < TARGET_PEAK_MIB,
        },
        "startup": [{**asdict(s), "median_ms": round(s.median_ms, 1), "min_ms": round(s.min_ms, 1)} for s in starts],
        "notes": [n for n in (bytecode_note(REPO_ROOT / "patchkit"),) if n],
    }
    report(out, results)
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        sys.stdout.write("\n")
    return 0


def ratio_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    """The report's ratios, each a label and its value with the target and verdict."""
    ratios = r["ratios"]
    rows: list[tuple[str, str]] = [
        ("patchkit / file_digest (throughput)", f"{ratios['patchkit_over_file_digest']:.2f}x  (target >= 1.00x)"),
        ("patchkit / file_digest (CPU time)", f"{ratios['patchkit_over_file_digest_cpu']:.2f}x"),
    ]
    if ratios["patchkit_over_sha256sum"] is not None:
        rows.append(("patchkit / sha256sum (throughput)", f"{ratios['patchkit_over_sha256sum']:.2f}x"))
    if ratios["patchkit_over_openssl_dgst"] is not None:
        rows.append(("patchkit / openssl dgst (throughput)", f"{ratios['patchkit_over_openssl_dgst']:.2f}x"))
    if ratios["patchkit_share_of_ceiling"] is not None:
        if ratios["share_from_contended_rounds"]:
            value = (
                f"not measured: another process held a core in every round "
                f"(best contended round {ratios['patchkit_share_of_ceiling']:.1%}); run again on a quiet machine"
            )
        else:
            verdict = "met" if ratios["patchkit_share_of_ceiling"] >= ratios["target_share"] else "MISSED"
            value = (
                f"{ratios['patchkit_share_of_ceiling']:.1%}  (target >= {ratios['target_share']:.0%}: {verdict}; "
                f"{ratios['quiet_rounds']} quiet round(s) of {r['repeat']})"
            )
        rows.append(("patchkit / ceiling", value))
        if ratios["patchkit_share_of_bound"] is not None and not ratios["share_from_contended_rounds"]:
            rows.append(("patchkit / bound (copy then hash)", f"{ratios['patchkit_share_of_bound']:.1%}"))
    peak = r["hashing"]["patchkit"]["peak_rss_mib"]
    verdict = "met" if ratios["peak_target_met"] else "MISSED"
    rows.append(("patchkit peak RSS", f"{peak:.1f} MiB  (target < {ratios['target_peak_rss_mib']} MiB: {verdict})"))
    rows.append(("CLI overhead, a - d (best)", f"{ratios['cli_overhead_s'] * 1000:.0f} ms"))
    if ratios["patchkit_over_baseline"] is not None:
        rows.append(("patchkit / baseline (throughput)", f"{ratios['patchkit_over_baseline']:.2f}x"))
        base = r["hashing"]["baseline"]
        if "openssl_dgst" in r["hashing"]:
            over = r["hashing"]["openssl_dgst"]["best_s"] / base["best_s"]
            rows.append(("baseline / openssl dgst (throughput)", f"{over:.2f}x"))
    return rows


def report(out: Out, r: dict[str, Any]) -> None:
    m, t, ratios = r["machine"], r["tree"], r["ratios"]
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
    out.line(
        f"peak RSS  {m['peak_rss']}; load average (1 min) {m['load_average_1min'][0]} -> {m['load_average_1min'][1]}"
    )
    out.line()
    out.line("rounds (c: openssl speed -multi in the round, per CPU second and in wall time; r: page-cache reads")
    out.line("        alone, per CPU second x cores; d/d1: library on all cores over one thread)")
    for i, rd in enumerate(r["rounds"], 1):
        c = f"{rd['openssl_gbps']:.2f} GB/s (wall {rd['openssl_wall_gbps']:.2f})" if rd["openssl_gbps"] else "n/a"
        c += f", r {rd['reads_gbps']:.2f} GB/s"
        held = "  ANOTHER PROCESS HELD A CORE (threads no faster than one): not counted"
        held = held if rd["core_held_by_another_process"] else ""
        out.line(f"  {i}: c {c}, d/d1 {rd['threads_speedup']:.2f}x{held}")
    out.line()
    title = f"hashing (best/median of {r['repeat']})"
    heads = f"{'best s':>7} {'median s':>8} {'GB/s':>6} {'of c':>6} {'cpu s':>6} {'cpu/core':>8} {'peak RSS':>9}"
    out.line(f"   {title:<37} {heads}")
    for h in r["hashing"].values():
        sh = f"{h['share_of_ceiling']:6.1%}" if h["share_of_ceiling"] is not None else f"{'n/a':>6}"
        cpu = f"{min(h['cpu_s']):6.2f}" if h["cpu_s"] else f"{'':6}"
        eff = f"{h['cpu_share_of_core']:8.1%}" if h["cpu_share_of_core"] is not None else f"{'':8}"
        rss = f"{h['peak_rss_mib']:5.1f} MiB" if h["peak_rss_mib"] is not None else "(in process)"
        out.line(
            f"{h['tag']:<2} {h['label']:<37} {h['best_s']:7.3f} {h['median_s']:8.3f} {h['gbps']:6.2f} {sh} "
            f"{cpu} {eff} {rss:>9}"
        )
    if ratios["ceiling_gbps"]:
        label = f"ceiling: openssl -multi {m['cores']}, best round"
        out.line(f"c  {label:<37} {'':7} {'':8} {ratios['ceiling_gbps']:6.2f}")
    else:
        out.line("c  ceiling: `openssl speed` unavailable")
    out.line(f"r  {'page-cache reads alone, best round':<37} {'':7} {'':8} {ratios['reads_gbps']:6.2f}")
    if ratios["bound_gbps"]:
        label = "bound: copy then hash, c*r/(c+r)"
        out.line(f"   {label:<37} {'':7} {'':8} {ratios['bound_gbps']:6.2f} {ratios['bound_share_of_ceiling']:6.1%}")
    out.line("   of c: GB/s in the best quiet round over c; cpu/core: bytes per CPU second over one core's rate")
    out.line()
    rows = ratio_rows(r)
    out.line("ratios (from best times)")
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        out.line(f"  {label:<{width}} : {value}")
    out.line()
    out.line("start-up (wall time of a subprocess, patchkit from compiled bytecode)")
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
