"""Renovate's regex manager (docs/examples/renovate.json) run by JavaScript's own regex engine.

Renovate compiles each ``matchStrings`` entry with the ``g`` flag (RE2 when its
native module loads, else ``RegExp``) and takes one dependency from every match
(``matchStringsStrategy`` "any"): its named groups ``depName``,
``currentValue`` and ``currentDigest``. Node runs the patterns from the JSON,
as Renovate does, on the shipped lockfile and on lockfiles patchkit's writer
makes with every combination of optional image fields; every ``[images.NAME]``
table must give exactly one dependency with the right groups. An image without
a ``tag`` is still found (digest only), never skipped.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
import re
import shutil
import subprocess
from typing import Any

import pytest

from patchkit.core.values import Digest
from patchkit.lockfile.model import Image
from patchkit.lockfile.reader import loads
from patchkit.lockfile.writer import dumps
from tests.conftest import REPO_ROOT

RENOVATE = REPO_ROOT / "docs" / "examples" / "renovate.json"
needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="node not installed (.ci/run installs nodejs)")

# What Renovate does with each pattern: RegExp(pattern, "g"), exec until null, one dependency per match.
# RE2 is always Unicode-aware, so "gu" must give the same: a pattern only plain RegExp accepts fails there.
_NODE = r"""
const input = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const out = {};
for (const flags of ['g', 'gu']) {
  out[flags] = input.texts.map((text) => {
    const deps = [];
    for (const p of input.patterns) {
      const re = new RegExp(p, flags);
      let m;
      while ((m = re.exec(text)) !== null) {
        const g = m.groups || {};
        deps.push({match: m[0], depName: g.depName ?? null, currentValue: g.currentValue ?? null,
                   currentDigest: g.currentDigest ?? null});
      }
    }
    return deps;
  });
}
process.stdout.write(JSON.stringify(out));
"""


def _patterns() -> list[str]:
    (manager,) = json.loads(RENOVATE.read_text())["customManagers"]
    assert manager.get("matchStringsStrategy", "any") == "any"
    patterns: list[str] = manager["matchStrings"]
    return patterns


def run_node(texts: list[str]) -> list[list[dict[str, Any]]]:
    """Each text's dependencies as Renovate's regex manager extracts them, by node's regex engine."""
    r = subprocess.run(
        ["node", "-e", _NODE], input=json.dumps({"patterns": _patterns(), "texts": texts}),
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["g"] == out["gu"]  # the same under RE2's Unicode semantics
    found: list[list[dict[str, Any]]] = out["g"]
    return found


def expected(images: tuple[Image, ...]) -> list[tuple[str, str | None, str]]:
    return sorted((i.repository, i.tag, str(i.digest)) for i in images)


def extracted(deps: list[dict[str, Any]]) -> list[tuple[str, str | None, str]]:
    return sorted((d["depName"], d["currentValue"], d["currentDigest"]) for d in deps)


def test_the_patterns_use_only_what_re2_accepts() -> None:
    """RE2 (Renovate's engine) has no lookaround and no backreferences; a pattern using them fails there."""
    for p in _patterns():
        assert not re.search(r"\(\?<?[=!]|\\[1-9]|\\k<", p), p


@needs_node
def test_every_image_of_the_shipped_lockfile_is_found() -> None:
    text = (REPO_ROOT / "lockfile.toml").read_text()
    lock = loads(text)
    (deps,) = run_node([text])
    assert extracted(deps) == expected(lock.images)
    assert {d["depName"]: d["currentValue"] for d in deps}["caddy"] == "2"  # the proxy follows its tag
    for d in deps:  # Renovate replaces the digest inside the matched text: it must be there once
        assert d["match"].count(d["currentDigest"]) == 1


def _image(rnd: random.Random, n: int, optional: tuple[bool, ...]) -> Image:
    tag, resolved, platform, version, note = optional
    name = rnd.choice(["proxy", "caddy", "vllm", "img.v2", "a_b-c", "9x"]) + f"-{n}"
    repository = rnd.choice(["caddy", "vllm/vllm-openai-rocm", "registry.example:5000/team/img", "ghcr.io/o/r"])
    return Image(
        name=name,
        repository=repository,
        digest=Digest("sha256:" + rnd.randbytes(32).hex()),
        tag=rnd.choice(["2", "nightly", "v0.26.1-rc1", "2.8.4_alpine", "latest"]) if tag else None,
        resolved_at="2026-01-02T03:04:05Z" if resolved else None,
        platform="linux/amd64" if platform else None,
        platform_digest=Digest("sha256:" + rnd.randbytes(32).hex()) if platform else None,
        version="0.26.1rc1.dev229+g124154a88" if version else None,
        note='a "quoted" note\nover two lines' if note else None,
    )


@needs_node
def test_every_image_patchkit_writes_is_found_with_its_fields() -> None:
    """Every combination of the optional fields, in the writer's order, with dotted (quoted) names too."""
    rnd = random.Random(31)
    # The shipped lockfile without its patches: their bases record the shipped images, replaced here.
    base = dataclasses.replace(loads((REPO_ROOT / "lockfile.toml").read_text()), patches=())
    combos = list(itertools.product((False, True), repeat=5))
    texts, wants = [], []
    for i in range(0, len(combos), 4):
        images = tuple(_image(rnd, n, c) for n, c in enumerate(combos[i : i + 4]))
        lock = dataclasses.replace(base, images=images)
        text = dumps(lock)
        assert loads(text).images == tuple(sorted(images, key=lambda x: x.name))  # a lockfile patchkit reads
        texts.append(text)
        wants.append(expected(images))
    assert any('[images."' in t for t in texts)  # a name with '.' is a quoted key
    for deps, want in zip(run_node(texts), wants, strict=True):
        assert extracted(deps) == want


@needs_node
def test_a_table_that_is_not_an_image_is_not_taken() -> None:
    text = (REPO_ROOT / "lockfile.toml").read_text()
    derived = '\n[derived.single]\nbase = "vllm"\nrepository = "r.example/x"\ndigest = "sha256:' + "ab" * 32 + '"\n'
    (deps,) = run_node([text + derived])
    assert "r.example/x" not in {d["depName"] for d in deps}
