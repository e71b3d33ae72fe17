"""The ``verified`` table of a base and of a series: read strictly, every problem at its file, line and field."""

from __future__ import annotations

import pytest

from patchkit.errors import LockfileError
from patchkit.lockfile.reader import loads
from patchkit.lockfile.writer import dumps

DIGEST = "sha256:" + "e" * 64
COMMIT = "124154a8843d1f8e4d4e2d5d466e2d3ebc3716da"
WHEEL_SHA = "a" * 64


def _lockfile(base_verified: str, series_verified: str = "") -> str:
    return f"""schema = 1

[images.vllm]
repository = "vllm/vllm-openai-rocm"
digest = "{DIGEST}"

[upstreams.vllm]
git = "https://github.com/vllm-project/vllm"
commit = "{COMMIT}"

[upstreams.release]
source = "wheel"
wheel = "vllm==0.26.0"
wheel_sha256 = "{WHEEL_SHA}"

[[patches]]
name = "fix"
kind = "overlay"
sha256 = "{"1" * 64}"
target = "/usr/lib/vllm/a.py"

[patches.base]
upstream = "release"
version = "0.26.0"
path = "vllm/a.py"
sha256 = "{"2" * 64}"

[patches.base.verified]
{base_verified}
[patches.diff]
file = "upstream/fix.diff"
sha256 = "{"3" * 64}"

[series.vllm]
commit = "{COMMIT}"
{series_verified}"""


GOOD = f'image = "vllm"\ndigest = "{DIGEST}"\nagainst = "upstream"\npin = "{WHEEL_SHA}"\n'


def _problems(text: str) -> list[tuple[int | None, str | None, str]]:
    with pytest.raises(LockfileError) as e:
        loads(text)
    return [(p.line, p.field, p.message) for p in e.value.problems]


def test_a_record_loads_and_is_written_back_as_read() -> None:
    series = f'\n[series.vllm.verified]\nimage = "vllm"\ndigest = "{DIGEST}"\nagainst = "upstream"\npin = "{COMMIT}"\n'
    lock = loads(_lockfile(GOOD, series))
    base = lock.patches[0].base
    assert base is not None and base.verified is not None
    assert (base.verified.image, str(base.verified.digest), base.verified.against) == ("vllm", DIGEST, "upstream")
    assert lock.series[0].verified is not None and lock.series[0].verified.pin == COMMIT
    text = dumps(lock)
    assert f'[patches.base.verified]\nimage = "vllm"\ndigest = "{DIGEST}"\nagainst = "upstream"\npin = ' in text
    assert dumps(loads(text)) == text


def test_a_base_read_from_the_image_needs_no_pin() -> None:
    lock = loads(_lockfile(f'image = "vllm"\ndigest = "{DIGEST}"\nagainst = "image"\n'))
    assert lock.patches[0].base is not None and lock.patches[0].base.verified is not None


@pytest.mark.parametrize(
    ("line", "value", "field", "message"),
    [
        (0, "image = 1", "image", "must be a string, got an integer"),
        (0, 'image = "proxy"', "image", "names image 'proxy', which [images] does not pin"),
        (1, f'digest = "{DIGEST[:-1]}"', "digest", "is not a digest"),
        (1, f'digest = "{DIGEST.upper()}"', "digest", "is not a digest"),
        (1, f'digest = "{DIGEST.removeprefix("sha256:")}"', "digest", "is not a digest"),
        (2, 'against = "wheel"', "against", "unknown value 'wheel' (image or upstream)"),
        (3, f'pin = "{COMMIT}"', "pin", "is not a sha256"),  # a commit for a wheel upstream
        (3, "pin = 7", "pin", "must be a string, got an integer"),
    ],
)
def test_each_bad_value_is_one_problem_at_its_line(line: int, value: str, field: str, message: str) -> None:
    lines = GOOD.splitlines()
    lines[line] = value
    text = _lockfile("\n".join(lines) + "\n")
    [(at, where, said)] = _problems(text)
    assert where == f"patches[0].base.verified.{field}"
    assert at == text.splitlines().index(value) + 1
    assert message in said


def test_missing_fields_and_an_image_base_with_a_pin_are_named() -> None:
    problems = _problems(_lockfile('against = "image"\npin = "x"\n'))
    fields = {(field, message) for _, field, message in problems}
    assert ("patches[0].base.verified", "missing required field 'image'") in fields
    assert ("patches[0].base.verified", "missing required field 'digest'") in fields
    assert (
        "patches[0].base.verified.pin",
        "only with against = 'upstream': a base read from the image has no upstream pin",
    ) in fields


def test_a_series_pin_has_the_form_of_its_upstreams_pin() -> None:
    series = (
        f'\n[series.vllm.verified]\nimage = "vllm"\ndigest = "{DIGEST}"\nagainst = "upstream"\npin = "{WHEEL_SHA}"\n'
    )
    text = _lockfile(GOOD, series)
    [(at, where, said)] = _problems(text)
    assert where == "series.vllm.verified.pin"
    assert at == text.splitlines().index(f'pin = "{WHEEL_SHA}"', text.splitlines().index("[series.vllm.verified]")) + 1
    assert "is not a full commit id" in said and "(the pin of git upstream 'vllm')" in said
