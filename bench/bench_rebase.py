#!/usr/bin/env python3
"""Benchmark: how fast ``patchkit rebase`` moves 1,000 overlays across one upstream bump, against a git loop.

SPEC.md ("Scale and speed") promises that rebases scale to thousands of
patches, and issue 3 asks for at least 10x the speed of the obvious
alternative, a shell loop of ``git show`` + ``git merge-file`` per file. This
script measures both in one run:

* It builds (or reuses) under ``--workdir`` a real git upstream of
  ``--patches`` generated Python modules (a few hundred lines each, distinct,
  deterministic), committed as C1; then a commit C2 that changes every file
  away from where the patches touch it (an added import, one changed line in
  another function, sometimes a new function at the end), and in about 3% of
  the files also a line in the patched function itself, so those clean
  merges get review flags. Nothing conflicts: the whole bump commits.
* Beside it, a patchkit deployment with one committed overlay per module on
  C1 (the file with a small edit in one function, its canonical diff under
  ``upstream/``, a lockfile written through ``patchkit.lockfile`` and
  ``SHA256SUMS`` written by ``patchkit sums``), checked once with
  ``patchkit check``. A pristine copy restores it before every rebase
  (restoring is not timed).
* With a bench-private ``PATCHKIT_CACHE`` emptied at the start, one untimed
  run of every candidate comes first: it fills patchkit's clone of the
  upstream and its blob cache (that first run's time is reported as the
  cold-cache figure), and checks the outcomes. Then, best and median of
  ``--repeat`` runs, taking turns round by round:

  a. ``patchkit rebase --onto C2`` as a subprocess in the deployment;
  b. a bash loop in the upstream repository: for each patch,
     ``git show C1:path``, ``git show C2:path`` and
     ``git merge-file -p ours base theirs``, counting exit codes. It does
     less than patchkit: no lockfile, no diffs, no SHA256SUMS, no hashing,
     no review flags, no transaction.

* Where patchkit's time goes: the library calls of one rebase, run once in
  this process with a timer around each stage (lockfile, bases, reading the
  new files, merging, diffs and pins, writing), next to the interpreter's
  and the imports' start-up.

Run: ``python bench/bench_rebase.py [--patches 1000] [--workdir DIR] [--repeat 3] [--json]``.
With ``--json`` the human-readable report goes to stderr and a JSON document
to stdout.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import hashlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# bench/benchlib.py: bench/ is sys.path[0] when this runs as a script (isort files it as third-party)
from benchlib import Out, Timing, fail, find_patchkit, run_checked, timed

from patchkit.diffs import canonical_diff
from patchkit.lockfile.model import Base, DiffPin, GitUpstream, Lockfile, Patch, PatchKind
from patchkit.lockfile.writer import dumps
from patchkit.values import ContainerPath, RepoPath, Revision, Sha256, UpstreamPath

PROG = "bench_rebase"  # prefixes its error messages
BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent

TREE_VERSION = 1  # bump when the generator or the layout changes, to force a rebuild
SEED = 0x5EED_4EBA
UPSTREAM = "vllmish"
PACKAGE = "vllmish"
TARGET_PREFIX = "/usr/local/lib/python3.12/dist-packages"
REVIEW_SHARE = 0.03  # files where upstream also changes the patched function
APPEND_SHARE = 0.25  # files where upstream also appends a new function
TARGET_RATIO = 10.0  # issue 3: patchkit at least 10x faster than the git loop
# Fixed identity and dates: the same generator gives the same commit ids on every machine.
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.invalid",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}
C1_DATE = "2026-01-05T12:00:00+00:00"
C2_DATE = "2026-01-12T12:00:00+00:00"


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------- Python source generator

WORDS = (
    "block", "cache", "tensor", "layer", "rank", "shard", "token", "batch", "head", "expert", "weight",
    "scale", "offset", "stride", "page", "slot", "queue", "request", "sequence", "prefix", "kernel",
    "stream", "event", "buffer", "device", "worker", "engine", "sampler", "logit", "prompt", "budget",
    "chunk", "window", "group", "bucket", "index", "mask", "bias", "norm", "rotary", "alpha", "beta",
    "gamma", "delta", "limit", "count", "total", "size", "width", "depth", "dtype", "quant", "lora",
    "adapter", "router", "gate", "score", "metric", "timer", "config", "spec", "state", "status",
    "handle", "future", "result", "output", "hidden", "attn", "mlp", "embed", "vocab", "position",
    "step", "epoch", "seed", "policy", "schedule", "capacity", "reserve", "evict", "swap", "spill",
    "restore", "fence", "barrier", "flag", "level", "tier", "pool", "arena", "region", "span",
    "segment", "partition", "replica", "peer", "host", "port", "channel", "message", "payload",
    "header", "frame", "record", "entry", "table", "column", "row", "key", "label", "tag", "path",
    "suffix", "codec", "backend", "plugin", "hook", "callback", "handler", "monitor", "tracker",
    "counter", "gauge", "sample", "trace", "profile", "warmup", "graph", "capture", "replay", "fusion",
    "tile", "warp", "lane", "thread", "core", "node", "draft", "verify", "accept", "reject", "prefill",
    "decode", "spec", "ngram", "medusa", "eagle", "offload", "pinned", "staging", "transfer", "copy",
)  # fmt: skip
CLASS_SUFFIXES = (
    "Manager", "Config", "Worker", "Scheduler", "Allocator", "Runner", "Builder", "Cache", "Router",
    "Tracker", "Backend", "Metadata", "Executor", "Pool", "Handler", "Spec", "State", "Buffer",
)  # fmt: skip
DIRS = (
    "engine", "worker", "v1/core", "v1/kv_offload", "v1/spec_decode", "model_executor/layers",
    "model_executor/models", "distributed", "attention/backends", "lora", "multimodal", "sampling",
)  # fmt: skip
STDLIB = (
    "abc", "asyncio", "bisect", "collections", "contextlib", "dataclasses", "enum", "functools",
    "heapq", "itertools", "json", "operator", "os", "queue", "re", "struct", "threading", "time",
    "typing", "warnings", "weakref",
)  # fmt: skip


@dataclass
class Func:
    """A function or method: its header lines and its body as statements (each a list of lines)."""

    name: str
    indent: str
    header: list[str]
    doc: str | None
    stmts: list[list[str]]
    assigns: list[int]  # indices of single-line assignment statements
    params: list[str]

    def lines(self) -> list[str]:
        body = self.indent + "    "
        out = [self.indent + h for h in self.header]
        if self.doc is not None:
            out.append(f'{body}"""{self.doc}"""')
        for stmt in self.stmts:
            out += [body + line for line in stmt]
        return out

    def copy(self) -> Func:
        return dataclasses.replace(self, stmts=[list(s) for s in self.stmts], assigns=list(self.assigns))


@dataclass
class Klass:
    name: str
    header: list[str]
    methods: list[Func]

    def lines(self) -> list[str]:
        out = list(self.header)
        for m in self.methods:
            out += ["", *m.lines()]
        return out

    def copy(self) -> Klass:
        return dataclasses.replace(self, methods=[m.copy() for m in self.methods])


@dataclass
class Module:
    doc: str
    imports: list[str]
    constants: list[str]
    items: list[Func | Klass]

    def functions(self) -> list[Func]:
        out: list[Func] = []
        for item in self.items:
            out += item.methods if isinstance(item, Klass) else [item]
        return out

    def render(self) -> bytes:
        lines = [f'"""{self.doc}"""', "", "from __future__ import annotations", ""]
        lines += [f"import {name}" for name in sorted(self.imports)]
        lines += ["", "logger = logging.getLogger(__name__)", "", *self.constants]
        for item in self.items:
            lines += ["", "", *item.lines()]
        return ("\n".join(lines) + "\n").encode()

    def copy(self) -> Module:
        return Module(self.doc, list(self.imports), list(self.constants), [i.copy() for i in self.items])


class Gen:
    """Deterministic, varied Python: identifiers from a domain vocabulary, bodies from statement templates."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def word(self) -> str:
        return self.rng.choice(WORDS)

    def ident(self, parts: int = 2) -> str:
        return "_".join(self.word() for _ in range(parts))

    def camel(self) -> str:
        return "".join(w.capitalize() for w in (self.word(), self.word())) + self.rng.choice(CLASS_SUFFIXES)

    def sentence(self) -> str:
        words = [self.word() for _ in range(self.rng.randint(4, 9))]
        return " ".join(words).capitalize() + "."

    def expr(self, names: list[str], method: bool) -> str:
        rng = self.rng
        a, b = rng.choice(names), rng.choice(names)
        n = rng.randint(1, 4096)
        f = round(rng.uniform(0.01, 8.0), 3)
        w = self.ident()
        choices = [
            f"{a} * {n}",
            f"{a} + {b}",
            f"min({a}, {b} + {n})",
            f"max({a} - {n}, 0)",
            f"len({a}) // {n}",
            f"int({a} * {f})",
            f"{a}[{n % 16}:]",
            f"math.ceil({a} / {n})",
            f"[x + {n} for x in {a}]",
            f"{{k: v for k, v in {a}.items() if v > {n}}}",
            f"{a} if {b} else {n}",
            f"sum({a}) / max(len({a}), 1)",
            f"({a} + {n}) % max({b}, 1)",
            f"{w}({a}, {b})",
            f'"{self.word()}-%d" % {a}',
            f'getattr({a}, "{w}", {n})',
            f"{a}.{w}",
            f"tuple(sorted({a}))[:{n % 32 + 1}]",
        ]
        if method:
            choices += [f"self.{w}.get({a}, {n})", f"self._{w}({a})", f"self.{w} * {f}"]
        return rng.choice(choices)

    def stmt(self, names: list[str], method: bool) -> tuple[list[str], bool]:
        """One statement (its lines, relative to the body) and whether it is a one-line assignment."""
        rng = self.rng
        r = rng.random()
        a = rng.choice(names)
        if r < 0.42:
            lhs = self.ident() if rng.random() < 0.7 else a
            line = f"{lhs} = {self.expr(names, method)}"
            names.append(lhs)
            return [line], True
        if r < 0.54:
            inner = [f"    {self.ident()} = {self.expr(names, method)}" for _ in range(rng.randint(1, 3))]
            out = [f"if {a} > {rng.randint(0, 512)}:", *inner]
            if rng.random() < 0.4:
                out += ["else:", f"    {a} = {self.expr(names, method)}"]
            return out, False
        if r < 0.63:
            i = rng.choice("ijk")
            acc = self.ident()
            return [f"for {i} in range({a}):", f"    {acc} += {rng.choice(names)}[{i}] * {rng.randint(2, 64)}"], False
        if r < 0.71:
            return [f'logger.debug("{self.sentence()[:-1].lower()}: %s", {a})'], False
        if r < 0.79:
            target = f"self._{self.ident()}" if method else self.ident()
            return [f"{target}({a}, {rng.choice(names)})"], False
        if r < 0.85:
            w = self.ident()
            return [
                "try:",
                f"    {w} = {self.expr(names, method)}",
                "except (KeyError, ValueError) as exc:",
                f'    logger.warning("{self.word()} failed: %s", exc)',
                f"    {w} = {rng.randint(0, 99)}",
            ], False
        if r < 0.91:
            return [f'assert {a} >= 0, "{self.sentence()[:-1].lower()}"'], False
        if r < 0.96 and method:
            return [f"with self._{self.word()}_lock:", f"    self.{self.ident()} = {self.expr(names, method)}"], False
        lhs = self.ident()
        names.append(lhs)
        return [f"# {self.sentence()}", f"{lhs} = {self.expr(names, method)}"], False

    def func(self, indent: str, method: bool, n_stmts: int) -> Func:
        rng = self.rng
        name = self.ident()
        if method and rng.random() < 0.15:
            name = "_" + name
        params = [self.ident() for _ in range(rng.randint(1, 4))]
        names = list(params)
        header: list[str] = []
        args = ", ".join([*(["self"] if method else []), *(f"{p}: int" for p in params)])
        header.append(f"def {name}({args}) -> {rng.choice(('int', 'float', 'list[int]', 'dict[str, int]', 'None'))}:")
        doc = self.sentence() if rng.random() < 0.8 else None
        stmts: list[list[str]] = []
        assigns: list[int] = []
        for k in range(n_stmts):
            lines, is_assign = self.stmt(names, method)
            if is_assign:
                assigns.append(k)
            stmts.append(lines)
        stmts.append([f"return {rng.choice(names)}"])
        return Func(name, indent, header, doc, stmts, assigns, params)

    def klass(self) -> Klass:
        rng = self.rng
        name = self.camel()
        base = rng.choice(("", "(object)", "(abc.ABC)", f"({self.camel()})"))
        header = [f"class {name}{base}:", f'    """{self.sentence()}"""', ""]
        header += [f"    {self.ident()}: int = {rng.randint(0, 1 << 16)}" for _ in range(rng.randint(1, 4))]
        methods = [self.func("    ", True, rng.randint(3, 13)) for _ in range(rng.randint(3, 6))]
        return Klass(name, header, methods)

    def module(self) -> Module:
        rng = self.rng
        imports = ["logging", "math", *rng.sample(STDLIB, rng.randint(2, 6))]
        constants = [f"{self.ident().upper()} = {rng.randint(1, 1 << 20)}" for _ in range(rng.randint(2, 6))]
        items: list[Func | Klass] = [self.klass() for _ in range(rng.randint(2, 4))]
        items += [self.func("", False, rng.randint(3, 12)) for _ in range(rng.randint(1, 4))]
        # Two long functions, so every module has room for a patch and, a few lines away, an upstream change.
        long_at = rng.sample(range(len(items) + 2), 2)
        for pos in sorted(long_at):
            items.insert(pos, self.func("", False, rng.randint(14, 20)))
        rng.shuffle(items)
        return Module(self.sentence(), imports, constants, items)


@dataclass(frozen=True)
class FileSet:
    """One upstream module at C1 (base) and C2 (theirs), and the patch on it (ours)."""

    name: str
    path: str
    base: bytes
    ours: bytes
    theirs: bytes
    review: bool  # upstream also changed the patched function (a review flag is expected)


def _rewrite_assign(line: str, new_rhs: str) -> str:
    lhs = line.split(" = ", 1)[0]
    return f"{lhs} = {new_rhs}"


def make_fileset(i: int) -> FileSet:
    """The three versions of module ``i``; each depends on ``i`` and SEED only (not on ``--patches``)."""
    rng = random.Random(SEED * 1_000_003 + i)  # noqa: S311 - reproducible test data, not cryptography
    gen = Gen(rng)
    directory = DIRS[i % len(DIRS)]
    stem = f"{gen.word()}_{gen.word()}_{i:04d}"
    path = f"{PACKAGE}/{directory}/{stem}.py"
    base_mod = gen.module()
    funcs = base_mod.functions()

    # The patch: a guard at the top of one long function, and a changed line just below it.
    candidates = [k for k, f in enumerate(funcs) if len(f.stmts) >= 12 and any(a >= 7 for a in f.assigns)]
    p = rng.choice(candidates)
    j = rng.randint(1, 2)
    ours_mod = base_mod.copy()
    pf = ours_mod.functions()[p]
    param = pf.params[0]
    if j in pf.assigns:
        pf.stmts[j][0] = _rewrite_assign(pf.stmts[j][0], f"{pf.stmts[j][0].split(' = ', 1)[1]} if {param} else 0")
    guard = [f"if {param} is None:  # patched: fail early", f'    raise ValueError("{pf.name}: {param} is required")']
    pf.stmts.insert(j, guard)

    # Upstream: a new import, one changed line in a function away from the patch, sometimes a new function.
    review = rng.random() < REVIEW_SHARE
    theirs_mod = base_mod.copy()
    theirs_mod.imports.append(rng.choice([m for m in STDLIB if m not in theirs_mod.imports]))
    tfuncs = theirs_mod.functions()
    others = [k for k, f in enumerate(tfuncs) if abs(k - p) >= 2 and f.assigns]
    u = rng.choice(others)
    uf = tfuncs[u]
    a = rng.choice(uf.assigns)
    uf.stmts[a][0] = _rewrite_assign(uf.stmts[a][0], gen.expr(uf.params, uf.indent != ""))
    if review:
        pf2 = tfuncs[p]
        k = rng.choice([x for x in pf2.assigns if x >= j + 4])
        pf2.stmts[k][0] = _rewrite_assign(pf2.stmts[k][0], gen.expr(pf2.params, pf2.indent != ""))
    if rng.random() < APPEND_SHARE:
        theirs_mod.items.append(gen.func("", False, rng.randint(3, 8)))
    name = stem.replace("_", "-")
    return FileSet(name, path, base_mod.render(), ours_mod.render(), theirs_mod.render(), review)


# --------------------------------------------------------------------------- building the upstream and the deployment


@dataclass(frozen=True)
class Layout:
    root: Path

    @property
    def upstream(self) -> Path:
        return self.root / "upstream"

    @property
    def pristine(self) -> Path:
        return self.root / "deployment.pristine"

    @property
    def deployment(self) -> Path:
        return self.root / "deployment"

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    @property
    def loop(self) -> Path:
        return self.root / "loop"

    @property
    def manifest(self) -> Path:
        return self.root / "manifest.json"


@dataclass(frozen=True)
class Entry:
    name: str
    path: str
    review: bool
    lines: int


@dataclass(frozen=True)
class Tree:
    c1: str
    c2: str
    entries: list[Entry]
    reused: bool
    build_seconds: float
    bytes_c1: int
    changed_lines: int  # lines upstream changed, over all files (diff C1 C2 --numstat, added + deleted)


def git(cwd: Path, *args: str, date: str | None = None) -> str:
    env = {**os.environ, **GIT_IDENTITY}
    if date is not None:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = date
    # No automatic gc: a commit of thousands of files starts one in the background, and the
    # `git gc` that packs the repository then fails with "gc is already running".
    return run_checked(PROG, ["git", "-c", "gc.auto=0", *args], cwd, env=env).stdout.decode().strip()


def want_manifest(patches: int) -> dict[str, Any]:
    return {"version": TREE_VERSION, "seed": SEED, "patches": patches}


def tree_is_current(layout: Layout, want: dict[str, Any]) -> dict[str, Any] | None:
    try:
        have: dict[str, Any] = json.loads(layout.manifest.read_text())
    except (OSError, ValueError):
        return None
    if {k: have.get(k) for k in want} != want or not have.get("complete"):
        return None
    lock = layout.pristine / "lockfile.toml"
    try:
        if sha256_hex(lock.read_bytes()) != have["lockfile_sha256"]:
            return None
    except OSError:
        return None
    for commit in (have["c1"], have["c2"]):
        done = subprocess.run(
            ["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=layout.upstream, capture_output=True, check=False
        )
        if done.returncode != 0:
            return None
    return have


def ensure_tree(layout: Layout, patches: int, patchkit: str, out: Out) -> Tree:
    """Reuse the upstream and the pristine deployment when the manifest matches; rebuild them otherwise."""
    want = want_manifest(patches)
    have = tree_is_current(layout, want)
    if have is not None:
        out.progress(f"reusing {layout.root} ({patches} patches, C1 {have['c1'][:12]}, C2 {have['c2'][:12]})")
        entries = [Entry(**e) for e in have["entries"]]
        return Tree(have["c1"], have["c2"], entries, True, 0.0, have["bytes_c1"], have["changed_lines"])

    if layout.root.exists():
        if not layout.manifest.exists():
            fail(
                PROG,
                f"{layout.root} exists but was not made by this benchmark ({layout.manifest} is missing); move it away",
            )
        out.progress(f"removing stale {layout.root}")
        shutil.rmtree(layout.root)
    layout.root.mkdir(parents=True)
    layout.manifest.write_text(json.dumps({**want, "complete": False}, indent=2) + "\n")
    started = time.perf_counter()

    out.progress(f"generating {patches} modules (base, patch, new upstream)")
    files = [make_fileset(i) for i in range(patches)]

    out.progress(f"building the upstream repository {layout.upstream}: C1, then C2")
    up = layout.upstream
    up.mkdir()
    git(up, "init", "--quiet", "--initial-branch=main")
    (up / "README.md").write_text("Generated upstream for bench/bench_rebase.py.\n")
    packages = {str(Path(f.path).parent) for f in files}
    for pkg in sorted(packages):
        for d in (Path(pkg), *Path(pkg).parents):
            if str(d) != ".":
                (up / d).mkdir(parents=True, exist_ok=True)
                (up / d / "__init__.py").touch()
    for f in files:
        (up / f.path).write_bytes(f.base)
    git(up, "add", "--all")
    git(up, "commit", "--quiet", "-m", "C1: the upstream the patches are made on", date=C1_DATE)
    c1 = git(up, "rev-parse", "HEAD")
    for f in files:
        (up / f.path).write_bytes(f.theirs)
    git(up, "commit", "--quiet", "--all", "-m", "C2: the new upstream", date=C2_DATE)
    c2 = git(up, "rev-parse", "HEAD")
    git(up, "tag", "c1", c1)
    git(up, "gc", "--quiet")  # one pack, as a real clone has; patchkit's cache clone is packed too
    numstat = git(up, "diff", "--numstat", c1, c2)
    changed = sum(int(a) + int(d) for a, d, _ in (line.split("\t", 2) for line in numstat.splitlines()))

    out.progress(f"building the deployment {layout.pristine}: {patches} overlays on C1")
    dep = layout.pristine
    run_checked(PROG, [patchkit, "init", str(dep), "--name", "bench-rebase"], cwd=layout.root)
    upstream = GitUpstream(name=UPSTREAM, git=up.resolve().as_uri(), commit=Revision(c1))
    pins: list[Patch] = []
    for f in files:
        patch_rel = f"patches/{f.name}.py"
        diff_rel = f"upstream/{f.name}.diff"
        diff = canonical_diff(f.base, f.ours, UpstreamPath(f.path))
        (dep / patch_rel).write_bytes(f.ours)
        (dep / diff_rel).write_bytes(diff)
        pins.append(
            Patch(
                name=f.name,
                kind=PatchKind.OVERLAY,
                sha256=Sha256(sha256_hex(f.ours)),
                target=ContainerPath(f"{TARGET_PREFIX}/{f.path}"),
                file=RepoPath(patch_rel),
                base=Base(
                    upstream=UPSTREAM, path=UpstreamPath(f.path), sha256=Sha256(sha256_hex(f.base)), commit=Revision(c1)
                ),
                diff=DiffPin(RepoPath(diff_rel), Sha256(sha256_hex(diff))),
                reason=f"bench: fail early in {f.path} when an argument is missing",
            )
        )
    # Thousands of `patchkit add` calls would take too long: write the lockfile through the
    # library, then let patchkit itself write SHA256SUMS.
    lock = Lockfile(name="bench-rebase", upstreams=(upstream,), patches=tuple(pins))
    (dep / "lockfile.toml").write_text(dumps(lock), encoding="utf-8")
    run_checked(PROG, [patchkit, "sums"], cwd=dep)

    tree = Tree(
        c1,
        c2,
        [Entry(f.name, f.path, f.review, f.base.count(b"\n")) for f in files],
        False,
        time.perf_counter() - started,
        sum(len(f.base) for f in files),
        changed,
    )
    manifest = {
        **want,
        "complete": True,
        "c1": c1,
        "c2": c2,
        "bytes_c1": tree.bytes_c1,
        "changed_lines": changed,
        "lockfile_sha256": sha256_hex((dep / "lockfile.toml").read_bytes()),
        "entries": [dataclasses.asdict(e) for e in tree.entries],
    }
    layout.manifest.write_text(json.dumps(manifest, indent=1) + "\n")
    return tree


def restore(layout: Layout) -> None:
    """Put the deployment back to its pristine state (never timed)."""
    if layout.deployment.exists():
        shutil.rmtree(layout.deployment)
    shutil.copytree(layout.pristine, layout.deployment, symlinks=True)


def tree_digest(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root``, outside the work area."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != ".patchkit")
        for name in filenames:
            path = Path(dirpath) / name
            out[path.relative_to(root).as_posix()] = sha256_hex(path.read_bytes())
    return out


# --------------------------------------------------------------------------- candidates

LOOP_SCRIPT = r"""
set -u
list=$1; c1=$2; c2=$3; tmp=$4
n=0; conflicts=0; errors=0
while IFS=$'\t' read -r path ours out; do
  if ! git show "$c1:$path" > "$tmp/base" || ! git show "$c2:$path" > "$tmp/theirs"; then
    errors=$((errors + 1)); continue
  fi
  git merge-file -p "$ours" "$tmp/base" "$tmp/theirs" > "$out"
  rc=$?
  if [ "$rc" -gt 0 ] && [ "$rc" -lt 128 ]; then
    conflicts=$((conflicts + 1))
  elif [ "$rc" -ne 0 ]; then
    errors=$((errors + 1))
  fi
  n=$((n + 1))
done < "$list"
echo "$n $conflicts $errors"
"""


@dataclass(frozen=True)
class LoopResult:
    merged: int
    conflicts: int
    errors: int


class GitLoop:
    """The obvious alternative: per patch, two ``git show`` and one ``git merge-file``, in bash."""

    def __init__(self, layout: Layout, tree: Tree) -> None:
        self.layout = layout
        self.tree = tree
        self.outdir = layout.loop / "out"
        self.scratch = layout.loop / "tmp"
        self.listing = layout.loop / "files.tsv"

    def prepare(self) -> None:
        """The file list, and empty output directories (never timed)."""
        shutil.rmtree(self.layout.loop, ignore_errors=True)
        self.outdir.mkdir(parents=True)
        self.scratch.mkdir()
        rows = [
            f"{e.path}\t{self.layout.pristine / 'patches' / f'{e.name}.py'}\t{self.outdir / f'{e.name}.py'}"
            for e in self.tree.entries
        ]
        self.listing.write_text("\n".join(rows) + "\n")

    def run(self) -> LoopResult:
        argv = ["bash", "-c", LOOP_SCRIPT, "bash", str(self.listing), self.tree.c1, self.tree.c2, str(self.scratch)]
        done = run_checked(PROG, argv, self.layout.upstream)
        merged, conflicts, errors = (int(x) for x in done.stdout.split())
        return LoopResult(merged, conflicts, errors)


def patchkit_env(layout: Layout, workdir: Path) -> dict[str, str]:
    """A bench-private patchkit cache, and a bytecode cache even where PYTHONDONTWRITEBYTECODE is set."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(workdir / "pycache")
    env["PATCHKIT_CACHE"] = str(layout.cache)
    return env


# --------------------------------------------------------------------------- where the time goes


class Stages:
    """Wall time of named stages, in order."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started


@contextlib.contextmanager
def counting_fsync(counter: list[float]) -> Iterator[None]:
    """Count ``os.fsync`` calls and their time (counter = [calls, seconds]) while the block runs."""
    real = os.fsync

    def fsync(fd: Any) -> None:
        started = time.perf_counter()
        real(fd)
        counter[0] += 1
        counter[1] += time.perf_counter() - started

    os.fsync = fsync
    try:
        yield
    finally:
        os.fsync = real


@dataclass
class Breakdown:
    stages: dict[str, float]
    inside: dict[str, float]  # parts of a stage, measured separately
    fsync_calls: int
    fsync_seconds: float
    outcomes: dict[str, int]
    total: float


def breakdown(layout: Layout, tree: Tree) -> Breakdown:
    """One rebase through the library calls ``patchkit rebase`` makes, with a timer around each stage.

    The stages follow ``rebase.start``/``plan``/``commit``/``persist.finish``; the
    result must equal the CLI's (the caller compares the trees).
    """
    from patchkit import diffs, merge
    from patchkit import rebase as rb
    from patchkit.cache import BlobStore
    from patchkit.hashing import sha256_bytes
    from patchkit.lockfile.model import LOCKFILE_NAME
    from patchkit.persist import expected_sums
    from patchkit.repo import Repo, write_all
    from patchkit.sources import git as git_source  # imported here so that no stage pays for gitpython
    from patchkit.sources.factory import open_source
    from patchkit.sums import FILENAME as SUMS_NAME
    from patchkit.trust import semantic

    del git_source
    t = Stages()
    started = time.perf_counter()
    repo = Repo(layout.deployment.resolve())
    with t("load lockfile.toml"):
        lock, _ = repo.read_lockfile()
    store = BlobStore(layout.cache)
    up = lock.upstream(UPSTREAM)
    if up is None:
        fail(PROG, f"no upstream {UPSTREAM} in {repo.lockfile_path}")
    with t("resolve C2 in the cached clone"):
        source = open_source(up, layout.cache, repo.root)
        new = source.snapshot(tree.c2)
    patches = [(p, p.base) for p in lock.patches if p.kind is PatchKind.OVERLAY and p.base is not None]
    with t("bases (blob cache, sha256 checked)"):
        bases = rb._bases(repo, lock, patches, source, store)
    paths = [str(b.path) for _, b in patches]
    with t("read new files (git cat-file --batch)"):
        theirs = new.read(paths)
    with t("read patches"):
        ours = {p.name: rb._ours(repo, p, bases[p.name]) for p, _ in patches}
    plan = rb.Plan(upstream=up.name, old_pin=up.pin_text, new_pin=new.pin)
    merged: dict[str, bytes] = {}
    for p, pbase in patches:
        path = str(pbase.path)
        their = theirs[path]
        if their is None:
            fail(PROG, f"{path} is missing at C2")
        with t("store new files in the blob cache"):
            store.put(their)
        with t("three-way merge (rebase_file)"):
            result = merge.rebase_file(bases[p.name], ours[p.name], their, path=path)
        with t("sha256 of new files"):
            their_sha = sha256_bytes(their)
        merged[p.name] = result.merged
        target = str(p.target)
        plan.results.append(rb.PatchResult(p.name, result.outcome, path, path, target, target, result, their_sha))
    with t("semantic checks: parse, pyflakes, imports (trust.semantic)"):
        checked = [
            semantic.Produced(
                r.name, r.new_path, merged[r.name], ours[r.name], theirs[r.new_path] or b"", bases[r.name]
            )
            for r in plan.results
            if r.merge is not None and r.outcome is not merge.Outcome.CONFLICT
        ]
        rb.mark_broken(repo, lock, plan, checked, new, lambda: None)
    with t("prepare: diffs, pins, new lockfile (rebase.prepare)"):
        new_lock, files, deletes, _ = rb.prepare(lock, plan, store)
    with t("render lockfile.toml + SHA256SUMS"):
        text = dumps(new_lock).encode()
        files[LOCKFILE_NAME] = text
        files[SUMS_NAME] = expected_sums(new_lock, text)
    fsyncs = [0.0, 0.0]
    with t("write_all: stage, fsync, rename"), counting_fsync(fsyncs):
        write_all(repo.root, files, deletes)
    total = time.perf_counter() - started

    # Parts of the merge and of prepare, timed again on their own over the same inputs.
    inside: dict[str, float] = {}
    s = time.perf_counter()
    for p, _ in patches:
        merge._python_defs(bases[p.name])
    inside["definitions of each base: ast.parse + walk (in the merge)"] = time.perf_counter() - s
    s = time.perf_counter()
    for p, _ in patches:
        ast.parse(bases[p.name])
    inside["  of which ast.parse"] = time.perf_counter() - s
    s = time.perf_counter()
    for p, pbase in patches:
        base_lines = diffs.split_lines(bases[p.name])
        merge._matching_blocks(base_lines, diffs.split_lines(ours[p.name]))
        merge._matching_blocks(base_lines, diffs.split_lines(theirs[str(pbase.path)] or b""))
    inside["line alignment, base-ours and base-theirs (in the merge)"] = time.perf_counter() - s
    s = time.perf_counter()
    for p, pbase in patches:
        canonical_diff(theirs[str(pbase.path)] or b"", merged[p.name], pbase.path)
    inside["canonical_diff of each new patch (in prepare)"] = time.perf_counter() - s
    s = time.perf_counter()
    for r in plan.results:
        if r.theirs_sha256 is not None:
            store.get(r.theirs_sha256)
    inside["blob cache reads of the new files (in prepare)"] = time.perf_counter() - s

    outcomes = Counter(r.outcome.value for r in plan.results)
    return Breakdown(t.seconds, inside, int(fsyncs[0]), fsyncs[1], dict(outcomes), total)


# --------------------------------------------------------------------------- checks of the results


@dataclass(frozen=True)
class Outcomes:
    counts: dict[str, int]
    review: int
    review_expected: int
    review_mismatch: list[str]
    committed: bool


def read_outcomes(doc: dict[str, Any], tree: Tree) -> Outcomes:
    expected = {e.name for e in tree.entries if e.review}
    flagged = {p["name"] for p in doc["patches"] if p["review"]}
    counts = Counter(p["outcome"] for p in doc["patches"])
    return Outcomes(
        dict(sorted(counts.items())),
        len(flagged),
        len(expected),
        sorted(flagged ^ expected),
        bool(doc.get("committed")),
    )


def compare_merges(layout: Layout, tree: Tree) -> list[str]:
    """Patches whose rebased file differs from git merge-file's output."""
    return [
        e.name
        for e in tree.entries
        if (layout.deployment / "patches" / f"{e.name}.py").read_bytes()
        != (layout.loop / "out" / f"{e.name}.py").read_bytes()
    ]


def pinned_commit(layout: Layout) -> str | None:
    from patchkit.lockfile.reader import loads

    lock = loads((layout.deployment / "lockfile.toml").read_text(encoding="utf-8"))
    up = lock.upstream(UPSTREAM)
    return str(up.commit) if up is not None and up.commit is not None else None


# --------------------------------------------------------------------------- start-up


def median_wall(argv: Sequence[str], cwd: Path, env: dict[str, str], runs: int) -> float:
    subprocess.run(argv, cwd=cwd, capture_output=True, check=False, env=env)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, cwd=cwd, capture_output=True, check=False, env=env)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


# --------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    p.add_argument("--patches", type=int, default=1000, help="overlays (and upstream files) to rebase (default 1000)")
    p.add_argument(
        "--workdir", type=Path, default=BENCH_DIR / "work", help="where the trees live (default bench/work/)"
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
    if shutil.which("git") is None or shutil.which("bash") is None:
        fail(PROG, "needs git and bash on PATH")
    cores = len(os.sched_getaffinity(0))
    patchkit = find_patchkit(PROG)
    workdir = args.workdir.resolve()
    layout = Layout(workdir / "rebase")
    tree = ensure_tree(layout, args.patches, patchkit, out)
    n = len(tree.entries)
    env = patchkit_env(layout, workdir)
    notes: list[str] = []

    restore(layout)
    out.progress("patchkit check on the deployment")
    run_checked(PROG, [patchkit, "check"], layout.deployment, env=env)

    # Every run starts from the same patchkit cache state: empty now, filled by the warm-up.
    shutil.rmtree(layout.cache, ignore_errors=True)
    rebase_argv = [patchkit, "rebase", "--onto", tree.c2]
    hint = f"\n(delete {layout.root} to rebuild the benchmark trees)"

    out.progress("warm-up: patchkit rebase --format json (cold patchkit cache: clones the upstream, fills the cache)")
    started = time.perf_counter()
    done = run_checked(PROG, [*rebase_argv, "--format", "json"], layout.deployment, env=env, hint=hint)
    first = time.perf_counter() - started
    outcomes = read_outcomes(json.loads(done.stdout), tree)
    if not outcomes.committed:
        fail(PROG, "the warm-up rebase did not commit")
    if pinned_commit(layout) != tree.c2:
        fail(PROG, "after the warm-up rebase, lockfile.toml does not pin C2")
    run_checked(PROG, [patchkit, "check"], layout.deployment, env=env, hint=hint)
    cli_tree = tree_digest(layout.deployment)

    loop = GitLoop(layout, tree)
    loop.prepare()
    out.progress("warm-up: the git show + git merge-file loop")
    loop_first = loop.run()
    if loop_first.merged != n or loop_first.errors:
        fail(PROG, f"the git loop merged {loop_first.merged}/{n} files with {loop_first.errors} errors")
    differ = compare_merges(layout, tree)
    if differ:
        notes.append(
            f"{len(differ)} rebased files differ from git merge-file's output (e.g. {differ[0]}): "
            "the two merges align some edits differently"
        )

    timings = {
        "patchkit": Timing("patchkit", "a", f"patchkit rebase --onto C2 ({n} overlays)"),
        "git_loop": Timing("git_loop", "b", "bash loop: 2x git show + git merge-file"),
    }
    loop_results: list[LoopResult] = []
    for r in range(args.repeat):
        out.progress(f"timed round {r + 1}/{args.repeat}")
        restore(layout)
        timings["patchkit"].seconds.append(
            timed(lambda: run_checked(PROG, rebase_argv, layout.deployment, env=env, hint=hint))
        )
        if pinned_commit(layout) != tree.c2:
            fail(PROG, f"round {r + 1}: after the rebase, lockfile.toml does not pin C2")
        loop.prepare()
        timings["git_loop"].seconds.append(timed(lambda: loop_results.append(loop.run())))
        if loop_results[-1] != loop_first:
            fail(PROG, f"round {r + 1}: the git loop gave {loop_results[-1]}, the warm-up {loop_first}")

    out.progress("where the time goes: one rebase in process, stage by stage")
    restore(layout)
    parts = breakdown(layout, tree)
    if tree_digest(layout.deployment) != cli_tree:
        notes.append("the in-process rebase wrote a different tree than the CLI: the breakdown may not match the CLI")
    restore(layout)

    out.progress("start-up times")
    python_pass = median_wall([sys.executable, "-c", "pass"], REPO_ROOT, env, 10)
    imports = median_wall(
        [sys.executable, "-c", "import patchkit.cli, patchkit.rebase, patchkit.merge, patchkit.sources.git"],
        REPO_ROOT,
        env,
        10,
    )
    git_version = git(REPO_ROOT, "--version")

    pk, lp = timings["patchkit"], timings["git_loop"]
    ratio = lp.best / pk.best
    results: dict[str, Any] = {
        "machine": {"cores": cores, "python": sys.version.split()[0], "git": git_version},
        "patchkit": patchkit,
        "tree": {
            "root": str(layout.root),
            "patches": n,
            "c1": tree.c1,
            "c2": tree.c2,
            "bytes_c1": tree.bytes_c1,
            "lines_mean": round(statistics.mean(e.lines for e in tree.entries), 1),
            "lines_min": min(e.lines for e in tree.entries),
            "lines_max": max(e.lines for e in tree.entries),
            "upstream_changed_lines": tree.changed_lines,
            "review_expected": outcomes.review_expected,
            "reused": tree.reused,
            "build_seconds": round(tree.build_seconds, 2),
        },
        "cache": "warm",
        "repeat": args.repeat,
        "first_run_cold_cache_s": round(first, 3),
        "outcomes": outcomes.counts,
        "review_flagged": outcomes.review,
        "review_mismatch": outcomes.review_mismatch,
        "git_loop": dataclasses.asdict(loop_first),
        "merges_differing_from_git": len(differ),
        "rebase": {
            t.key: {
                "tag": t.tag,
                "label": t.label,
                "seconds": [round(s, 4) for s in t.seconds],
                "best_s": round(t.best, 4),
                "median_s": round(t.median, 4),
                "ms_per_patch": round(t.best / n * 1000, 3),
            }
            for t in timings.values()
        },
        "ratios": {
            "git_loop_over_patchkit": round(ratio, 2),
            "target": TARGET_RATIO,
            "target_met": ratio >= TARGET_RATIO,
        },
        "breakdown": {
            "stages_s": {k: round(v, 4) for k, v in parts.stages.items()},
            "in_process_total_s": round(parts.total, 4),
            "inside_s": {k: round(v, 4) for k, v in parts.inside.items()},
            "fsync_calls": parts.fsync_calls,
            "fsync_s": round(parts.fsync_seconds, 4),
            "outcomes": parts.outcomes,
            "python_pass_s": round(python_pass, 4),
            "python_imports_s": round(imports, 4),
            "cli_median_minus_in_process_s": round(pk.median - parts.total, 4),
        },
        "notes": notes,
    }
    if outcomes.review_mismatch:
        notes.append(
            f"review flags differ from the designed ones for {len(outcomes.review_mismatch)} patches "
            f"(e.g. {outcomes.review_mismatch[0]})"
        )
    if parts.outcomes != outcomes.counts:
        notes.append(f"the in-process rebase found {parts.outcomes}, the CLI {outcomes.counts}")
    report(out, results)
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        sys.stdout.write("\n")
    return 0


def report(out: Out, r: dict[str, Any]) -> None:
    t, m, b = r["tree"], r["machine"], r["breakdown"]
    n = t["patches"]
    out.line()
    out.line(f"patchkit rebase benchmark: {n} overlays across one upstream bump, WARM")
    out.line("(page cache warm; patchkit's clone of the upstream and its blob cache filled by an untimed first run)")
    built = "reused" if t["reused"] else f"built in {t['build_seconds']:.1f} s"
    out.line(f"trees     {t['root']} ({built})")
    out.line(
        f"upstream  {n} Python modules, {t['bytes_c1'] / 1e6:.1f} MB, {t['lines_min']}-{t['lines_max']} lines "
        f"(mean {t['lines_mean']:.0f}); C1 {t['c1'][:12]} -> C2 {t['c2'][:12]}, "
        f"{t['upstream_changed_lines']} lines changed"
    )
    out.line(
        f"          C2 changes every file away from the patch; {t['review_expected']} files "
        f"({t['review_expected'] / n:.1%}) also inside the patched function"
    )
    out.line(f"machine   {m['cores']} usable cores; Python {m['python']}; {m['git']}")
    out.line(f"patchkit  {r['patchkit']}")
    out.line()
    counts = ", ".join(f"{v} {k}" for k, v in r["outcomes"].items())
    out.line(f"outcomes  {counts}; {r['review_flagged']} flagged for review (designed: {t['review_expected']})")
    g = r["git_loop"]
    same = n - r["merges_differing_from_git"]
    out.line(
        f"git loop  {g['merged']} merged, {g['conflicts']} conflicts, {g['errors']} errors; "
        f"{same}/{n} results byte-identical to patchkit's"
    )
    out.line(f"first patchkit run, cold patchkit cache (clone + blob cache): {r['first_run_cold_cache_s']:.2f} s")
    out.line()
    title = f"rebase (best/median of {r['repeat']})"
    out.line(f"   {title:<44} {'best s':>8} {'median s':>9} {'ms/patch':>9}")
    for row in r["rebase"].values():
        out.line(
            f"{row['tag']:<2} {row['label']:<44} {row['best_s']:8.3f} {row['median_s']:9.3f} {row['ms_per_patch']:9.2f}"
        )
    ratios = r["ratios"]
    verdict = "met" if ratios["target_met"] else "MISSED"
    out.line(
        f"ratio b / a (best): {ratios['git_loop_over_patchkit']:.1f}x  (target >= {ratios['target']:.0f}x: {verdict})"
    )
    out.line("note: the loop does less than patchkit: no lockfile, diffs, SHA256SUMS, hashing, review or transaction")
    out.line()
    out.line("where patchkit's time goes (one rebase in process, library calls timed stage by stage)")
    total = b["in_process_total_s"]
    width = max(len(k) for k in [*b["stages_s"], *b["inside_s"]]) + 2
    for name, s in b["stages_s"].items():
        out.line(f"  {name:<{width}} {s * 1000:8.0f} ms  {s / total:6.1%}")
        if name.startswith("write_all"):
            out.line(
                f"    {'of which ' + str(b['fsync_calls']) + ' fsync calls':<{width - 2}} {b['fsync_s'] * 1000:8.0f} ms"
            )
    out.line(f"  {'total in process':<{width}} {total * 1000:8.0f} ms")
    out.line("  measured again on their own:")
    for name, s in b["inside_s"].items():
        out.line(f"    {name:<{width - 2}} {s * 1000:8.0f} ms")
    out.line(f"  {'python -c pass (median)':<{width}} {b['python_pass_s'] * 1000:8.0f} ms")
    out.line(f"  {'python + patchkit imports (median)':<{width}} {b['python_imports_s'] * 1000:8.0f} ms")
    label = "CLI median - in-process total"
    out.line(f"  {label:<{width}} {b['cli_median_minus_in_process_s'] * 1000:8.0f} ms  (start-up, imports, noise)")
    for note in r["notes"]:
        out.line(f"note: {note}")


if __name__ == "__main__":
    sys.exit(main())
