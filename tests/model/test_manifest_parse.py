"""A model manifest file read strictly: each bad entry is named by its field."""

from __future__ import annotations

import json

import pytest

from patchkit.errors import BadInput
from patchkit.model.manifest import MANIFEST_FORMAT, parse_manifest

SHA = "a" * 64
BLOB = "b" * 40


def _doc(*files: object) -> bytes:
    return json.dumps({"format": MANIFEST_FORMAT, "repo": "org/m", "revision": "c" * 40, "files": list(files)}).encode()


def test_entries_with_sha256_or_blob() -> None:
    m = parse_manifest(
        _doc({"path": "w.safetensors", "size": 3, "sha256": SHA}, {"path": "c.json", "size": 0, "blob": BLOB}), "m.json"
    )
    assert [(f.path.path, f.size, f.sha256.hex if f.sha256 else None, f.blob) for f in m.files] == [
        ("w.safetensors", 3, SHA, None),
        ("c.json", 0, None, BLOB),
    ]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("w", "m.json: files[0]: must be an object with path, size and sha256 or blob"),
        ({"path": "w", "size": 1, "sha256": SHA, "extra": 1}, "m.json: files[0]: must be an object"),
        ({"path": "/abs", "size": 1, "sha256": SHA}, "m.json: files[0].path: "),
        ({"path": 3, "size": 1, "sha256": SHA}, "m.json: files[0].path: "),
        ({"path": "w", "size": -1, "sha256": SHA}, "m.json: files[0].size: must be a non-negative integer"),
        ({"path": "w", "size": True, "sha256": SHA}, "m.json: files[0].size: must be a non-negative integer"),
        ({"path": "w", "size": 1}, "m.json: files[0]: needs exactly one of sha256 (LFS files) or blob (small files)"),
        ({"path": "w", "size": 1, "sha256": SHA, "blob": BLOB}, "m.json: files[0]: needs exactly one of sha256"),
        ({"path": "w", "size": 1, "sha256": SHA.upper()}, "m.json: files[0].sha256: 'AAAA"),
        ({"path": "w", "size": 1, "blob": "x"}, "m.json: files[0].blob: 'x' is not a git blob id (40 lowercase hex)"),
    ],
)
def test_a_bad_entry_is_named_by_its_field(entry: object, message: str) -> None:
    with pytest.raises(BadInput) as e:
        parse_manifest(_doc(entry), "m.json")
    assert e.value.message.startswith(message)
    assert e.value.hint == "regenerate it: patchkit model lock"


def test_a_path_listed_twice_and_a_bad_document() -> None:
    twice = _doc({"path": "w", "size": 1, "sha256": SHA}, {"path": "w", "size": 1, "blob": BLOB})
    with pytest.raises(BadInput, match=r"^m\.json: files\[1\]\.path: w is listed twice$"):
        parse_manifest(twice, "m.json")
    for data, message in (
        (b"{", "m.json: not valid JSON"),
        (b"{}", "m.json: format: not a patchkit model manifest"),
        (
            json.dumps({"format": MANIFEST_FORMAT, "repo": 1, "revision": "r"}).encode(),
            "m.json: repo and revision must be strings",
        ),
        (
            json.dumps({"format": MANIFEST_FORMAT, "repo": "o/m", "revision": "r"}).encode(),
            "m.json: files: must be a list",
        ),
    ):
        with pytest.raises(BadInput) as e:
            parse_manifest(data, "m.json")
        assert e.value.message.startswith(message)
