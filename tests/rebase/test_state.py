"""The saved states of a stopped rebase: written and read back as the same record, a bad field refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from patchkit.errors import BadInput
from patchkit.rebase.state import (
    OVERLAYS,
    SERIES,
    OverlayState,
    SeriesState,
    StateError,
    read_overlays,
    read_series,
)

SHA = "a" * 64
COMMIT = "b" * 40
OUTCOMES = {"clean", "conflict"}


def _series() -> SeriesState:
    return SeriesState(
        series="vllm",
        onto=COMMIT,
        lockfile_sha256=SHA,
        stopped="0002-fix",
        conflicts=("pkg/util.py",),
        broken=(),
        resolved={"0001-first": {"pkg/a.py": b"\x00caf\xe9\r\n"}},
        accepted={"0003-late": "reviewed by hand"},
    )


def _overlays() -> OverlayState:
    patch = {
        "name": "worker",
        "outcome": "conflict",
        "old_path": "vllm/worker.py",
        "new_path": "vllm/worker.py",
        "old_target": "/opt/vllm/worker.py",
        "new_target": "/opt/vllm/worker.py",
        "theirs_sha256": SHA,
        "merged_sha256": SHA,
        "problems": [],
    }
    return OverlayState("vllm", "v1", {"kind": "git", "commit": COMMIT}, SHA, (patch,), image_pins={"app": "x"})


def test_a_series_state_reads_back_as_written_bytes_and_all(tmp_path: Path) -> None:
    state = _series()
    SERIES.save(tmp_path, {"x/y": b"1"}, state.as_doc())
    assert read_series(tmp_path) == state
    assert SERIES.present(tmp_path) and not OVERLAYS.present(tmp_path)
    assert SERIES.clear(tmp_path) and read_series(tmp_path) is None


def test_an_overlays_state_reads_back_as_written_and_records_the_commit(tmp_path: Path) -> None:
    state = _overlays()
    OVERLAYS.save(tmp_path, {}, state.as_doc())
    assert read_overlays(tmp_path, OUTCOMES) == state
    marked = OverlayState(**{**state.__dict__, "committed_lockfile_sha256": SHA})
    OVERLAYS.rewrite(tmp_path, marked.as_doc())
    assert read_overlays(tmp_path, OUTCOMES) == marked


def test_a_series_state_records_the_commit_too(tmp_path: Path) -> None:
    marked = SeriesState(**{**_series().__dict__, "committed_lockfile_sha256": SHA})
    SERIES.save(tmp_path, {}, marked.as_doc())
    assert read_series(tmp_path) == marked
    assert "committed_lockfile_sha256" not in _series().as_doc()


def test_each_kind_spells_where_its_files_wait_once() -> None:
    assert _series().waiting() == ((("pkg/util.py", ".patchkit/series-rebase/work/0002-fix/pkg/util.py"),))
    assert _overlays().waiting() == (("worker", ".patchkit/rebase/conflicts/worker/worker.py"),)
    broken = {**_overlays().patches[0], "outcome": "broken", "new_path": "vllm/v1/worker.py"}
    # A broken merge waits under broken/, unless its text conflicted first: then where the conflict waited.
    assert OverlayState("vllm", "v1", {"kind": "git"}, SHA, (broken,)).waiting() == (
        ("worker", ".patchkit/rebase/broken/worker/worker.py"),
    )
    after = {**broken, "text_outcome": "conflict"}
    assert OverlayState("vllm", "v1", {"kind": "git"}, SHA, (after,)).waiting() == (
        ("worker", ".patchkit/rebase/conflicts/worker/worker.py"),
    )


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("resolved", {"0001-first": {"pkg/a.py": "not base64!"}}, "resolved: not base64"),
        ("onto", "main", "onto: 'main' is not a full commit id"),
        ("conflicts", ["../../etc/passwd"], "conflicts[0]:"),
        ("stopped", 7, "stopped: not a string"),
        ("committed_lockfile_sha256", "../lock", "committed_lockfile_sha256: '../lock' is not a sha256"),
    ],
)
def test_a_bad_series_field_is_refused_naming_the_file_and_the_field(
    tmp_path: Path, field: str, value: object, expected: str
) -> None:
    SERIES.save(tmp_path, {}, {**_series().as_doc(), field: value})
    with pytest.raises(StateError) as refused:
        read_series(tmp_path)
    assert refused.value.message.startswith(f"{SERIES.state_file}: {expected}")
    assert refused.value.exit_code == 2


def test_an_overlays_state_of_another_version_is_refused(tmp_path: Path) -> None:
    (tmp_path / OVERLAYS.directory).mkdir(parents=True)
    (tmp_path / OVERLAYS.state_file).write_text(json.dumps({**_overlays().as_doc(), "version": 2}))
    with pytest.raises(BadInput) as refused:
        read_overlays(tmp_path, OUTCOMES)
    assert refused.value.message == f"{OVERLAYS.state_file}: written by another patchkit version"
