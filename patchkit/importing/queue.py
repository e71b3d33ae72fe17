"""Recognising a patch-queue repository for ``patchkit import``: series, order, upstreams, profiles, pins.

A patch queue keeps ordered diffs under ``patches/<upstream>/`` (or
``patches/`` alone) and applies them at image build time. What this reads,
and from where, in this order of trust:

- **order**: a quilt ``series`` file in the patch directory; else the order
  the Containerfiles and build scripts (``*.sh``) apply the patches in, read
  statically by :mod:`patchkit.importing.shell` (arrays, ``case`` branches,
  loops over arrays and globs, ``git apply``, ``git am``, ``patch -pN -d``),
  with the ``-p`` level and the directory; else numeric prefixes
  (``0001-…``). A step that cannot be read makes the patches it may apply
  unknown (with its file and line), never "never applied";
- **upstream**: the patch directory's name; its git URL and commit from a
  JSON or TOML lock (``*lock*.json``/``*lock*.toml``), read by
  :mod:`patchkit.importing.pins` by what the keys mean (``{"vllm": {"repo": …,
  "base_commit": …}}``, at any depth; the object's key, else the repository
  it names, is the upstream), or the Containerfile's ``git clone URL`` and
  ``ARG``/``ENV`` ``<NAME>_COMMIT=SHA`` (or ``_REV``, ``_SHA``, …);
- **profiles**: files ``profiles/<name>.txt`` (or ``.list``, ``.series``)
  listing patch files; else the branches of a ``case`` on a value the
  caller sets (``$PROFILE``, ``$1``), one profile per branch; the build
  argument that picks one (``ARG PROFILE=…``) is reported with its default;
- **pins of the repository's own**: a JSON lock (``*lock*.json``) naming a
  patch file and its sha256 is checked against the file (``queue-lock-drift``);
- **images**: the lock's image references by digest, and a ``FROM`` by
  digest.

What no source states stays unknown and is reported as an issue; nothing
is invented.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from patchkit.core.hashing import sha256_bytes
from patchkit.core.values import ContainerPath, Digest, Reference, RepoPath, Revision, Sha256, check_name
from patchkit.importing import dockerfile, patchers, pins, read_inside, shell
from patchkit.lockfile.model import GitUpstream, Image, Lockfile, Patch, PatchKind, Upstream
from patchkit.lockfile.series import Series, SeriesPatch, parse_series_file
from patchkit.oci.ref import familiar_repository
from patchkit.series.parse import PatchParseError, parse_patch, pr_numbers

_SUFFIXES = (".patch", ".diff")
_URL = r"(?:https?|git|ssh|file)://[^\s\"';&|)]+|[\w.-]+@[\w.-]+:[^\s\"';&|)]+"
# ``git clone [OPTIONS] URL``: the URL written, or a variable holding it (options that take a value skipped).
_CLONE = re.compile(
    r"git\s+clone\s+(?:(?:-b|--branch|-o|--origin|--depth|-c|--config|--reference|-j|--jobs|--filter|--template)"
    rf"\s+\S+\s+|-\S+\s+)*[\"']?(?P<url>{_URL}|\$\{{?\w+\}}?)"
)
_PROFILE_ARG = re.compile(r"[A-Z_]*PROFILE[A-Z_]*")
_FROM_DIGEST = re.compile(r"\S+@sha256:[0-9a-f]{64}")
_FULL_COMMIT = re.compile(r"[0-9a-f]{40}")
# A checkout of a commit in the current clone, or in the directory ``git -C`` names: the ref it checks out.
_CHECKOUT = re.compile(r"git\s+(?:-C\s+\S+\s+)?checkout\s+(?:-[-\w]+\s+)*(?P<ref>[^\s;&|)]+)")
_DIGEST_REF = re.compile(r"^(?P<repo>[^@\s]+?)(?::[\w.-]+)?@(?P<digest>sha256:[0-9a-f]{64})$")
_GITHUB = re.compile(r"github\.com[/:](?P<owner>[\w.-]+)/(?P<repo>[\w.-]+?)(?:\.git)?/?$")


@dataclass
class Found:
    """What the queue recognition found: the lockfile parts, and every issue as (kind, file, line, message, fix)."""

    series: list[Series] = field(default_factory=list)
    upstreams: list[Upstream] = field(default_factory=list)
    images: list[Image] = field(default_factory=list)
    artifacts: list[tuple[str, str]] = field(default_factory=list)  # (name, repository path) to pin
    patches: list[Patch] = field(default_factory=list)  # patcher scripts the build runs, as transformers
    issues: list[tuple[str, str, int | None, str, str | None]] = field(default_factory=list)


def has_queue(root: Path) -> bool:
    """Whether ``root`` keeps patches under ``patches/``."""
    return (
        any(p.suffix in _SUFFIXES for p in (root / "patches").rglob("*") if p.is_file())
        if (root / "patches").is_dir()
        else False
    )


def read_build(root: Path) -> tuple[list[str], shell.Reading]:
    """The repository's build files, and what they apply and run, read statically."""
    builds = build_files(root)
    reading = shell.BuildReader(root).read(
        [rel for rel in builds if not rel.endswith(".sh")], [rel for rel in builds if rel.endswith(".sh")]
    )
    return builds, reading


def applied_files(reading: shell.Reading) -> set[str]:
    """The repository's patch files a build step applies (a series under ``patches/<upstream>/``, or not)."""
    return {a.repo for a in reading.applies if a.repo and a.repo.endswith(_SUFFIXES)}


def recognise(root: Path, only: set[str] | None = None) -> Found:
    """Read the patch queue of the repository at ``root``.

    With ``only`` (a compose repository whose Containerfile applies patches),
    just the patch directories holding those files are series, and patcher
    scripts are left to the compose import.
    """
    found = Found()
    builds, reading = read_build(root)
    texts = {rel: read_inside(root, rel, "a build file").decode("utf-8", "replace") for rel in builds}
    locks = _locks(root, found)
    groups = {n: fs for n, fs in _groups(root).items() if only is None or any(f in only for f in fs)}
    for name, files in sorted(groups.items()):
        _one(root, name, files, texts, reading, locks, found)
    found.artifacts += [(_artifact_name(rel), rel) for rel in _outside(reading)]  # pinned as files only
    found.issues += outside_issues(reading)
    _unknowns(reading, found)
    if only is None:  # a compose repository's import reports these itself
        _patchers(root, reading, found)
        found.issues += edit_issues(reading)
    stack_locks(root, [f for files in groups.values() for f in files], found)
    for rel, text in texts.items():
        if not rel.endswith(".sh"):
            _containerfile(rel, text, found)
        found.artifacts.append((_artifact_name(rel), rel))
    return found


def _outside(reading: shell.Reading) -> list[str]:
    """The patch files the build applies from outside ``patches/``, sorted."""
    return sorted(f for f in applied_files(reading) if not f.startswith("patches/"))


def outside_issues(reading: shell.Reading) -> list[tuple[str, str, int | None, str, str | None]]:
    """Each patch file the build applies from outside ``patches/<upstream>/`` (import pins it as a file only):
    ``patchkit check`` repeats it while the build still applies it from there."""
    out: list[tuple[str, str, int | None, str, str | None]] = []
    for rel in _outside(reading):
        a = next(a for a in reading.applies if a.repo == rel)
        out.append(
            (
                "queue-upstream-unknown",
                a.file,
                a.line,
                f"{a.tool} applies {rel}, which is not under patches/<upstream>/: no series says which upstream "
                "it patches, so it is pinned as a file only",
                "move it to patches/<upstream>/ (e.g. patches/vllm/) and import again",
            )
        )
    return out


def _containerfile(rel: str, text: str, found: Found) -> None:
    """A base image written by digest is pinned; an ``ARG`` named for a profile picks one, and is said."""
    for ins in dockerfile.instructions(text):
        words = ins.flags()[1].split()
        if ins.word == "FROM" and words and _FROM_DIGEST.match(words[0]):
            _image(found, "base", words[0], rel)
        if ins.word != "ARG" or len(words) != 1:
            continue
        name, _, default = words[0].partition("=")
        if _PROFILE_ARG.fullmatch(name):
            found.issues.append(
                (
                    "queue-profile-arg",
                    rel,
                    ins.line,
                    f"the build argument {name} picks the profile (default {default or 'unset'}); "
                    "patchkit apply --profile and emit --series-profile take its value",
                    None,
                )
            )


def build_files(root: Path) -> list[str]:
    """Containerfiles, Dockerfiles and shell scripts of the repository (scripts under ``patches/`` too), sorted."""
    out = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if not p.is_file() or rel.startswith(".git/") or (rel.startswith("patches/") and p.suffix != ".sh"):
            continue
        if p.name.startswith(("Containerfile", "Dockerfile")) or p.suffix == ".sh":
            out.append(rel)
    return out


def _groups(root: Path) -> dict[str, list[str]]:
    """Patch files by the upstream they apply to: ``patches/<name>/…``, or ``patches/`` itself (name unknown)."""
    groups: dict[str, list[str]] = {}
    for p in sorted((root / "patches").rglob("*")):
        if p.is_file() and p.suffix in _SUFFIXES:
            parts = p.relative_to(root / "patches").parts
            groups.setdefault(parts[0] if len(parts) > 1 else "", []).append(p.relative_to(root).as_posix())
    return groups


def _one(
    root: Path,
    name: str,
    files: list[str],
    texts: dict[str, str],
    reading: shell.Reading,
    locks: dict[str, dict[str, Any]],
    found: Found,
) -> None:
    here = f"patches/{name}" if name else "patches"
    if not name:
        found.artifacts += [(_artifact_name(rel), rel) for rel in files]  # pinned as files, not dropped
        found.issues.append(
            (
                "queue-upstream-unknown",
                here,
                None,
                f"patches directly under patches/ name no upstream ({', '.join(files)}): pinned as files only",
                "move them to patches/<upstream>/",
            )
        )
        return
    order, series_file = _order(root, here, files, reading, found)
    pin = locks.get(name, {})
    url, commit = pin.get("url"), pin.get("commit")
    for rel, text in texts.items():
        url = url or _clone_url(text, name)
        if commit is None and not rel.endswith(".sh"):
            stated = pins.from_dockerfile(rel, text)
            commit = next(
                (p.value for p in stated if _states_commit(p, name) and _FULL_COMMIT.fullmatch(p.value)), None
            )
    commit = commit or _checked_out(texts, name)
    if commit is None:
        found.issues.append(
            (
                "queue-commit-unknown",
                here,
                None,
                f"no lock or build file states the {name} commit the series applies to",
                f"set series.{name}.commit",
            )
        )
    if url is None:
        found.issues.append(
            (
                "queue-url-unknown",
                here,
                None,
                f"no lock or build file states where {name} comes from",
                f"set upstreams.{name}.git",
            )
        )
    github = _GITHUB.search(url or "")
    profiles = _profiles(root, files, found) or _script_profiles(files, reading)
    applies = [a for a in reading.applies if a.repo in files]
    strip = _strip(here, applies, found)
    patches = []
    for rel in order:
        data = read_inside(root, rel, f"a patch of {here}")
        stem = PurePosixPath(rel).name.rsplit(".", 1)[0]
        refs: tuple[Reference, ...] = ()
        subject = None
        try:
            subject = parse_patch(data, rel, strip=strip).subject
        except PatchParseError as e:
            found.issues.append(("queue-patch-parse", e.file, e.line, e.detail, e.hint))
        if github is not None:
            refs = tuple(Reference(f"{github['owner']}/{github['repo']}#{n}") for n in pr_numbers(stem, subject))
        patches.append(
            SeriesPatch(
                name=_patch_name(stem),
                file=RepoPath(rel),
                sha256=Sha256(sha256_bytes(data)),
                profiles=tuple(sorted(p for p, listed in profiles.items() if rel in listed)),
                refs=refs,
                reason=subject,
            )
        )
    try:
        check_name(name, "series name")
    except ValueError as e:
        found.issues.append(("queue-upstream-unknown", here, None, str(e), "rename the directory"))
        return
    found.upstreams.append(GitUpstream(name=name, git=url, commit=Revision(commit) if commit else None))
    found.series.append(
        Series(
            name=name,
            upstream=name,
            patches=tuple(patches),
            commit=Revision(commit) if commit else None,
            series_file=RepoPath(series_file) if series_file else None,
            strip=strip,
            target=_target(applies),
            series_sha256=Sha256(sha256_bytes(read_inside(root, series_file, "a series file")))
            if series_file
            else None,
        )
    )


def _order(
    root: Path, here: str, files: list[str], reading: shell.Reading, found: Found
) -> tuple[list[str], str | None]:
    series = root / here / "series"
    if series.is_file():
        listed = [f"{here}/{n}" for n in parse_series_file(read_inside(root, f"{here}/series", "a series file"))]
        missing = [x for x in listed if x not in files]
        for x in missing:
            found.issues.append(
                ("queue-order", f"{here}/series", None, f"lists {x}, which does not exist", "remove the line")
            )
        unlisted = [f for f in files if f not in listed]
        for x in unlisted:
            found.issues.append(
                (
                    "queue-order",
                    f"{here}/series",
                    None,
                    f"{x} is not listed, so it never applies",
                    "list it or delete it",
                )
            )
        return [x for x in listed if x in files], f"{here}/series"
    named = _applied_order(here, files, reading, found)
    if named:
        for x in (f for f in files if f not in named):
            _not_applied(x, reading, found)
        return named, None
    if reading.unknowns:
        for x in files:
            _not_applied(x, reading, found)
        u = reading.unknowns[0]
        found.issues.append(
            (
                "queue-order",
                here,
                None,
                f"the order is unknown ({u.file}:{u.line}: {u.reason}); taken by name",
                f"write {here}/series, or apply the patches in a form import reads",
            )
        )
        return files, None
    if all(re.match(r"\d+[-_]", PurePosixPath(f).name) for f in files):
        return sorted(files, key=lambda f: int(re.match(r"\d+", PurePosixPath(f).name).group())), None  # type: ignore[union-attr]
    found.issues.append(
        (
            "queue-order",
            here,
            None,
            "no series file, build step or numeric prefix states the order; taken by name",
            f"write {here}/series",
        )
    )
    return files, None


def _patchers(root: Path, reading: shell.Reading, found: Found) -> None:
    """The patcher scripts the build runs become transformers, each with what it edits."""
    for run in patchers.run_by_build(root, reading):
        where = f"{run.file}:{run.line}"
        found.issues.extend(patchers.issues(run.patcher, run.rel))
        if run.target is None or _container_path(run.target) is None:
            found.issues.append(
                (
                    "patcher-outside-image",
                    run.file,
                    run.line,
                    f"runs the patcher {run.rel} from outside the image, so it has no path in it to pin",
                    "COPY it into the image and run it there",
                )
            )
            continue
        found.patches.append(
            Patch(
                name=unique(_patch_name(PurePosixPath(run.rel).stem), {p.name for p in found.patches}),
                kind=PatchKind.TRANSFORMER,
                sha256=Sha256(sha256_bytes(run.data)),
                target=ContainerPath(run.target),
                file=RepoPath(run.rel),
                reason=patchers.reason(run.patcher, where),
            )
        )


def _container_path(path: str) -> ContainerPath | None:
    try:
        return ContainerPath(path)
    except ValueError:
        return None


def unique(name: str, used: set[str]) -> str:
    """``name``, or ``name-2``, ``name-3``… : the first that ``used`` does not hold."""
    out, n = name, 2
    while out in used:
        out, n = f"{name}-{n}", n + 1
    return out


def _applied_order(here: str, files: list[str], reading: shell.Reading, found: Found) -> list[str]:
    """The order the build applies the patches of ``files`` in: each reading's order, merged.

    A file one profile applies and another does not goes before the first
    file after it that is already placed, so every profile's order holds;
    two profiles applying the same files in different orders are reported.
    """
    sequences: dict[tuple[str, str | None], list[str]] = {}
    for a in reading.applies:
        if a.repo in files:
            seq = sequences.setdefault((a.file, a.profile), [])
            if a.repo not in seq:
                seq.append(a.repo)
    merged: list[str] = []
    for seq in sequences.values():
        for k, f in enumerate(seq):
            if f in merged:
                continue
            after = next((merged.index(g) for g in seq[k + 1 :] if g in merged), len(merged))
            merged.insert(after, f)
    for (file, profile), seq in sequences.items():
        if [f for f in merged if f in seq] != seq:
            found.issues.append(
                (
                    "queue-order",
                    file,
                    None,
                    f"{here}: profile {profile or '(every)'} applies its patches in another order than the others",
                    "apply the patches in one order in every profile",
                )
            )
    return merged


def _not_applied(rel: str, reading: shell.Reading, found: Found) -> None:
    """A patch no step read applies: never applied when everything was read; unknown when a step was not."""
    read = ", ".join(sorted({a.file for a in reading.applies})) or "no build file"
    if reading.unknowns:
        u = reading.unknowns[0]
        found.issues.append(
            (
                "queue-apply-unknown",
                u.file,
                u.line,
                f"whether {rel} is applied is unknown: {u.reason}",
                "write the step in a form import reads (docs/import.md), or list the order in a series file",
            )
        )
        return
    found.issues.append(("queue-order", rel, None, f"{rel} is never applied (read: {read})", "apply it or delete it"))


def edit_issues(reading: shell.Reading) -> list[tuple[str, str, int | None, str, str | None]]:
    """Each in-place edit of an installed package's file a build step makes (``sed -i``): an unanchored patch;
    one of a path the build computes, when no word tells the package file, is unknown (a note)."""
    return (
        [
            (
                "build-edit-unanchored",
                e.file,
                e.line,
                f"{e.tool} edits {e.upstream} in the image in place, unchecked: when upstream moves the text it looks "
                "for, nothing is patched and nothing fails, and no patch in the lockfile says what it changes",
                "apply a patch file instead (git apply fails on a moved hunk), or a patcher script that checks its "
                "anchor (docs/import.md)",
            )
            for e in reading.edits
        ]
        + [issue for file, line, code in reading.inline if (issue := _inline_issue(file, line, code)) is not None]
        + [
            (
                "build-step-unknown",
                u.file,
                u.line,
                f"whether a build step edits an installed package in place cannot be told statically: {u.reason}",
                "edit a fixed path (…/site-packages/vllm/x.py), or apply a patch file instead (docs/import.md)",
            )
            for u in reading.computed
        ]
    )


def _inline_issue(file: str, line: int, code: str) -> tuple[str, str, int | None, str, str | None] | None:
    """A patcher written inline (``python3 -c …``, ``RUN python3 - <<PY``) that does not check its anchor."""
    p = patchers.read(code.encode())
    if p is None or p.anchored:
        return None
    edits = ", ".join(t for t, _ in p.targets) or "a file no static reading finds"
    return (
        "build-edit-unanchored",
        file,
        line,
        f"an inline Python patcher edits {edits} in the image, unchecked: when upstream moves the text it "
        "replaces, nothing is patched and nothing fails, and no patch in the lockfile says what it changes",
        "check the old text is there and fail if not (assert OLD in src), or make it a patcher script the "
        "build runs (docs/import.md)",
    )


def _unknowns(reading: shell.Reading, found: Found) -> None:
    for u in reading.unknowns:
        found.issues.append(
            (
                "build-step-unknown",
                u.file,
                u.line,
                f"a build step that may apply patches cannot be read statically: {u.reason}",
                "write it in a form import reads (docs/import.md)",
            )
        )


def _script_profiles(files: list[str], reading: shell.Reading) -> dict[str, set[str]]:
    """Profiles from the case branches of the build: each branch's patches; none when nothing picks one."""
    if not reading.profiles:
        return {}
    out: dict[str, set[str]] = {p: set() for p in reading.profiles}
    everywhere = {a.repo for a in reading.applies if a.profile is None and a.repo in files}
    for a in reading.applies:
        if a.repo in files and a.profile is not None:
            out[a.profile].add(a.repo)
    for chosen in out.values():
        chosen |= everywhere
    return out


def _strip(here: str, applies: list[shell.Apply], found: Found) -> int:
    """The ``-p`` level the build applies the series with; several, or patch(1) without ``-p``, reported."""
    levels = {a.strip for a in applies}
    if len(levels) > 1:
        where = ", ".join(f"{a.file}:{a.line} -p{a.strip if a.strip is not None else ' (none)'}" for a in applies)
        found.issues.append(
            ("queue-strip", here, None, f"applied with different -p levels ({where})", "apply with one -p level")
        )
    elif levels == {None}:
        a = applies[0]
        found.issues.append(
            (
                "queue-strip",
                a.file,
                a.line,
                f"{here}: patch without -p strips every directory of the paths; the series records -p1",
                "give patch its -p level",
            )
        )
    level = next((a.strip for a in applies if a.strip is not None), 1)
    if not 0 <= level <= 8:
        a = applies[0]
        found.issues.append(
            ("queue-strip", a.file, a.line, f"{here}: -p{level} strips more than a series records (0 to 8)", None)
        )
        return 1
    return level


def strip_issues(here: str, applies: list[shell.Apply]) -> list[tuple[str, str, int | None, str, str | None]]:
    """What ``_strip`` reports of the steps applying the series at ``here``: several ``-p`` levels, or none."""
    found = Found()
    _strip(here, applies, found)
    return found.issues


def _target(applies: list[shell.Apply]) -> ContainerPath | None:
    """Where the build applies the series in the image, when every step names the same absolute directory."""
    dirs = {a.directory for a in applies}
    if len(dirs) != 1:
        return None
    d = next(iter(dirs))
    if d is None or not d.startswith("/") or d.startswith(shell.REPO) or d == "/":
        return None
    try:
        return ContainerPath(d)
    except ValueError:
        return None


def stack_locks(root: Path, files: list[str], found: Found) -> None:
    """A JSON lock of the repository's own that pins each patch's sha256: every pin checked against the file.

    Such a lock (``stack.lock.json``, ``patches.lock.json``) is what the
    repository's build verifies; a pin the file no longer has is reported
    (``queue-lock-drift``) at the lock's line, with the patch's sha256 now.
    """
    for rel in _json_locks(root):
        data = read_inside(root, rel, "a lock of patch pins")
        text = data.decode("utf-8", "replace")
        try:
            doc = pins.document(rel, data)
        except (ValueError, RecursionError):
            continue  # reported by _locks when it is at the top; a lock we cannot read pins nothing we check
        if patch_pins(doc) and all(r != rel for _, r in found.artifacts):
            found.artifacts.append((_artifact_name(rel), rel))  # pinned: check keeps comparing it
        for name, digest in patch_pins(doc):
            hit = next((f for f in files if f == name or PurePosixPath(f).name == PurePosixPath(name).name), None)
            line = text[: max(text.find(digest), 0)].count("\n") + 1
            if hit is None:
                found.issues.append(
                    ("queue-lock-drift", rel, line, f"pins {name}, which is no patch file", "remove the pin")
                )
                continue
            now = sha256_bytes(read_inside(root, hit, "a patch"))
            if now != digest.lower():
                found.issues.append(
                    (
                        "queue-lock-drift",
                        rel,
                        line,
                        f"pins {name} at sha256 {digest[:12]}…, but {hit} is {now[:12]}… now",
                        f"update the pin to {now} (or restore the patch)",
                    )
                )


def _json_locks(root: Path) -> list[str]:
    out = []
    for top in (root, root / "patches"):
        if not top.is_dir():
            continue
        for p in sorted(top.rglob("*.json") if top != root else top.glob("*.json")):
            if "lock" in p.name.lower() and p.is_file() and not p.is_symlink():
                out.append(p.relative_to(root).as_posix())
    return out


def patch_pins(doc: Any) -> list[tuple[str, str]]:
    """(patch file, sha256) for every object of the document naming a ``.patch``/``.diff`` and a sha256."""
    out: list[tuple[str, str]] = []
    stack = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(reversed(node))
        elif isinstance(node, dict):
            name = next((v for v in node.values() if isinstance(v, str) and v.endswith(_SUFFIXES)), None)
            digest = next(
                (
                    v.removeprefix("sha256:")
                    for k, v in node.items()
                    if isinstance(v, str)
                    and "sha" in str(k).lower()
                    and re.fullmatch(r"(?:sha256:)?[0-9a-fA-F]{64}", v)
                ),
                None,
            )
            if name is not None and digest is not None:
                out.append((name, digest))
            for k, v in node.items():
                if isinstance(v, str) and str(k).endswith(_SUFFIXES) and re.fullmatch(r"(?:sha256:)?[0-9a-f]{64}", v):
                    out.append((str(k), v.removeprefix("sha256:")))
            stack.extend(v for v in node.values() if isinstance(v, dict | list))
    return out


def _profiles(root: Path, files: list[str], found: Found) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    folder = root / "profiles"
    if not folder.is_dir():
        return out
    for p in sorted(folder.iterdir()):
        if p.suffix not in (".txt", ".list", ".series") or not p.is_file():
            continue
        rel = p.relative_to(root).as_posix()
        names = parse_series_file(read_inside(root, rel, "a profile"))
        chosen = set()
        for n in names:
            hit = next(
                (f for f in files if f.endswith("/" + n) or PurePosixPath(f).name == PurePosixPath(n).name), None
            )
            if hit is None:
                if not any(PurePosixPath(f).name == PurePosixPath(n).name for f in _all(root)):
                    found.issues.append(
                        ("queue-profile", rel, None, f"names {n}, which no patch file is", "fix the name")
                    )
                continue
            chosen.add(hit)
        out[p.stem] = chosen
        found.artifacts.append((_artifact_name(rel), rel))
    return out


def _all(root: Path) -> list[str]:
    return [p.relative_to(root).as_posix() for p in (root / "patches").rglob("*") if p.is_file()]


def _locks(root: Path, found: Found) -> dict[str, dict[str, Any]]:
    """Upstream pins from a hand-made JSON or TOML lock (read by ``pins``); its image references become image pins."""
    out: dict[str, dict[str, Any]] = {}
    for p in sorted(root.iterdir()):
        if not p.is_file() or "lock" not in p.name.lower() or p.suffix not in (".json", ".toml"):
            continue
        if p.name == "lockfile.toml":
            continue  # patchkit's own (written by the import): no hand-kept pins
        rel = p.name
        data = read_inside(root, rel, "a lock of upstream pins")
        try:
            doc = pins.document(rel, data)
        except (ValueError, UnicodeDecodeError, RecursionError) as e:
            why = "nested too deeply" if isinstance(e, RecursionError) else str(e)
            found.issues.append(
                ("queue-lock", rel, None, f"does not parse ({why})", "fix it; its pins are not carried over")
            )
            continue
        if not isinstance(doc, dict):
            continue
        found.artifacts.append((_artifact_name(rel), rel))
        try:
            stated = pins.document_pins(rel, data.decode("utf-8", "replace"), doc)
        except RecursionError:
            stated = []
        _lock_upstreams(rel, stated, out, found)
        images = doc.get("images", {})
        for key, value in images.items() if isinstance(images, dict) else ():
            ref = value if isinstance(value, str) else value.get("image") if isinstance(value, dict) else None
            if isinstance(ref, str):
                _image(found, str(key), ref, rel)
    return out


def _states_commit(pin: pins.Pin, name: str) -> bool:
    """Whether ``pin`` is the base commit of the upstream ``name`` (a patch directory's name)."""
    return pin.what == "commit" and name.lower() in (pin.name, (pin.under or "").lower())


def _lock_upstreams(rel: str, stated: list[pins.Pin], out: dict[str, dict[str, Any]], found: Found) -> None:
    """Each upstream a lock pins the commit of (by the object's key, else by what the pin names), with its git URL."""
    for pin in stated:
        if pin.what != "commit":
            continue
        name = pin.under if pin.under not in (None, "upstreams") else pin.name
        if not name or name in out:
            continue
        if not _FULL_COMMIT.fullmatch(pin.value):
            found.issues.append(
                (
                    "queue-lock",
                    rel,
                    None,
                    f"{name}.{pin.key} {pin.value!r} is not a full commit",
                    "pin the full 40-hex commit",
                )
            )
            continue
        url = next((p.value for p in stated if p.what == "git" and (p.under, p.name) == (pin.under, pin.name)), None)
        out[name] = {"commit": pin.value, "url": url}


def _image(found: Found, name: str, ref: str, rel: str) -> None:
    m = _DIGEST_REF.match(ref)
    if m is None:
        found.issues.append(
            (
                "queue-image-unpinned",
                rel,
                None,
                f"image {name} {ref!r} is not pinned by digest",
                f"patchkit image pin {name} {ref}",
            )
        )
        return
    if any(i.digest == Digest(m["digest"]) for i in found.images):
        return
    repository = familiar_repository(m["repo"])
    found.images.append(Image(name=_patch_name(name), repository=repository, digest=Digest(m["digest"])))


def _clones(text: str, name: str) -> list[tuple[str, int, int]]:
    """Each ``git clone`` of ``name`` in ``text``: its URL (a variable read from the file's one assignment of it),
    and where what follows it starts and ends (the next clone)."""
    clones = list(_CLONE.finditer(text))
    out = []
    for k, m in enumerate(clones):
        url = _literal(text, m.group("url"), _URL)
        if url.rstrip("/").removesuffix(".git").rsplit("/", 1)[-1].lower() == name.lower() and "$" not in url:
            out.append((url, m.end(), clones[k + 1].start() if k + 1 < len(clones) else len(text)))
    return out


def _checked_out(texts: dict[str, str], name: str) -> str | None:
    """The one full commit the build checks out in its clone of ``name`` (``git clone …/name.git && cd name &&
    git checkout <sha>``, ``git -C DIR checkout $SHA`` with ``SHA=<sha>`` set in the same file), read from what
    follows the clone up to the next one. None when no file, or more than one commit, is stated that way: a
    branch, an abbreviation or a variable with no literal value is no pin."""
    found: set[str] = set()
    for text in texts.values():
        for _, start, end in _clones(text, name):
            found.update(_literal(text, ref, "[0-9a-f]{40}") for ref in _CHECKOUT.findall(text[start:end]))
    return found.pop() if len(found) == 1 and _FULL_COMMIT.fullmatch(next(iter(found))) else None


def _literal(text: str, word: str, value: str) -> str:
    """``word``, or for a ``$VAR``/``${VAR}`` the value (of the form ``value``) of the file's one assignment of it
    (shell, ``ARG``, ``ENV``); the word itself when there is no such one."""
    var = re.fullmatch(r"\$\{?(\w+)\}?", word)
    if var is None:
        return word
    values = set(re.findall(rf"(?m)^\s*(?:export\s+|ARG\s+|ENV\s+)?{var[1]}=[\"']?({value})[\"']?\s*(?:#.*)?$", text))
    return values.pop() if len(values) == 1 else word


def _clone_url(text: str, name: str) -> str | None:
    return next((url for url, _, _ in _clones(text, name)), None)


def _patch_name(stem: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", stem.lower()).strip("-._") or "patch"


def _artifact_name(rel: str) -> str:
    return _patch_name(rel.replace("/", "-"))


def to_lockfile(root: Path, found: Found) -> Lockfile:
    """The lockfile of a patch-queue repository: upstreams, series, images, and its build files as artifacts."""
    from patchkit.lockfile.model import Artifact

    used = {p.name for p in found.patches}
    artifacts = []
    for n, rel in {rel: (n, rel) for n, rel in found.artifacts}.values():
        name = unique(n, used)
        used.add(name)
        data = read_inside(root, rel, "a build file")
        artifacts.append(Artifact(name=name, file=RepoPath(rel), sha256=Sha256(sha256_bytes(data))))
    return Lockfile(
        name=_patch_name(root.name),
        images=tuple(found.images),
        upstreams=tuple(u for u in found.upstreams),
        artifacts=tuple(artifacts),
        patches=tuple(found.patches),
        series=tuple(found.series),
    )


def lock_issues(root: Path) -> list[tuple[str, str, int | None, str, str | None]]:
    """What reading the repository's top-level lock files reports (``queue-lock``, ``queue-image-unpinned``),
    exactly as import reads them: ``patchkit check`` repeats it while it holds."""
    found = Found()
    _locks(root, found)
    return found.issues


def profile_issues(root: Path, files: list[str]) -> list[tuple[str, str, int | None, str, str | None]]:
    """What reading ``profiles/`` against the patch files ``files`` reports (``queue-profile``), exactly as import
    reads it: ``patchkit check`` repeats it while it holds."""
    found = Found()
    _profiles(root, files, found)
    return found.issues


def order_issues(
    here: str, files: list[str], reading: shell.Reading
) -> list[tuple[str, str, int | None, str, str | None]]:
    """What the order the build applies ``files`` in reports (``queue-order``: profiles applying them in different
    orders), exactly as import reads it: ``patchkit check`` repeats it while it holds."""
    found = Found()
    _applied_order(here, files, reading, found)
    return found.issues
