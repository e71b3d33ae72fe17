"""Rebasing a 200-patch series: ``patchkit rebase --series`` against a ``git am -3`` loop, in one run.

Builds an upstream git repository of ``--files`` Python modules with a test
file each, and a series of ``--patches`` backports made as commits on a
branch and exported with ``git format-patch`` (each patch changes one
module and its test). The new upstream commit changes other lines of every
third module, so every patch needs a real three-way merge and none
conflicts. Then, in each of ``--repeat`` rounds, taking turns:

- a: ``patchkit rebase --series up --onto NEW`` in a deployment pinning the
  series, as a subprocess (the deployment is restored before each round);
- b: the obvious alternative: in a fresh clone at NEW, ``git am -3 PATCH``
  once per patch, in order, as a shell loop runs it.

Both must succeed on every patch; the report gives the best and median wall
times, the least CPU time and the peak RSS of each (the loop's: its largest
process), and the ratio b/a.

    python bench/bench_series.py [--patches 200] [--repeat 3] [--workdir DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import Cost, Meter, Timing, fail, find_patchkit, run_measured, run_measured_ok

from patchkit.core.hashing import sha256_bytes

PROG = "bench_series"
ENV = {
    "GIT_AUTHOR_NAME": "Bench",
    "GIT_AUTHOR_EMAIL": "bench@example.invalid",
    "GIT_COMMITTER_NAME": "Bench",
    "GIT_COMMITTER_EMAIL": "bench@example.invalid",
    "GIT_AUTHOR_DATE": "2026-01-05T10:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-05T10:00:00Z",
    "PATH": "/usr/bin:/bin",
    "HOME": "/nonexistent",
}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=ENV, check=True, capture_output=True, text=True).stdout


def module(i: int, variant: str = "") -> str:
    body = [f'"""Module {i}."""', "", "import math", ""]
    for k in range(12):
        body += [f"def f{k}(x):", f"    y = x * {k + 1}{variant if k == 9 else ''}", "    return math.sqrt(abs(y))", ""]
    return "\n".join(body) + "\n"


def build(work: Path, files: int, patches: int) -> tuple[Path, Path, str, str]:
    up = work / "upstream"
    up.mkdir(parents=True)
    git(up, "init", "-q", "-b", "main")
    for i in range(files):
        (up / f"pkg/m{i:04d}.py").parent.mkdir(parents=True, exist_ok=True)
        (up / f"pkg/m{i:04d}.py").write_text(module(i))
        (up / f"tests/test_m{i:04d}.py").parent.mkdir(parents=True, exist_ok=True)
        (up / f"tests/test_m{i:04d}.py").write_text(
            f"from pkg import m{i:04d}\n\n\ndef test_f0():\n    assert m{i:04d}.f0(1) == 1\n"
        )
    git(up, "add", "-A")
    git(up, "commit", "-q", "-m", "base")
    old = git(up, "rev-parse", "HEAD").strip()
    git(up, "checkout", "-q", "-b", "queue")
    for n in range(patches):
        i = n % files
        m = up / f"pkg/m{i:04d}.py"
        m.write_text(m.read_text().replace("    y = x * 3\n", f"    y = x * 3  # backport {n}\n    y = clamp(y)\n", 1))
        t = up / f"tests/test_m{i:04d}.py"
        t.write_text(t.read_text() + f"\n\ndef test_backport_{n}():\n    assert m{i:04d}.f2(1) >= 0\n")
        git(up, "commit", "-q", "-am", f"backport #{40000 + n}")
    deploy = work / "deploy"
    (deploy / "patches/up").mkdir(parents=True)
    git(up, "format-patch", "-q", "-o", str(deploy / "patches/up"), f"{old}..queue")
    git(up, "checkout", "-q", "main")
    for i in range(0, files, 3):
        (up / f"pkg/m{i:04d}.py").write_text(module(i, " + 0"))
    git(up, "commit", "-q", "-am", "upstream moves on")
    new = git(up, "rev-parse", "HEAD").strip()
    names = sorted(p.name for p in (deploy / "patches/up").iterdir())
    entries = "".join(
        f'\n[[series.up.patches]]\nname = "p{k:04d}"\nfile = "patches/up/{name}"\n'
        f'sha256 = "{sha256_bytes((deploy / "patches/up" / name).read_bytes())}"\n'
        for k, name in enumerate(names)
    )
    (deploy / "lockfile.toml").write_text(
        f'schema = 1\n\n[upstreams.up]\ngit = "{up.as_uri()}"\ncommit = "{old}"\n\n[series.up]\ncommit = "{old}"\n'
        + entries
    )
    return up, deploy, old, new


def rebase(pk: str, deploy: Path, new: str, env: dict[str, str], meter: Meter, patches: int) -> Cost:
    """``patchkit rebase --series up --onto NEW``, measured; every patch must merge."""
    argv = [pk, "-C", str(deploy), "rebase", "--series", "up", "--onto", new]
    run = run_measured(PROG, argv, deploy, env, meter)
    said = run.stdout.decode(errors="replace")
    if run.returncode != 0 or said.count(" clean") + said.count("partially-upstreamed") < patches:
        fail(PROG, f"patchkit rebase failed: {said[-2000:]} {run.stderr.decode(errors='replace')[-2000:]}")
    return run.cost


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--patches", type=int, default=200)
    ap.add_argument("--files", type=int, default=120)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=Path(__file__).resolve().parent / "work" / "series")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    pk = find_patchkit(PROG)
    shutil.rmtree(args.workdir, ignore_errors=True)
    up, deploy, _, new = build(args.workdir, args.files, args.patches)
    env = {**ENV, "PATCHKIT_CACHE": str(args.workdir / "cache"), "PYTHONPYCACHEPREFIX": str(args.workdir / "pycache")}
    subprocess.run([pk, "-C", str(deploy), "lock"], env=env, check=True, capture_output=True)
    pristine = args.workdir / "deploy.orig"
    shutil.copytree(deploy, pristine)
    patches = sorted((pristine / "patches/up").iterdir())
    meter = Meter.find(args.workdir / "peak-rss.txt")
    rows = {"a": Timing("a", "a", "patchkit rebase --series"), "b": Timing("b", "b", "git am -3 loop")}
    loop = 'for p in "$@"; do git am -3 -q "$p" || exit 1; done'
    for _ in range(args.repeat):
        shutil.rmtree(deploy)
        shutil.copytree(pristine, deploy)
        rows["a"].record(lambda: rebase(pk, deploy, new, env, meter, args.patches))
        clone = args.workdir / "am"
        shutil.rmtree(clone, ignore_errors=True)
        git(args.workdir, "clone", "-q", str(up), str(clone))
        git(clone, "checkout", "-q", "--detach", new)
        argv = ["bash", "-c", loop, "loop", *map(str, patches)]
        rows["b"].record(lambda argv=argv, clone=clone: run_measured_ok(PROG, argv, clone, ENV, meter))
    a, b = rows["a"], rows["b"]
    result = {
        "patches": args.patches,
        "files": args.files,
        "rounds": args.repeat,
        "peak_rss": meter.method,
        **{
            key: {
                "best_s": round(row.best, 3),
                "median_s": round(row.median, 3),
                "cpu_s": round(row.best_cpu or 0, 3),
                "peak_mib": round(row.peak_mib or 0, 1),
            }
            for key, row in (("patchkit_rebase", a), ("git_am_3_loop", b))
        },
        "ratio_git_am_over_patchkit": round(b.best / a.best, 2),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{args.patches} patches over {args.files} modules (+ tests), best of {args.repeat} rounds:")
        print(f"  (CPU: user + system, least of the rounds; peak RSS: {meter.method}, the loop's largest process)")
        for row in (a, b):
            print(
                f"  {row.tag}  {row.label:26s} {row.best:.2f} s (median {row.median:.2f} s)"
                f"  CPU {row.best_cpu or 0:.2f} s  peak {row.peak_mib or 0:.1f} MiB"
            )
        print(f"  b/a = {b.best / a.best:.2f}")


if __name__ == "__main__":
    main()
