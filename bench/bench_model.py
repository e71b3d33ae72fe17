#!/usr/bin/env python3
"""Benchmark: ``patchkit model verify`` on a multi-GB Hugging Face cache, beside the alternatives.

SPEC.md ("Scale and speed") promises hashing at the machine's limit; issue 7
asks that ``model verify`` be at least twice as fast as huggingface_hub's own
verifier and reach 85% of OpenSSL's SHA-256 rate times the cores. One run:

* builds (or reuses) a synthetic cache of ``--size-gb`` GB (default 8) under
  ``<workdir>/model/`` in the real layout: ``models--bench--synthetic/`` with
  sixteen LFS-style shards named by their sha256 under ``blobs/``, three small
  files named by their git blob id, ``snapshots/<commit>/`` of relative
  symlinks and ``refs/main``; beside it a deployment whose lockfile pins the
  model with its manifest;
* starts the Hub stand-in of the tests (tests/model/hubserver.py) on
  127.0.0.1 with the same listing, for ``hf cache verify``, which asks the Hub
  for the expected hashes;
* with a warm page cache (each candidate runs once, untimed, first), times
  ``--repeat`` rounds, candidates taking turns:

  a. ``patchkit model verify --full --quiet`` (subprocess; every byte hashed);
  a+. ``patchkit model verify --quiet`` with the verification record filled;
  b. ``sha256sum -c --quiet`` over the shards' blobs;
  h. ``hf cache verify bench/synthetic --revision <commit> --cache-dir …``;
  d. ``patchkit.core.hashing.digest_many`` in process (hashing alone);

* the ceiling (c) is ``openssl speed -evp sha256`` on one core times the usable cores.

GB/s are decimal over the bytes of every pinned file. ``--cold`` also times
one run of a. after asking the kernel to drop the blobs from the page cache
(``posix_fadvise(DONTNEED)``), beside a plain sequential read of the same
files: there the disk, not SHA-256, sets the pace.

Run: ``python bench/bench_model.py [--size-gb 8] [--workdir DIR] [--repeat 3] [--cold] [--json]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# bench/ is sys.path[0] when this runs as a script.
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
    run_checked,
    run_measured_ok,
    timed,
)

from patchkit.core.hashing import GIT_SHA1, SHA256, default_jobs, digest_many
from patchkit.core.values import Revision, Sha256, UpstreamPath
from patchkit.lockfile.model import Lockfile, Model, ModelFile
from patchkit.lockfile.writer import dumps, expected_sums

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
sys.path.insert(0, str(REPO_ROOT / "tests" / "model"))
from hubserver import FileEntry, HubServer  # noqa: E402  (the tests' Hub stand-in)

PROG = "bench_model"
LAYOUT_VERSION = 1
REPO_ID = "bench/synthetic"
FOLDER = "models--bench--synthetic"
SHARDS = 16
GB = 10**9
MIB = 1024 * 1024
POOL = 64 * MIB
SEED = 0x0DE1_5EED
TARGET_SHARE = 0.90
TARGET_PEAK_MIB = 64
TARGET_VS_HF = 2.0
SMALL_FILES = {
    "config.json": b'{"architectures": ["DeepseekV4ForCausalLM"], "num_hidden_layers": 61}\n',
    "generation_config.json": b'{"temperature": 0.6, "top_p": 0.95}\n',
    "tokenizer_config.json": b'{"model_max_length": 131072}\n',
}


@dataclass(frozen=True)
class Layout:
    work: Path
    cache: Path
    deployment: Path
    commit: str
    files: tuple[FileEntry, ...]
    blobs: tuple[Path, ...]  # the shards' blobs, for sha256sum and eviction

    @property
    def total(self) -> int:
        return sum(f.size for f in self.files)


def _shard_sizes(total: int) -> list[int]:
    size = max(MIB, total // SHARDS // MIB * MIB)
    return [size] * SHARDS


def build(work: Path, size_gb: float, out: Out) -> tuple[list[FileEntry], dict[str, Path]]:
    """Write the shards' blobs (once; reused while the recorded layout matches) and return the entries."""
    sizes = _shard_sizes(int(size_gb * GB))
    blobs_dir = work / "cache" / FOLDER / "blobs"
    state = work / "layout.json"
    want = {"version": LAYOUT_VERSION, "sizes": sizes, "seed": SEED}
    try:
        have = json.loads(state.read_text())
    except (OSError, ValueError):
        have = None
    if have is not None and have.get("layout") == want:
        entries = [FileEntry.lfs(s["path"], s["size"], s["sha256"]) for s in have["shards"]]
        if all((blobs_dir / e.lfs_sha256).stat().st_size == e.size for e in entries if e.lfs_sha256):
            out.progress(f"reusing {work} ({sum(sizes) / GB:.2f} GB)")
            return entries, {e.path: blobs_dir / str(e.lfs_sha256) for e in entries}
    if work.exists():
        if not state.exists() and any(work.iterdir()):
            fail(PROG, f"{work} exists but was not made by this benchmark; move it away")
        shutil.rmtree(work)
    blobs_dir.mkdir(parents=True)
    pool = memoryview(random.Random(SEED).randbytes(POOL))  # noqa: S311 - test data
    entries = []
    paths = {}
    started = time.perf_counter()
    for i, size in enumerate(sizes):
        rel = f"model-{i + 1:05d}-of-{SHARDS:05d}.safetensors"
        tmp = blobs_dir / f"{rel}.incomplete"
        h = hashlib.sha256()
        with tmp.open("wb") as f:
            head = f"shard {i}\n".encode()
            f.write(head)
            h.update(head)
            left, pos = size - len(head), (i * 7919 * 4096) % POOL
            while left:
                n = min(left, POOL - pos, 8 * MIB)
                f.write(pool[pos : pos + n])
                h.update(pool[pos : pos + n])
                left -= n
                pos = (pos + n) % POOL
        sha = h.hexdigest()
        tmp.rename(blobs_dir / sha)
        entries.append(FileEntry.lfs(rel, size, sha))
        paths[rel] = blobs_dir / sha
        out.progress(
            f"wrote shard {i + 1}/{SHARDS} ({(i + 1) * size / GB:.1f} GB, {time.perf_counter() - started:.0f} s)"
        )
    shards = [{"path": e.path, "size": e.size, "sha256": e.lfs_sha256} for e in entries]
    state.write_text(json.dumps({"layout": want, "shards": shards}, indent=1))
    return entries, paths


def assemble(work: Path, size_gb: float, hub: HubServer, out: Out) -> Layout:
    """The cache around the blobs (snapshot links, small files, refs), and the deployment pinning it."""
    shards, blob_paths = build(work, size_gb, out)
    small = [FileEntry.of(name, data) for name, data in SMALL_FILES.items()]
    files = (*shards, *small)
    commit = hub.add(REPO_ID, list(files))
    repo_dir = work / "cache" / FOLDER
    for f in small:
        blob = repo_dir / "blobs" / f.oid
        blob.write_bytes(f.data or b"")
    shutil.rmtree(repo_dir / "snapshots", ignore_errors=True)
    snap = repo_dir / "snapshots" / commit
    snap.mkdir(parents=True)
    for f in files:
        (snap / f.path).symlink_to(f"../../blobs/{f.lfs_sha256 or f.oid}")
    (repo_dir / "refs").mkdir(exist_ok=True)
    (repo_dir / "refs" / "main").write_text(commit)

    deployment = work / "deployment"
    shutil.rmtree(deployment, ignore_errors=True)
    deployment.mkdir()
    pinned = tuple(
        ModelFile(UpstreamPath(f.path), f.size, sha256=Sha256(f.lfs_sha256))
        if f.lfs_sha256
        else ModelFile(UpstreamPath(f.path), f.size, blob=f.oid)
        for f in files
    )
    lock = Lockfile(name="bench", model=Model(REPO_ID, Revision(commit), files=pinned, ref="main"))
    text = dumps(lock).encode()
    (deployment / "lockfile.toml").write_bytes(text)
    (deployment / "SHA256SUMS").write_bytes(expected_sums(lock, text))
    blobs = tuple(blob_paths[f.path] for f in shards)
    (work / "shards.sha256").write_text("".join(f"{f.lfs_sha256}  {blob_paths[f.path]}\n" for f in shards))
    return Layout(work, work / "cache", deployment, commit, files, blobs)


def evict(paths: Sequence[Path]) -> None:
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def read_all(paths: Sequence[Path]) -> None:
    buf = bytearray(16 * MIB)
    for p in paths:
        with p.open("rb", buffering=0) as f:
            while f.readinto(buf):
                pass


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    p.add_argument("--size-gb", type=float, default=2.0, help="size of the synthetic cache in GB (default 2)")
    p.add_argument("--workdir", type=Path, default=BENCH_DIR / "work", help="default bench/work/")
    p.add_argument("--repeat", type=int, default=3, help="timed rounds (default 3)")
    p.add_argument("--cold", action="store_true", help="also time one run with the blobs evicted from the page cache")
    p.add_argument("--json", action="store_true", help="report to stderr, results as JSON to stdout")
    args = p.parse_args(argv)
    if args.size_gb <= 0 or args.repeat < 1:
        p.error("--size-gb must be > 0 and --repeat >= 1")
    out = Out(sys.stderr if args.json else sys.stdout)
    patchkit = find_patchkit(PROG)
    beside = Path(sys.executable).parent / "hf"  # huggingface_hub's CLI, installed with this interpreter
    hf = str(beside) if os.access(beside, os.X_OK) else shutil.which("hf")
    sha256sum = shutil.which("sha256sum")
    work = args.workdir.resolve() / "model"

    hub = HubServer(page_size=1000).start()
    try:
        layout = assemble(work, args.size_gb, hub, out)
        results = run(layout, hub, patchkit, hf, sha256sum, args, out)
    finally:
        hub.stop()
    if args.json:
        print(json.dumps(results, indent=2, sort_keys=True))
    return 0


def run(
    layout: Layout,
    hub: HubServer,
    patchkit: str,
    hf: str | None,
    sha256sum: str | None,
    args: argparse.Namespace,
    out: Out,
) -> dict[str, Any]:
    """Every candidate warmed up once, then timed ``args.repeat`` rounds; the report printed and returned."""
    env = bench_env(layout, hub)
    meter = Meter.find(layout.work / "peak-rss.txt")
    cores = default_jobs()
    verify = [patchkit, "--repo", str(layout.deployment), "model", "verify", "--quiet"]
    candidates = make_candidates(layout, verify, hf, sha256sum, env, meter, cores)
    load_before = os.getloadavg()[0]
    out.progress("warm-up: every candidate once (fills the page cache, the bytecode cache and the record)")
    for _, fn in candidates:
        fn()
    by = {t.key: t for t, _ in candidates}
    rounds = timed_rounds(candidates, by, args.repeat, cores, out)
    load_after = os.getloadavg()[0]
    known = [c for c in rounds.ceilings if c]
    scale = Scale(layout.total, max(known) if known else None, cores, rounds.held)
    out.line(
        f"patchkit model verify: {scale.total / GB:.2f} GB in {len(layout.files)} files ({SHARDS} LFS shards), "
        "warm cache"
    )
    out.line(f"peak RSS: {meter.method}")
    print_rounds(out, rounds, by, cores)
    print_table(out, candidates, scale)
    out.line(f"load average (1 min) before/after the timed rounds: {load_before:.2f} / {load_after:.2f}")
    pk_share, contended = scale.share(by["patchkit"])
    results: dict[str, Any] = {
        "load_average": [load_before, load_after],
        "bytes": scale.total,
        "files": len(layout.files),
        "cores": cores,
        "peak_rss": meter.method,
        "rounds": [
            {"openssl_gb_per_s": c / GB if c else None, "core_held_by_another_process": h}
            for c, h in zip(rounds.ceilings, rounds.held, strict=True)
        ],
        "candidates": {
            t.key: {
                "best": t.best,
                "median": t.median,
                "gb_per_s": scale.rate(t),
                "cpu_s": t.best_cpu,
                "peak_rss_mib": t.peak_mib,
            }
            for t, _ in candidates
        },
        "ceiling_gb_per_s": scale.ceiling / GB if scale.ceiling else None,
        "share_of_ceiling": pk_share,
        "share_from_contended_rounds": contended,
        "vs_file_digest": scale.rate(by["patchkit"]) / scale.rate(by["file_digest"]),
    }
    print_verdicts(out, by, scale, results)
    if args.cold:
        cold(layout, verify, env, out, results)
    return results


def bench_env(layout: Layout, hub: HubServer) -> dict[str, str]:
    """The environment both tools run in: the stand-in Hub, the bench's caches, no token, online."""
    # Both tools run from compiled bytecode, as installed (benchlib.cached_env): with
    # PYTHONDONTWRITEBYTECODE kept, every start compiled patchkit and huggingface_hub again.
    env = cached_env(
        layout.work.parent / "pycache",
        {
            **os.environ,
            "HF_HUB_CACHE": str(layout.cache),
            "HF_ENDPOINT": hub.url,
            "HF_HUB_DISABLE_UPDATE_CHECK": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
            "PATCHKIT_CACHE": str(layout.work / "patchkit-cache"),
        },
    )
    env.pop("HF_TOKEN", None)
    env.pop("HF_HUB_OFFLINE", None)
    return env


def make_candidates(
    layout: Layout,
    verify: list[str],
    hf: str | None,
    sha256sum: str | None,
    env: dict[str, str],
    meter: Meter,
    cores: int,
) -> list[tuple[Timing, Callable[[], object]]]:
    """The rows timed: patchkit (full, then with its record), file_digest, sha256sum and hf when present, in process."""
    d = layout.deployment

    def child(argv: Sequence[str]) -> Callable[[], Cost]:
        return lambda: run_measured_ok(PROG, argv, d, env, meter)

    shard_list = str(layout.work / "shards.sha256")
    candidates: list[tuple[Timing, Callable[[], object]]] = [
        (Timing("patchkit", "a", "patchkit model verify --full"), child([*verify, "--full"])),
        (Timing("patchkit_record", "a+", "patchkit model verify (record filled)"), child(verify)),
        (
            Timing("file_digest", "f", f"hashlib.file_digest, {cores} threads (shards)"),
            child([sys.executable, "-c", FILE_DIGEST_SCRIPT, shard_list, str(cores)]),
        ),
    ]
    if sha256sum:
        candidates.append(
            (Timing("sha256sum", "b", "sha256sum -c (shards only)"), child([sha256sum, "-c", "--quiet", shard_list]))
        )
    if hf:
        argv = [hf, "cache", "verify", REPO_ID, "--revision", layout.commit, "--cache-dir", str(layout.cache)]
        argv += ["--fail-on-missing-files", "--fail-on-extra-files"]
        candidates.append((Timing("hf", "h", "hf cache verify"), child(argv)))
    snap = layout.cache / FOLDER / "snapshots" / layout.commit
    items = {(snap / f.path).resolve(): SHA256 if f.lfs_sha256 else GIT_SHA1 for f in layout.files}
    candidates += [
        (Timing("in_process", "d", f"digest_many, {cores} threads"), lambda: digest_many(items, jobs=cores)),
        (Timing("in_process_1", "d1", "digest_many, 1 thread"), lambda: digest_many(items, jobs=1)),
    ]
    return candidates


@dataclass
class Rounds:
    """Per timed round: openssl's ceiling (total and wall), and whether another process held a core."""

    ceilings: list[float | None] = field(default_factory=list)
    available: list[float | None] = field(default_factory=list)  # what the cores gave openssl in wall time
    held: list[bool] = field(default_factory=list)


def timed_rounds(
    candidates: list[tuple[Timing, Callable[[], object]]], by: dict[str, Timing], repeat: int, cores: int, out: Out
) -> Rounds:
    """Each round measures the ceiling with openssl, then times every candidate once."""
    rounds = Rounds()
    for r in range(repeat):
        out.progress(f"round {r + 1}/{repeat}: openssl speed -multi {cores}, then every candidate")
        ceiling = openssl_ceiling(cores)
        rounds.ceilings.append(ceiling.total if ceiling else None)
        rounds.available.append(ceiling.wall_total if ceiling else None)
        for t, fn in candidates:
            t.record(fn)
        rounds.held.append(held_core(by["in_process"].seconds[-1], by["in_process_1"].seconds[-1], cores))
    return rounds


@dataclass(frozen=True)
class Scale:
    """What a timing is measured against: the bytes verified, the best openssl ceiling, the cores, held rounds."""

    total: int
    ceiling: float | None
    cores: int
    held: list[bool]

    def rate(self, t: Timing) -> float:
        return self.total / t.best / GB

    def share(self, t: Timing) -> tuple[float | None, bool]:
        """Throughput in the best round where no core was held, over the ceiling (flagged when none was quiet)."""
        quiet = [x for x, h in zip(t.seconds, self.held, strict=True) if not h]
        best = min(quiet) if quiet else t.best
        return (self.total / best / self.ceiling if self.ceiling else None), not quiet

    def cpu_share(self, t: Timing) -> float | None:
        """Bytes per CPU second over one core's rate: the work done, whatever else ran."""
        return self.total / t.best_cpu / (self.ceiling / self.cores) if self.ceiling and t.best_cpu else None


def print_rounds(out: Out, rounds: Rounds, by: dict[str, Timing], cores: int) -> None:
    """One line per round: the ceiling, how much faster the threads were than one, and whether it counts."""
    for i, (c, w, h) in enumerate(zip(rounds.ceilings, rounds.available, rounds.held, strict=True), 1):
        speedup = by["in_process_1"].seconds[i - 1] / by["in_process"].seconds[i - 1]
        note = "  ANOTHER PROCESS HELD A CORE (threads no faster than one): not counted" if h else ""
        shown = f"{c / GB:.2f} GB/s (wall {(w or 0) / GB:.2f})" if c else "n/a"
        out.line(f"  round {i}: openssl -multi {cores} {shown}, d/d1 {speedup:.2f}x{note}")


def print_table(out: Out, candidates: list[tuple[Timing, Callable[[], object]]], scale: Scale) -> None:
    """The candidates' table (the record row hashes nothing, so it has no rates), then the ceiling's row."""
    heads = f"{'best s':>7} {'median s':>8} {'GB/s':>6} {'of c':>6} {'cpu s':>6} {'cpu/core':>8} {'peak RSS':>10}"
    out.line(f"{'':3} {'candidate':44} {heads}")
    for t, _ in candidates:
        hashes = t.key != "patchkit_record"
        shown = f"{scale.rate(t):6.2f}" if hashes else "    --"
        sh = scale.share(t)[0] if hashes else None
        eff = scale.cpu_share(t) if hashes else None
        of_c = f"{sh:6.1%}" if sh is not None else f"{'':6}"
        cpu = f"{t.best_cpu:6.2f}" if t.best_cpu is not None else f"{'':6}"
        per_core = f"{eff:8.1%}" if eff is not None else f"{'':8}"
        rss = f"{t.peak_mib:6.1f} MiB" if t.peak_mib is not None else " in process"
        out.line(f"{t.tag:3} {t.label:44} {t.best:7.3f} {t.median:8.3f} {shown} {of_c} {cpu} {per_core} {rss:>10}")
    if scale.ceiling:
        label = "ceiling: openssl -multi " + str(scale.cores) + ", best round"
        out.line(f"c   {label:44} {'':16} {scale.ceiling / GB:6.2f}")
    out.line("    of c: GB/s in the best quiet round over c; cpu/core: bytes per CPU second over one core's rate")


def print_verdicts(out: Out, by: dict[str, Timing], scale: Scale, results: dict[str, Any]) -> None:
    """patchkit against its targets (ceiling share, peak RSS, hf) and the other tools; ratios go into ``results``."""
    pk = scale.rate(by["patchkit"])
    pk_share, contended = results["share_of_ceiling"], results["share_from_contended_rounds"]
    if pk_share is not None and contended:
        out.line(
            f"patchkit / ceiling: not measured, another process held a core in every round "
            f"(best contended round {pk_share:.0%})"
        )
    elif pk_share is not None:
        verdict = "meets" if pk_share >= TARGET_SHARE else "MISSES"
        out.line(f"patchkit / ceiling: {pk_share:.0%} ({verdict} the {TARGET_SHARE:.0%} target)")
    peak = by["patchkit"].peak_mib or 0.0
    verdict = "meets" if peak < TARGET_PEAK_MIB else "MISSES"
    out.line(f"patchkit peak RSS: {peak:.1f} MiB ({verdict} the < {TARGET_PEAK_MIB} MiB target)")
    out.line(f"patchkit / hashlib.file_digest: {results['vs_file_digest']:.2f}x (file_digest hashes the shards only)")
    if "hf" in by:
        vs = pk / scale.rate(by["hf"])
        verdict = "meets" if vs >= TARGET_VS_HF else "MISSES"
        out.line(f"patchkit / hf cache verify: {vs:.2f}x ({verdict} the {TARGET_VS_HF:.0f}x target)")
        results["vs_hf"] = vs
    if "sha256sum" in by:
        out.line(f"patchkit / sha256sum -c: {pk / scale.rate(by['sha256sum']):.2f}x")
        results["vs_sha256sum"] = pk / scale.rate(by["sha256sum"])
    out.line(f"re-verify with the record: {by['patchkit_record'].best:.2f} s for {scale.total / GB:.1f} GB")


def cold(layout: Layout, verify: list[str], env: dict[str, str], out: Out, results: dict[str, Any]) -> None:
    """One run each with the blobs dropped from the page cache: the disk's pace, not SHA-256's."""
    total = layout.total
    evict(layout.blobs)
    read_s = timed(lambda: read_all(layout.blobs))
    evict(layout.blobs)
    verify_s = timed(lambda: run_checked(PROG, [*verify, "--full"], layout.deployment, env=env))
    out.line(
        f"cold (after posix_fadvise DONTNEED): sequential read {total / read_s / GB:.2f} GB/s, "
        f"patchkit model verify --full {total / verify_s / GB:.2f} GB/s"
    )
    results["cold"] = {"read_gb_per_s": total / read_s / GB, "verify_gb_per_s": total / verify_s / GB}


if __name__ == "__main__":
    raise SystemExit(main())
