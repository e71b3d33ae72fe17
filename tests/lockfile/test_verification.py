"""Which image the bases are mounted over: deploy.toml's ``inference.image`` when it names one, read by tomllib."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from patchkit.lockfile.verification import deployed_image
from tests.lockfile.test_fields import every_field

LONG = "1" * (sys.get_int_max_str_digits() + 1)


def test_deploy_toml_names_the_image(tmp_path: Path) -> None:
    (tmp_path / "deploy.toml").write_text('[inference]\nimage = "vllm"\n')
    found = deployed_image(every_field(), tmp_path)
    assert found is not None and found.name == "vllm"


@pytest.mark.parametrize(
    "text",
    [
        '[inference]\nimage = "vllm"\nx = ' + LONG + "\n",  # tomllib: ValueError, not TOMLDecodeError
        '[inference]\nimage = "vllm"\nx = ' + "[" * 100_000 + "]" * 100_000 + "\n",  # RecursionError
        '[inference]\nimage = "vllm"\r \n',  # a CR that ends no line
        b'[inference]\nimage = "\xff"\n'.decode("latin-1"),
    ],
)
def test_a_deploy_toml_tomllib_cannot_read_names_no_image(tmp_path: Path, text: str) -> None:
    # Two images and nothing read: no guess (check reports the file itself), and no internal error.
    (tmp_path / "deploy.toml").write_text(text, encoding="utf-8", newline="")
    assert deployed_image(every_field(), tmp_path) is None
