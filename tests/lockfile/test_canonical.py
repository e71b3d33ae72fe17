"""The canonical form: what the writer writes reads back to the same lockfile and is told canonical; an edit is not.

Over many generated lockfiles and thousands of edits of them (canonical or
not, valid or not), ``pins.canonical`` says what rendering and comparing
says, a text ``tomllib`` refuses is refused with its line, and the shipped
lockfile is written back byte for byte.
"""

from __future__ import annotations

import dataclasses
import random
import tomllib
from collections.abc import Callable
from typing import Any

from patchkit.check import pins
from patchkit.check.state import State
from patchkit.core.values import ContainerPath, Digest, Reference, RepoPath, Revision, Sha256, UpstreamPath
from patchkit.errors import LockfileError
from patchkit.lockfile.model import (
    Artifact,
    Base,
    Derived,
    DiffPin,
    DirUpstream,
    GitUpstream,
    HandDiff,
    Image,
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
from patchkit.lockfile.series import Series, SeriesPatch
from patchkit.lockfile.writer import dumps
from tests.check.memory import MemoryView
from tests.lockfile.test_fields import every_field

# Free text as users write it: plain, or with what needs an escape (then the text is not plain, and is rendered).
WORDS = ["fix", "the", "KV", "fence", "→", "é", "a-b", "x_y", "1.2", "#7", "[ok]", "a = b", "'q'"]
ODD = ['"', "\\", "\t", "\n", "\x7f"]


def _text(rng: random.Random, odd: float = 0.05) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(1, 5))]
    if rng.random() < odd:
        words.insert(rng.randrange(len(words) + 1), rng.choice(ODD))
    return " ".join(words)


def _hex(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def _maybe(rng: random.Random, make: Callable[[], Any]) -> Any:
    return make() if rng.random() < 0.5 else None


def _note(rng: random.Random) -> str | None:
    return _maybe(rng, lambda: _text(rng))


def _refs(rng: random.Random) -> tuple[Reference, ...]:
    return tuple(Reference(f"o/r#{rng.randint(1, 40)}") for _ in range(rng.choice((0, 0, 1, 2, 3))))


def _images(rng: random.Random) -> tuple[Image, ...]:
    def image(i: int) -> Image:
        digest = Digest("sha256:" + _hex(rng, 64))
        return Image(
            f"img{i}",
            rng.choice(("caddy", "vllm/vllm-openai-rocm")),
            digest,
            _maybe(rng, lambda: "nightly"),
            _maybe(rng, lambda: "2025-08-04T09:10:00Z"),
            _maybe(rng, lambda: "linux/amd64"),
            _maybe(rng, lambda: digest),
            _maybe(rng, lambda: "0.26.1"),
            _note(rng),
        )

    return tuple(image(i) for i in rng.sample(range(9), rng.randint(0, 3)))


def _model(rng: random.Random) -> Model | None:
    if rng.random() < 0.4:
        return None
    # Short entries fit on a line and are written inline (left to the line reader); long paths as [[model.files]].
    stem = rng.choice(("c", "model-00001-of-00002-with-a-long-name-that-does-not-fit"))
    files = tuple(
        ModelFile(UpstreamPath(f"{stem}{i}.json"), rng.randint(0, 10**9), blob=_hex(rng, 40))
        if rng.random() < 0.5
        else ModelFile(UpstreamPath(f"{stem}{i}.safetensors"), rng.randint(0, 9), sha256=Sha256(_hex(rng, 64)))
        for i in range(rng.randint(0, 3))
    )
    return Model("org/name", Revision(_hex(rng, 40)), files, _maybe(rng, lambda: "main"))


def _upstreams(rng: random.Random) -> tuple[Any, ...]:
    kinds = [
        GitUpstream("vllm", git="https://github.com/vllm-project/vllm", commit=Revision(_hex(rng, 40))),
        WheelUpstream("wheel", wheel="vllm==0.26.0", wheel_sha256=Sha256(_hex(rng, 64)), note=_text(rng)),
        DirUpstream("tree", dir="vendor/tree"),
    ]
    return tuple(rng.sample(kinds, rng.randint(1, 3)))


def _patch(rng: random.Random, i: int, upstream: str) -> Patch:
    h = Sha256(_hex(rng, 64))
    kind = rng.choice((PatchKind.OVERLAY, PatchKind.OVERLAY, PatchKind.MODULE, PatchKind.TRANSFORMER))
    target = ContainerPath(f"/usr/lib/pkg/m{i}.py")
    base = Base(upstream, UpstreamPath(f"pkg/m{i}.py"), h, _maybe(rng, lambda: Revision(_hex(rng, 40))))
    refs, reason, drop = _refs(rng), _note(rng), _note(rng)
    if kind is not PatchKind.OVERLAY:
        return Patch(f"p{i}", kind, h, target, RepoPath(f"patches/m{i}.py"), None, None, reason, refs, drop)
    if rng.random() < 0.15:
        origin = Origin("o/r", _hex(rng, 7), UpstreamPath(f"pkg/m{i}.py"), ("README.md",))
        return Patch(f"p{i}", kind, h, target, RepoPath(f"patches/m{i}.py"), reason=reason, origin=origin)
    file = RepoPath(f"patches/m{i}.py") if rng.random() < 0.85 else None
    diff = DiffPin(RepoPath(f"upstream/m{i}.diff"), Sha256(_hex(rng, 64)))
    return Patch(f"p{i}", kind, h, target, file, base, diff, reason, refs, drop)


def lockfile(rng: random.Random) -> Lockfile:
    """A lockfile of random records, optional fields set or not, some free text that needs escapes."""
    images = _images(rng)
    upstreams = _upstreams(rng)
    patches = tuple(_patch(rng, i, rng.choice(upstreams).name) for i in range(rng.randint(0, 6)))
    names = [p.name for p in patches]
    h = Sha256(_hex(rng, 64))
    return Lockfile(
        name=_maybe(rng, lambda: "prod"),
        images=images,
        model=_model(rng),
        upstreams=upstreams,
        patches=patches,
        tuning=tuple(
            Artifact(f"t{i}", RepoPath(f"tuning/t{i}.csv"), h, ContainerPath(f"/opt/t{i}.csv"), _note(rng))
            for i in range(rng.randint(0, 2))
        ),
        artifacts=tuple(Artifact(f"a{i}", RepoPath(f"a{i}.sh"), h) for i in range(rng.randint(0, 2))),
        refs=tuple(
            RefState(Reference(f"o/r#{n}"), rng.choice(("open", "merged")), _maybe(rng, lambda: "2025"))
            for n in sorted(rng.sample(range(1, 9), rng.randint(0, 2)))
        ),
        signing=_maybe(rng, lambda: Signing(RepoPath("allowed_signers"), "me@example.org")),
        diffs=tuple(
            HandDiff(RepoPath(f"hand/{n}.diff"), h, (n,), rng.choice(("upstream", "overlay")))
            for n in rng.sample(names, min(len(names), rng.randint(0, 1)))
        ),
        series=tuple(
            Series(
                upstreams[0].name,
                upstreams[0].name,
                (SeriesPatch("s1", RepoPath("patches/q/1.patch"), h, ("tp1",), _refs(rng), _note(rng)),),
                strip=rng.choice((0, 1)),
            )
            for _ in range(rng.randint(0, 1))
        ),
        derived=tuple(
            Derived("single", img.name, "registry.example/x", img.digest, img.digest, img.digest, img.digest, "2025")
            for img in images[: rng.randint(0, 1)]
        ),
    )


# --------------------------------------------------------------------------- edits of a canonical text


def _swap_lines(rng: random.Random, lines: list[str]) -> None:
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    lines[i], lines[j] = lines[j], lines[i]


def _swap_blocks(rng: random.Random, lines: list[str]) -> None:
    """Two tables (from a header to the blank line after it) trade places."""
    text = "\n".join(lines)
    blocks = text.split("\n\n")
    i, j = rng.randrange(len(blocks)), rng.randrange(len(blocks))
    blocks[i], blocks[j] = blocks[j], blocks[i]
    lines[:] = "\n\n".join(blocks).split("\n")


def _respace(rng: random.Random, lines: list[str]) -> None:
    i = rng.randrange(len(lines))
    lines[i] = rng.choice((lines[i].replace(" = ", "="), lines[i] + " ", lines[i] + "  # why", " " + lines[i]))


def _requote(rng: random.Random, lines: list[str]) -> None:
    """A header part quoted that needs no quotes, or a string written as a literal string."""
    i = rng.randrange(len(lines))
    line = lines[i]
    if line.startswith("[") and "." in line:
        head, _, last = line.rstrip("]").rpartition(".")
        lines[i] = f'{head}."{last}"' + "]" * (len(line) - len(line.rstrip("]")))
    elif ' = "' in line and "'" not in line:
        lines[i] = line.replace('"', "'")


def _add_line(rng: random.Random, lines: list[str]) -> None:
    extra = ["", "# a comment", 'against = "upstream"', "strip = 1", "[images]", "[patches]", 'x = "y"', "refs = []"]
    lines.insert(rng.randrange(len(lines) + 1), rng.choice(extra))


def _drop_line(rng: random.Random, lines: list[str]) -> None:
    del lines[rng.randrange(len(lines))]


def _copy_line(rng: random.Random, lines: list[str]) -> None:
    lines.insert(rng.randrange(len(lines) + 1), rng.choice(lines))


def _inline_array(rng: random.Random, lines: list[str]) -> None:
    """An array written one string per line becomes one line (valid TOML, not the writer's form)."""
    text = "\n".join(lines)
    at = text.find(" = [\n")
    if at >= 0:
        end = text.index("\n]", at)
        items = [x.strip().rstrip(",") for x in text[at + 5 : end].split("\n")]
        text = text[:at] + " = [" + ", ".join(items) + "]" + text[end + 2 :]
    lines[:] = text.split("\n")


def _edit_char(rng: random.Random, lines: list[str]) -> None:
    i = rng.randrange(len(lines))
    chars = list(lines[i])
    at = rng.randrange(len(chars) + 1)
    chars.insert(at, rng.choice(['"', "[", "]", "=", " ", "a", "1", ".", "\t", "\\", "é"]))
    if rng.random() < 0.5 and len(chars) > 1:
        del chars[rng.randrange(len(chars))]
    lines[i] = "".join(chars)


EDITS = [_swap_lines, _swap_blocks, _respace, _requote, _add_line, _drop_line, _copy_line, _inline_array, _edit_char]


def edited(rng: random.Random, text: str) -> str:
    lines = text.split("\n")
    for _ in range(rng.randint(1, 2)):
        rng.choice(EDITS)(rng, lines)
    out = "\n".join(lines)
    return out.replace("\n", "\r\n") if rng.random() < 0.02 else out


# --------------------------------------------------------------------------- the properties


def verdict(text: str) -> bool | None:
    """What ``pins.canonical`` says of a lockfile text; None when it does not load (and tomllib then agrees)."""
    try:
        lock = loads(text)
    except LockfileError as e:
        try:
            tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            assert e.problems[0].line is not None, text  # refused where tomllib refuses, at a line
        return None
    said = not pins.canonical(State(lock, text.encode(), MemoryView({})))
    assert said == (dumps(lock) == text), text
    return said


def test_generated_lockfiles_are_canonical() -> None:
    rng = random.Random(18)
    for _ in range(400):
        text = dumps(lockfile(rng))
        assert verdict(text), text
        assert dumps(loads(text)) == text


def test_edited_lockfiles_get_the_verdict_a_render_gives() -> None:
    rng = random.Random(1818)
    seen = {True: 0, False: 0, None: 0}
    for _ in range(3000):
        seen[verdict(edited(rng, dumps(lockfile(rng))))] += 1
    # All three met many times: edits that keep the form, edits that do not, and edits that break it.
    assert seen[True] > 100 and seen[False] > 1000 and seen[None] > 100


def test_every_field_and_the_shipped_lockfile_are_written_back_byte_for_byte() -> None:
    from pathlib import Path

    shipped = (Path(__file__).resolve().parents[2] / "lockfile.toml").read_text(encoding="utf-8")
    for text in (dumps(every_field()), shipped):
        assert dumps(loads(text)) == text
        assert verdict(text)


def _state(text: str) -> State:
    return State(loads(text), text.encode(), MemoryView({}))


def test_a_hand_edited_lockfile_is_reported_at_its_first_changed_line() -> None:
    text = dumps(every_field())
    spaced = text.replace('reason = "r"', 'reason =  "r"', 1)
    [f] = pins.canonical(_state(spaced))
    assert (f.code, f.line) == ("lockfile-format", spaced.split("\n").index('reason =  "r"') + 1)
    # Two keys in another order: reported where the two texts differ.
    swapped = text.replace('name = "p1"\nkind = "overlay"', 'kind = "overlay"\nname = "p1"')
    [f] = pins.canonical(_state(swapped))
    assert (f.code, f.line) == ("lockfile-format", swapped.split("\n").index('kind = "overlay"') + 1)
    assert pins.canonical(_state(text)) == []


def test_a_lockfile_rendered_again_or_changed_gives_its_own_text() -> None:
    """The writer remembers the last lockfile it rendered: the same object, the same text; a changed copy, its own."""
    lock = every_field()
    text = dumps(lock)
    assert dumps(lock) is text
    renamed = dataclasses.replace(lock, name="other")
    assert dumps(renamed) == text.replace('name = "prod"', 'name = "other"', 1) != text
    assert dumps(lock) == text
