"""The guard against a hostile container: unpinned transformers, and model arguments read as vLLM reads them.

The model arguments are generated (seeded, bounded) over every order of a
positional model, ``--model X``, ``--model=X``, options the guard knows and
options it does not, and each command line is parsed by real ``argparse`` set
up as ``vllm serve``'s parser is (a ``model_tag`` positional with
``nargs="?"``, ``--model``, flags, one-value and many-value options),
resolved both ways vLLM has resolved it: the positional wins, else the last
``--model`` (argparse; ``vllm serve``'s command), and newer vLLM's
``FlexibleArgumentParser``, which first moves the first ``--model`` into the
positional's place. Whenever the guard lets the server start, every vLLM
serves the pinned snapshot or does not start. ``GUARD_ARGS_RUNS`` raises the
number of command lines (default 4000, a second or two).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import re
from pathlib import Path
from typing import Any

import pytest

from patchkit.guard import runtime
from tests.guard.test_runtime import guard, layout, rewrite, sha

__all__ = ["layout"]  # the fixture, shared with test_runtime

PIN = "/root/.cache/huggingface/hub/models--o--m/snapshots/7872f01b1d1fe23eabc4c98b48bffcef5a386062"
OTHER = ["/models/evil", "org/evil", "gpt2", "evil", PIN + "-x", "/root"]


def _vllm_parser() -> argparse.ArgumentParser:
    """A parser shaped as vLLM's ``serve``: the options the guard knows, and two it does not."""
    p = argparse.ArgumentParser(prog="vllm serve", add_help=False, exit_on_error=False)
    p.add_argument("model_tag", nargs="?")
    p.add_argument("--model")
    for flag in ("--enforce-eager", "--trust-remote-code", "--secret-flag"):
        p.add_argument(flag, action="store_true")
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction)
    for option in ("--port", "--max-model-len", "--secret-value"):
        p.add_argument(option)
    p.add_argument("--served-model-name", nargs="+")
    return p


PARSER = _vllm_parser()


def _parse(args: list[str]) -> argparse.Namespace | None:
    """argparse's reading, or None when it refuses (vLLM exits without serving)."""
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            return PARSER.parse_args(args)
        except (argparse.ArgumentError, SystemExit):
            return None


def served_before(args: list[str]) -> str | None:
    """What vLLM serves when ``--model`` is a plain option: the positional, else the last --model."""
    ns = _parse(args)
    if ns is None:
        return None
    return ns.model_tag if ns.model_tag is not None else (ns.model or "facebook/opt-125m")


def served_now(args: list[str]) -> str | None:
    """Newer vLLM: the first ``--model``/``--model=`` is moved in front as the positional, then parsed as above."""
    at = next((i for i, a in enumerate(args) if re.match(r"^--model(=.+|$)", a)), None)
    if at is not None:
        if args[at] == "--model":
            if at + 1 >= len(args) or args[at + 1].startswith("-"):
                return None
            args = [args[at + 1], *args[:at], *args[at + 2 :]]
        else:
            args = [args[at].removeprefix("--model="), *args[:at], *args[at + 1 :]]
    return served_before(args)


PIECES: list[list[str]] = [
    ["--enforce-eager"],
    ["--trust-remote-code"],
    ["--enable-prefix-caching"],
    ["--no-enable-prefix-caching"],
    ["--port", "8000"],
    ["--port=8000"],
    ["--max-model-len", "4096"],
    ["--served-model-name", "name"],
    ["--served-model-name", "a", "b"],
    ["--secret-flag"],
    ["--secret-value", "7"],
    ["--secret-value", "text"],
    ["--secret-value=text"],
]


def _command(rng: random.Random) -> list[str]:
    """A command line: some options, models (the pin or another) as positionals, --model X and --model=X."""
    parts: list[list[str]] = [rng.choice(PIECES) for _ in range(rng.randint(0, 4))]
    for _ in range(rng.randint(0, 3)):
        model = PIN if rng.random() < 0.6 else rng.choice(OTHER)
        parts.insert(rng.randint(0, len(parts)), rng.choice([[model], ["--model", model], [f"--model={model}"]]))
    return [a for part in parts for a in part]


def test_whenever_the_guard_passes_every_vllm_serves_the_pinned_snapshot() -> None:
    rng = random.Random(29)
    runs = int(os.environ.get("GUARD_ARGS_RUNS", "4000"))
    passed = refused_pin = 0
    for _ in range(runs):
        args = _command(rng)
        problems = runtime.model_problems(args, PIN)
        before, now = served_before(args), served_now(args)
        if not problems:
            passed += 1
            assert before in (None, PIN) and now in (None, PIN), (args, before, now)
        elif before == now == PIN:
            refused_pin += 1  # fail closed: an argument the guard cannot place (an option it does not know)
    assert passed > runs // 10  # the generator reaches the accepting side too
    assert refused_pin < runs // 4, refused_pin


@pytest.mark.parametrize(
    "args",
    [
        [PIN],
        [PIN, "--port=8000", "--served-model-name=x"],
        ["--model", PIN, "--port", "8000"],
        ["--model=" + PIN],
        [PIN, "--model", PIN],
        ["--port=1", "--model", PIN, "--model=" + PIN],
        ["--enforce-eager", PIN, "--max-model-len", "4096"],
        [PIN + "/", "--no-enable-prefix-caching"],
        ["--port", "8000", "--", PIN],
    ],
)
def test_the_pinned_model_in_any_form_vllm_takes_is_accepted(args: list[str]) -> None:
    assert runtime.model_problems(args, PIN) == []


@pytest.mark.parametrize(
    ("args", "served"),
    [
        ([PIN, "--model", "/evil"], "the positional wins, or vLLM exits"),
        (["/evil", "--model", PIN], "the positional wins"),
        (["--model", PIN, "--model", "/evil"], "argparse keeps the last"),
        (["--model", "/evil", "--model=" + PIN], "newer vLLM takes the first"),
        (["--model=" + PIN, "/evil"], "the positional wins"),
        (["--port=1", "/evil", "--model", PIN], "the positional wins"),
        (["--secret-flag", "/evil", "--model", PIN], "an option the guard does not know"),
        (["--port=1"], "no model: vLLM's default"),
        ([], "no model: vLLM's default"),
        (["--model"], "no model"),
        (["--served-model-name", "x", PIN], "nargs=+ takes the path as a name"),
        ([PIN, "--config", "serve.yaml"], "older vLLM puts the file's options before the model"),
        (["--config=serve.yaml", "--model", PIN], "the file may name the model"),
    ],
)
def test_any_other_model_the_server_could_serve_is_refused(args: list[str], served: str) -> None:
    problems = runtime.model_problems(args, PIN)
    assert problems and all(p.startswith("MODEL ") for p in problems), (served, problems)


def test_a_refusal_names_what_was_asked(layout: dict[str, Any]) -> None:
    snap = str(layout["snap"])
    r = guard(layout["manifest"], "--model", snap, "--model", "/evil", env=layout["env"])
    assert r.returncode == 1
    assert f"guard: MODEL the server is asked to serve /evil, not the pinned snapshot {snap}" in r.stderr
    r = guard(layout["manifest"], "--secret-flag", "/evil", "--model", snap, env=layout["env"])
    assert r.returncode == 1
    assert (
        "guard: MODEL cannot tell whether /evil is the value of --secret-flag or the model the server is to serve; "
        "write --secret-flag=/evil, or give the model first" in r.stderr
    )


# --- transformers --------------------------------------------------------------------------------


@pytest.fixture
def transformers(layout: dict[str, Any]) -> dict[str, Any]:
    """The layout with a transformers directory holding one pinned transformer, named by the environment."""
    tdir = layout["root"] / "transformers"
    tdir.mkdir()
    data = b"print('rewrite one exact block')\n"
    (tdir / "10-fix.py").write_bytes(data)
    layout["doc"]["files"].append({"name": "fix", "kind": "transformer", "target": str(tdir / "10-fix.py"),
                                   "sha256": sha(data)})  # fmt: skip
    rewrite(layout)
    layout["env"] = {**layout["env"], "PATCHKIT_TRANSFORMERS_DIR": str(tdir)}
    layout["tdir"] = tdir
    return layout


def test_only_pinned_transformers_start(transformers: dict[str, Any]) -> None:
    r = guard(transformers["manifest"], str(transformers["snap"]), env=transformers["env"])
    assert r.returncode == 0, r.stderr
    assert r.stderr.startswith("guard: ok: 4 files match")


@pytest.mark.parametrize(
    "extra", ["00-extra.py", "99-late.py", "helper.py", ".hidden.py", "__pycache__/helper.cpython-312.pyc", "x.pth"]
)
def test_an_unpinned_file_in_the_transformers_directory_refuses_the_start(
    transformers: dict[str, Any], extra: str
) -> None:
    tdir: Path = transformers["tdir"]
    (tdir / extra).parent.mkdir(exist_ok=True)
    (tdir / extra).write_bytes(b"import os; os.system('id')\n")
    r = guard(transformers["manifest"], str(transformers["snap"]), env=transformers["env"])
    assert r.returncode == 1, r.stderr
    top = extra.split("/", 1)[0]
    assert r.stderr.splitlines()[0] == (
        f"guard: UNPINNED {tdir}/{top}: in the transformers directory but not pinned by the lockfile "
        "(the entrypoint would run it; remove it, or pin it with patchkit add)"
    )
    assert r.stderr.splitlines()[-1].startswith("guard: refusing to start: 1 mismatch(es)")


def test_the_directory_of_a_pinned_transformer_is_checked_whatever_the_environment(
    transformers: dict[str, Any],
) -> None:
    (transformers["tdir"] / "00-extra.py").write_bytes(b"pass\n")
    env = {k: v for k, v in transformers["env"].items() if k != "PATCHKIT_TRANSFORMERS_DIR"}
    r = guard(transformers["manifest"], str(transformers["snap"]), env=env)
    assert r.returncode == 1
    assert "UNPINNED" in r.stderr and "00-extra.py" in r.stderr


def test_the_entrypoint_the_repository_ships_runs_the_directory_the_guard_checks() -> None:
    from tests.conftest import REPO_ROOT

    text = (REPO_ROOT / "entrypoint.sh").read_text()
    assert f'transformers_dir="${{{runtime.TRANSFORMERS_ENV}:-{runtime.DEFAULT_TRANSFORMERS}}}"' in text
    assert json.loads((REPO_ROOT / "guard.json").read_text())["files"]
