"""The field tables are the one place a lockfile field is declared.

Reading, the unknown-field check and writing all follow them.
"""

from __future__ import annotations

import dataclasses
import tomllib
from typing import Any

import pytest

from patchkit.core.values import ContainerPath, Digest, Reference, RepoPath, Revision, Sha256, UpstreamPath
from patchkit.errors import LockfileError
from patchkit.lockfile import model
from patchkit.lockfile.accepted import ACCEPTED, Accepted
from patchkit.lockfile.fields import Context, Record, integer, strings, text
from patchkit.lockfile.model import (
    Artifact,
    Base,
    Derived,
    DiffPin,
    DirUpstream,
    FilePin,
    GitUpstream,
    HandDiff,
    Image,
    ImageUpstream,
    Lockfile,
    Model,
    ModelFile,
    Origin,
    Patch,
    PatchKind,
    RefState,
    Signing,
    WheelUpstream,
)
from patchkit.lockfile.reader import loads
from patchkit.lockfile.series import SERIES, SERIES_PATCH, Series, SeriesPatch
from patchkit.lockfile.tomlpos import FieldReader
from patchkit.lockfile.verified import VERIFIED, Verified
from patchkit.lockfile.writer import dumps

H = Sha256("a" * 64)
D = Digest("sha256:" + "b" * 64)
C = Revision("1" * 40)

# Every record and its table.
RECORDS: list[tuple[type, Record]] = [
    (Series, SERIES),
    (SeriesPatch, SERIES_PATCH),
    (Lockfile, model.LOCKFILE),
    (model.Deployment, model.DEPLOYMENT),
    (Image, model.IMAGE),
    (Derived, model.DERIVED),
    (Model, model.MODEL),
    (ModelFile, model.MODEL_FILE),
    (FilePin, model.FILE_PIN),
    (GitUpstream, model.UPSTREAM),
    (Patch, model.PATCH),
    (Base, model.BASE),
    (DiffPin, model.DIFF_PIN),
    (Origin, model.ORIGIN),
    (Artifact, model.TUNING),
    (Artifact, model.ARTIFACT),
    (HandDiff, model.HAND_DIFF),
    (RefState, model.REF_STATE),
    (Signing, model.SIGNING),
    (Verified, VERIFIED),
]


def every_field() -> Lockfile:
    """A lockfile with one of every record and every optional field set."""
    return Lockfile(
        name="prod",
        images=(
            Image("caddy", "caddy", D),
            Image("vllm", "vllm/vllm-openai-rocm", D, "nightly", "2025-08-04T09:10:00Z", "linux/amd64", D, "0.1", "n"),
        ),
        model=Model(
            "org/name",
            C,
            files=(
                ModelFile(UpstreamPath("config.json"), 3, blob="c" * 40),
                ModelFile(UpstreamPath("model-00001-of-00002.safetensors"), 5, sha256=H),
            ),
            ref="main",
            resolved_at="2025-08-04T09:10:00Z",
        ),
        upstreams=(
            ImageUpstream(
                "img", image="vllm/x", image_digest=D, image_tag="t", prefix=ContainerPath("/usr/lib"), platform="p"
            ),
            DirUpstream("tree", dir="vendor/tree", dir_sha256=H),
            GitUpstream("vllm", git="https://github.com/vllm-project/vllm", commit=C, version="1", note="n"),
            WheelUpstream("wheel", wheel="vllm==0.26.0", wheel_sha256=H, wheel_file="vllm.whl", version="0.26.0"),
        ),
        patches=(
            Patch(
                "p1", PatchKind.OVERLAY, H, ContainerPath("/x/a.py"), RepoPath("patches/a.py"),
                Base("vllm", UpstreamPath("a.py"), H, C, "1", Verified("vllm", D, "upstream", str(C))),
                DiffPin(RepoPath("upstream/p1.diff"), H),
                "r", (Reference("o/r#1"), Reference("o/r#2")), "w",
                accepted=Accepted("injected at start", ("undefined-name logging", "syntax")),
            ),
            Patch(
                "p2", PatchKind.OVERLAY, H, ContainerPath("/x/b.py"), RepoPath("patches/b.py"),
                origin=Origin("o/r", "abcdef1", UpstreamPath("b.py"), ("README.md",)),
                build=RepoPath("docker/Dockerfile"),
            ),
            Patch("p3", PatchKind.MODULE, H, ContainerPath("/x/c.py"), RepoPath("patches/c.py")),
        ),
        tuning=(Artifact("t", RepoPath("tuning/t.csv"), H, ContainerPath("/opt/t.csv"), "n"),),
        artifacts=(Artifact("a", RepoPath("a.sh"), H, ContainerPath("/opt/a.sh"), "x"),),
        refs=(RefState(Reference("o/r#1"), "merged", "2025", C, C, "pull", "title", "2025", "etag"),),
        signing=Signing(RepoPath("allowed_signers"), "me@example.org", (RepoPath("SHA256SUMS"), RepoPath("x"))),
        diffs=(HandDiff(RepoPath("hand/p2.diff"), H, ("p2",), "overlay"),),
        series=(
            Series(
                "vllm-queue", "vllm",
                (
                    SeriesPatch(
                        "s1", RepoPath("patches/vllm/1.patch"), H, ("tp1",), (Reference("o/r#1"),), "r", "w",
                        Accepted("os comes back in 1.2", ("undefined-name os",)),
                    ),
                ),
                C, "1", ContainerPath("/usr/lib/vllm"), 0, RepoPath("patches/vllm/series"), H,
                Verified("vllm", D, "upstream", str(C)),
            ),
        ),
        derived=(Derived("single", "vllm", "registry.example/x", D, D, D, D, "2025-08-04T09:10:00Z", "t"),),
    )  # fmt: skip


@pytest.mark.parametrize(("cls", "record"), RECORDS, ids=lambda x: getattr(x, "__name__", ""))
def test_every_model_field_has_one_table_entry(cls: type, record: Record) -> None:
    """The dataclass and its table name the same fields (a keyed table's key is the attribute read from the key)."""
    attrs = [f.attr for f in record.fields if f.attr is not None]
    if record.key is not None:
        attrs.append(record.key.attr)
    assert sorted(attrs) == sorted(f.name for f in dataclasses.fields(cls))
    assert len(set(record.keys)) == len(record.keys)


def test_the_upstream_kinds_share_the_one_upstream_table() -> None:
    for kind in model.UPSTREAM_KINDS.values():
        assert {f.name for f in dataclasses.fields(kind)} == {f.name for f in dataclasses.fields(GitUpstream)}
        assert set(kind.required) <= model.UPSTREAM.keyset


def _tables_of(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any], Record]]:
    """Each table of a written lockfile with the record whose table it is."""
    out: list[tuple[str, dict[str, Any], Record]] = [
        ("", doc, model.LOCKFILE),
        ("deployment", doc["deployment"], model.DEPLOYMENT),
    ]
    keyed = {"images": model.IMAGE, "upstreams": model.UPSTREAM, "refs": model.REF_STATE, "derived": model.DERIVED}
    for section, record in keyed.items():
        out += [(f"{section}.{k}", t, record) for k, t in doc[section].items()]
    listed = {"patches": model.PATCH, "tuning": model.TUNING, "artifacts": model.ARTIFACT, "diffs": model.HAND_DIFF}
    for section, record in listed.items():
        out += [(f"{section}[{i}]", t, record) for i, t in enumerate(doc[section])]
    for i, p in enumerate(doc["patches"]):
        subtables = (("base", model.BASE), ("diff", model.DIFF_PIN), ("origin", model.ORIGIN))
        for key, record in (*subtables, ("accepted", ACCEPTED)):
            if key in p:
                out.append((f"patches[{i}].{key}", p[key], record))
        if "verified" in p.get("base", {}):
            out.append((f"patches[{i}].base.verified", p["base"]["verified"], VERIFIED))
    for name, t in doc["series"].items():
        out.append((f"series.{name}", t, SERIES))
        if "verified" in t:
            out.append((f"series.{name}.verified", t["verified"], VERIFIED))
        out += _series_patches_of(name, t["patches"])
    out.append(("model", doc["model"], model.MODEL))
    out += [(f"model.files[{i}]", f, model.MODEL_FILE) for i, f in enumerate(doc["model"]["files"])]
    out.append(("signing", doc["signing"], model.SIGNING))
    return out


def _series_patches_of(name: str, patches: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any], Record]]:
    out: list[tuple[str, dict[str, Any], Record]] = []
    for i, p in enumerate(patches):
        out.append((f"series.{name}.patches[{i}]", p, SERIES_PATCH))
        if "accepted" in p:
            out.append((f"series.{name}.patches[{i}].accepted", p["accepted"], ACCEPTED))
    return out


def test_written_order_is_the_table_order() -> None:
    doc = tomllib.loads(dumps(every_field()))
    tables = _tables_of(doc)
    assert len(tables) == 29
    written: dict[int, set[str]] = {}
    for where, t, record in tables:
        assert list(t) == [k for k in record.keys if k in t], where
        written.setdefault(id(record), set()).update(t)
    # The sample writes every field of every table (a model has its files or a manifest), so the order covers all.
    for _, _, record in tables:
        assert record.keyset - written[id(record)] == ({"manifest"} if record is model.MODEL else set())


def test_every_field_round_trips_byte_for_byte() -> None:
    lock = every_field()
    text = dumps(lock)
    again = loads(text)
    assert again == lock and hash(again.patches[0]) == hash(lock.patches[0])
    assert dumps(again) == text


def test_the_shipped_lockfile_round_trips_byte_for_byte() -> None:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "lockfile.toml").read_text()
    assert dumps(loads(text)) == text


def _headers(text: str) -> dict[str, int]:
    """The 0-based line of the first header of each table name (``[[patches]]`` counts its first)."""
    found: dict[str, int] = {}
    for i, line in enumerate(text.split("\n")):
        if line.startswith("["):
            found.setdefault(line, i)
    return found


UNKNOWN = [
    ("[deployment]", "deployment", model.DEPLOYMENT),
    ("[images.vllm]", "images.vllm", model.IMAGE),
    ("[model]", "model", model.MODEL),
    ("[[model.files]]", "model.files[0]", model.MODEL_FILE),
    ("[upstreams.img]", "upstreams.img", model.UPSTREAM),
    ("[[patches]]", "patches[0]", model.PATCH),
    ("[patches.base]", "patches[0].base", model.BASE),
    ("[patches.diff]", "patches[0].diff", model.DIFF_PIN),
    ("[patches.origin]", "patches[1].origin", model.ORIGIN),
    ("[[tuning]]", "tuning[0]", model.TUNING),
    ("[[artifacts]]", "artifacts[0]", model.ARTIFACT),
    ("[[diffs]]", "diffs[0]", model.HAND_DIFF),
    ('[refs."o/r#1"]', "refs.o/r#1", model.REF_STATE),
    ("[signing]", "signing", model.SIGNING),
    ("[derived.single]", "derived.single", model.DERIVED),
    ("[series.vllm-queue]", "series.vllm-queue", SERIES),
    ("[[series.vllm-queue.patches]]", "series.vllm-queue.patches[0]", SERIES_PATCH),
]


@pytest.mark.parametrize(("header", "where", "record"), UNKNOWN, ids=[w for _, w, _ in UNKNOWN])
def test_an_unknown_field_is_named_with_its_line_and_the_table(header: str, where: str, record: Record) -> None:
    lines = dumps(every_field()).split("\n")
    at = _headers("\n".join(lines))[header] + 1
    lines.insert(at, "colour = 1")
    with pytest.raises(LockfileError) as e:
        loads("\n".join(lines))
    (problem,) = e.value.problems
    assert problem.render() == (
        f"lockfile.toml:{at + 1}: {where}.colour: unknown field 'colour' (known: {', '.join(record.keys)})"
    )
    assert problem.hint == "remove it or fix its spelling"


def test_an_unknown_top_level_field_lists_the_document_table() -> None:
    text = dumps(every_field()).replace("schema = 1\n", "schema = 1\ncolour = 1\n")
    with pytest.raises(LockfileError) as e:
        loads(text)
    (problem,) = e.value.problems
    assert (
        problem.render() == f"lockfile.toml:6: colour: unknown field 'colour' (known: {', '.join(model.LOCKFILE.keys)})"
    )
    assert model.LOCKFILE.keys[:6] == ("schema", "deployment", "images", "model", "upstreams", "patches")


@dataclasses.dataclass(frozen=True)
class Gadget:
    name: str
    size: int
    colour: str | None = None
    tags: tuple[str, ...] = ()


GADGET = Record(
    Gadget,
    (
        text("name", required=True),
        integer("size", lambda n: n > 0, "must be a positive integer, got {value!r}"),
        text("colour"),
        strings("tags", None, "must be an array of strings"),
    ),
)


def _read_gadget(toml: str) -> tuple[Gadget | None, list[str]]:
    r = FieldReader("gadget.toml", toml)
    found = GADGET.read(tomllib.loads(toml)["gadget"], ("gadget",), Context(r))
    return found, [p.render() for p in r.problems]


def test_a_new_record_is_its_table_alone() -> None:
    """A record nobody wrote a reader or writer for: the table reads it, checks it and writes it back in order."""
    found, problems = _read_gadget('[gadget]\ntags = ["x"]\nsize = 3\nname = "g"\n')
    assert problems == [] and found == Gadget("g", 3, None, ("x",))
    assert list(GADGET.write(found)) == ["name", "size", "tags"]
    found, problems = _read_gadget('[gadget]\nsize = 0\ncolour = 5\nshape = "round"\n')
    assert found is None
    assert problems == [
        "gadget.toml:4: gadget.shape: unknown field 'shape' (known: name, size, colour, tags)",
        "gadget.toml:1: gadget: missing required field 'name'",
        "gadget.toml:2: gadget.size: must be a positive integer, got 0",
        "gadget.toml:3: gadget.colour: must be a string, got an integer",
    ]


def test_every_record_read_is_the_object_its_constructor_makes() -> None:
    """The reader stores checked values at once where ``__init__`` would only store them: nothing else differs."""
    seen = 0
    pending: list[object] = [loads(dumps(every_field()))]
    while pending:
        obj = pending.pop()
        if isinstance(obj, tuple):
            pending += obj
            continue
        if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
            continue
        made = type(obj)(**{f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)})
        assert (made, vars(made), hash(made), repr(made)) == (obj, vars(obj), hash(obj), repr(obj))
        with pytest.raises(dataclasses.FrozenInstanceError):
            obj.name = "x"  # type: ignore[attr-defined]
        pending += [getattr(obj, f.name) for f in dataclasses.fields(obj)]
        seen += 1
    assert seen > 60


def test_patches_are_found_by_name_as_a_scan_finds_them() -> None:
    """``Lockfile.patch`` and ``Series.patch`` answer from a table, with the answers a scan gives."""
    lock = every_field()
    doubled = dataclasses.replace(lock, patches=(*lock.patches, dataclasses.replace(lock.patches[0], target=None)))
    for each in (lock, doubled):
        for p in each.patches:
            assert each.patch(p.name) is next(q for q in each.patches if q.name == p.name)  # the first of a name
        assert each.patch("nope") is None
    assert doubled.patch("p1") is lock.patches[0]
    fewer = dataclasses.replace(doubled, patches=doubled.patches[1:])  # a changed copy has its own table
    assert fewer.patch("p1") is doubled.patches[-1]
    assert doubled == dataclasses.replace(doubled)  # the table is not a field: equality is unchanged
    series = lock.series[0]
    assert series.patch("s1") is series.patches[0]
    assert series.patch("p1") is None
