"""The runtime guard's start-up cost on 30 files, beside the interpreter's own start and ``sha256sum -c``.

    python bench/bench_guard.py                 # 30 files, 20 rounds
    python bench/bench_guard.py --files 300 --repeat 10

Lays out, in a temporary directory, what a container holds: ``--files`` mounted
files (overlays and modules of 4 KiB to 256 KiB, two tuning tables of 300 KiB),
a ``vllm`` package with its ``_version.py``, a model snapshot, and the
``guard.json`` naming them all. Every candidate runs once untimed (warm cache,
and it must pass), then ``--repeat`` rounds take turns:

a. the guard as the entrypoint runs it (``python3 guard.py --manifest … -- MODEL``);
b. ``python3 -c pass``: the interpreter's start alone, the floor of (a);
c. ``sha256sum -c`` over the same files: the obvious alternative, which checks
   the bytes only (no version, no model).

Reports the median and best wall time of each, its least CPU time and its peak
RSS (GNU ``time``, else ``wait4``; see ``benchlib.Meter``), and (a) - (b): what
the guard itself costs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import sys
import tempfile
from pathlib import Path

from benchlib import Meter, Out, Timing, run_measured_ok

PROG = "bench_guard"
GUARD = Path(__file__).resolve().parent.parent / "patchkit" / "guard" / "runtime.py"
REVISION = "7872f01b1d1fe23eabc4c98b48bffcef5a386062"
VERSION = "0.26.1rc1.dev229+g124154a88"


def layout(root: Path, count: int) -> tuple[Path, Path, dict[str, str]]:
    """The files, the manifest and the SHA256SUMS; the environment the guard runs with."""
    rng = random.Random(21)  # noqa: S311 - seeded test data, not secrets
    files = []
    for i in range(count):
        size = 300 << 10 if i < 2 else int(2 ** rng.uniform(12, 18))
        path = root / "mounts" / f"f{i:03d}.{'csv' if i < 2 else 'py'}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.randbytes(size))
        files.append(path)
    site = root / "site" / "vllm"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("")
    (site / "_version.py").write_text(f"__version__ = version = {VERSION!r}\n")
    snap = root / "hf" / "snapshots" / REVISION
    snap.mkdir(parents=True)
    entries = [
        {"name": p.stem, "kind": "module", "target": str(p), "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
        for p in files
    ]
    manifest = root / "guard.json"
    manifest.write_text(
        json.dumps(
            {
                "schema": 1,
                "deployment": "bench",
                "files": entries,
                "runtime": {"image": "vllm", "package": "vllm", "version": VERSION},
                "model": {"repo": "o/m", "revision": REVISION, "path": str(snap)},
            }
        )
    )
    sums = root / "SHA256SUMS"
    sums.write_text("".join(f"{e['sha256']}  {e['target']}\n" for e in entries))
    return manifest, sums, {"PYTHONPATH": str(root / "site"), "PATH": "/usr/bin:/bin"}


def main() -> None:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    out = Out(sys.stdout)
    sha256sum = shutil.which("sha256sum")
    with tempfile.TemporaryDirectory(prefix="pk-bench-guard-") as tmp:
        manifest, sums, env = layout(Path(tmp), args.files)
        snap = str(Path(tmp) / "hf" / "snapshots" / REVISION)
        candidates = {
            "a": (
                f"guard on {args.files} files",
                [sys.executable, str(GUARD), "--manifest", str(manifest), "--", snap],
            ),
            "b": ("python3 -c pass (the floor)", [sys.executable, "-c", "pass"]),
        }
        if sha256sum:
            candidates["c"] = (
                f"sha256sum -c on {args.files} files",
                [sha256sum, "-c", "--quiet", "--strict", str(sums)],
            )
        rows = {k: Timing(k, k, label) for k, (label, _) in candidates.items()}
        meter = Meter.find(Path(tmp) / "peak-rss.txt")

        def run(argv: list[str]) -> object:
            return run_measured_ok(PROG, argv, Path(tmp), env, meter)

        for _, argv in candidates.values():
            run(argv)  # warm and must pass
        out.progress(f"{args.repeat} rounds of {', '.join(candidates)}")
        for _ in range(args.repeat):
            for key, (_, argv) in candidates.items():
                rows[key].record(lambda argv=argv: run(argv))
    out.line(f"runtime guard start-up, {args.files} files, {args.repeat} rounds, Python {sys.version.split()[0]}")
    out.line(f"  (CPU: user + system, least of the rounds; peak RSS: {meter.method})")
    for key, row in rows.items():
        out.line(
            f"  {key}. {row.label:<32} median {row.median * 1000:7.1f} ms   best {row.best * 1000:7.1f} ms"
            f"   CPU {(row.best_cpu or 0) * 1000:6.1f} ms   peak {row.peak_mib or 0:5.1f} MiB"
        )
    own = rows["a"].median - rows["b"].median
    out.line(f"  the guard's own cost (a - b): {own * 1000:.1f} ms")
    if "c" in rows:
        out.line(f"  a / c: {rows['a'].median / rows['c'].median:.1f}x the time of sha256sum -c")


if __name__ == "__main__":
    main()
