"""``[series.NAME]`` in the lockfile: read strictly with lines, written canonically."""

from __future__ import annotations

import pytest

from patchkit.errors import LockfileError
from patchkit.lockfile.reader import loads
from patchkit.lockfile.writer import dumps

GOOD = """schema = 1

[upstreams.vllm]
git = "https://github.com/vllm-project/vllm"
commit = "124154a8843d1f8e4d4e2d5d466e2d3ebc3716da"

[series.vllm]
commit = "124154a8843d1f8e4d4e2d5d466e2d3ebc3716da"

[[series.vllm.patches]]
name = "vllm-48303-mxfp4"
file = "patches/vllm/vllm-48303-mxfp4.patch"
sha256 = "2834f2123367e4eae8e03e87282ab3f5c036eed872778b06b068b0edb2a34ca9"
profiles = ["mxfp4"]
"""


def test_a_series_round_trips_canonically() -> None:
    lock = loads(GOOD)
    (s,) = lock.series
    assert [p.name for p in s.selected("mxfp4")] == ["vllm-48303-mxfp4"]
    assert s.selected("other") == ()
    text = dumps(lock)
    assert loads(text) == lock
    assert dumps(loads(text)) == text
    assert ("series.vllm.patches[0].sha256", "patches/vllm/vllm-48303-mxfp4.patch") in [
        (f, str(p)) for f, p, _ in lock.files()
    ]


@pytest.mark.parametrize(
    ("edit", "line", "field", "message"),
    [
        (('name = "vllm-48303-mxfp4"', 'name = "Bad Name"'), 11, "series.vllm.patches[0].name", "patch name"),
        (
            ("[series.vllm]\n", '[series.vllm]\nupstream = "nope"\n'),
            8,
            "series.vllm.upstream",
            "no upstream named 'nope'",
        ),
        (
            ('profiles = ["mxfp4"]', 'profiles = ["mxfp4"]\ncolour = "red"'),
            15,
            "series.vllm.patches[0].colour",
            "unknown field",
        ),
        (('sha256 = "2834', 'sha256 = "ZZ34'), 13, "series.vllm.patches[0].sha256", "sha256"),
    ],
)
def test_bad_series_fields_are_reported_with_line_and_field(
    edit: tuple[str, str], line: int, field: str, message: str
) -> None:
    with pytest.raises(LockfileError) as e:
        loads(GOOD.replace(*edit))
    (problem,) = e.value.problems
    assert (problem.line, problem.field) == (line, field)
    assert message in problem.message
