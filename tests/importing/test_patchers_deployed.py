"""``patchkit import`` of a deployment that runs source transformers, as this repository ships one.

The repository mounts ``entrypoint.sh`` and a directory's worth of patcher
scripts into the container; the entrypoint runs every script in that
directory at start, in name order (a glob loop that names no script); or a
Dockerfile copies them into the image and runs each at build. The
transformers are written the way a careful deployment writes them: the
target found from the installed package (through a helper, a module constant
or a parameter default, with an environment override for tests) and the old
text checked fail-closed (directly, or by a failure returned to ``sys.exit``).
None of those is reported. A replace nothing checks, a target only an
environment variable or ``sys.argv`` names, and a mounted transformer nothing
runs, still are, by import and by check.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import Invoke
from tests.importing.conftest import write

SHIPPED = Path(__file__).parents[2] / "patches/transformers/10-aiter-private-merge.py"
OLD_NEW = 'OLD = "    if block_size != 64:\\n"\nNEW = "    if block_size not in (1, 64):\\n"\n'
# Fail-closed transformers of other spellings than the shipped one (which is read from the repository).
CAREFUL = {
    "20-sched-default.py": (
        "import importlib\nimport os\nimport sys\nfrom pathlib import Path\n\n" + OLD_NEW + "\n\n"
        'def main(\n    path=Path(importlib.import_module("vllm.v1.core.sched.interface").__file__).parent\n'
        '    / "scheduler.py",\n):\n'
        '    path = Path(os.environ.get("SCHED_FILE", path))\n'
        "    src = path.read_text()\n"
        "    if src.count(OLD) != 1:\n"
        '        print(f"{path}: anchor not there once", file=sys.stderr)\n'
        "        return 1\n"
        "    path.write_text(src.replace(OLD, NEW, 1))\n"
        "    return 0\n\n\n"
        'if __name__ == "__main__":\n    sys.exit(main())\n'
    ),
    "30-envs-constant.py": (
        "import os\nimport re\nimport vllm\n\n"
        'TARGET = os.path.join(os.path.dirname(vllm.__file__), "envs.py")\n'
        'PATTERN = re.compile(r"^VLLM_X = 1$", re.M)\n\n'
        "with open(TARGET) as f:\n    text = f.read()\n"
        'text, n = PATTERN.subn("VLLM_X = 2", text)\n'
        "if n != 1:\n"
        '    raise SystemExit(f"{TARGET}: {n} matches")\n'
        'with open(TARGET, "w") as f:\n    f.write(text)\n'
    ),
}
UNCHECKED = (
    "import vllm\nfrom pathlib import Path\n\n"
    'p = Path(vllm.__file__).parent / "config" / "cache.py"\n'
    "src = p.read_text()\n"
    "if 'block_size = 16' not in src:\n    print('already patched?')\n"
    "p.write_text(src.replace('block_size = 16', 'block_size = 64'))\n"
)
RUN_TIME = {
    "env": "p = os.environ['PATCH_TARGET']\n",
    "argv": "p = sys.argv[1] if len(sys.argv) > 1 else os.environ['PATCH_TARGET']\n",
}
RUN_TIME_TAIL = (
    "src = open(p).read()\nif 'a = 1' not in src:\n    sys.exit('moved')\n"
    "open(p, 'w').write(src.replace('a = 1', 'a = 2'))\n"
)
ENTRYPOINT = (
    "#!/bin/sh\nset -eu\n"
    'transformers_dir="${TRANSFORMERS_DIR:-/opt/deploy/transformers}"\n'
    'for t in "$transformers_dir"/*.py; do\n    python3 "$t" || exit 1\ndone\n'
    'exec vllm serve "$@"\n'
)
CODES = {"patcher-not-anchored", "patcher-target-unknown", "transformer-not-run"}


def _deployment(root: Path, scripts: dict[str, str], *, not_run: str | None = None) -> Path:
    volumes = ["./entrypoint.sh:/opt/deploy/entrypoint.sh:ro"]
    volumes += [f"./patches/transformers/{n}:/opt/deploy/transformers/{n}:ro" for n in scripts]
    for name, text in scripts.items():
        write(root, f"patches/transformers/{name}", text)
    if not_run is not None:
        write(root, f"patches/{not_run}", scripts[next(iter(scripts))])
        volumes.append(f"./patches/{not_run}:/opt/elsewhere/{not_run}:ro")
    write(root, "entrypoint.sh", ENTRYPOINT)
    write(
        root,
        "compose.yaml",
        f"services:\n  vllm:\n    image: vllm/vllm-openai@sha256:{'ab' * 32}\n"
        '    entrypoint: ["/bin/sh", "/opt/deploy/entrypoint.sh"]\n    volumes:\n'
        + "".join(f"      - {v}\n" for v in volumes),
    )
    return root


def _import_then_check(
    root: Path, invoke: Invoke
) -> tuple[list[tuple[str, str, int | None]], list[tuple[str, str, int | None]]]:
    run = invoke("import", str(root), "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    imported = sorted(
        (i["kind"], i["file"], i["line"]) for i in json.loads(run.stdout)["import"]["issues"] if i["kind"] in CODES
    )
    assert invoke("sums", repo=root).exit_code == 0
    check = invoke("check", "--format", "json", repo=root)
    found = json.loads(check.stdout)["findings"]
    return imported, sorted((f["code"], f["file"], f["line"]) for f in found if f["code"] in CODES)


def test_fail_closed_transformers_run_by_an_entrypoint_loop_import_without_a_finding(
    tmp_path: Path, invoke: Invoke
) -> None:
    scripts = {"10-aiter-private-merge.py": SHIPPED.read_text(), **CAREFUL}
    root = _deployment(tmp_path / "deploy", scripts)
    imported, checked = _import_then_check(root, invoke)
    assert (imported, checked) == ([], [])
    lock = (root / "lockfile.toml").read_text()
    for edits in ("aiter/jit/core.py", "vllm/v1/core/sched/scheduler.py", "vllm/envs.py"):
        assert f'reason = "replaces anchored text in {edits}"' in lock


@pytest.mark.parametrize("source", sorted(RUN_TIME))
def test_an_unchecked_replace_and_a_run_time_target_are_still_reported(
    tmp_path: Path, invoke: Invoke, source: str
) -> None:
    scripts = {
        "10-aiter-private-merge.py": SHIPPED.read_text(),
        "40-unchecked.py": UNCHECKED,
        "50-run-time.py": "import os\nimport sys\n\n" + RUN_TIME[source] + RUN_TIME_TAIL,
    }
    root = _deployment(tmp_path / "deploy", scripts, not_run="60-stray.py")
    imported, checked = _import_then_check(root, invoke)
    expected = [
        ("patcher-not-anchored", "patches/transformers/40-unchecked.py", None),
        ("patcher-target-unknown", "patches/transformers/50-run-time.py", 5),
        ("patcher-target-unknown", "patches/transformers/50-run-time.py", 8),
    ]
    assert imported == [*expected, ("transformer-not-run", "compose.yaml", 10)]
    assert checked == imported  # check repeats each of them, the unrun transformer too


def test_in_a_dockerfile_build_the_same_transformers_read_the_same(tmp_path: Path, invoke: Invoke) -> None:
    scripts = {
        "10-aiter-private-merge.py": SHIPPED.read_text(),
        **CAREFUL,
        "40-unchecked.py": UNCHECKED,
        "50-run-time.py": "import os\nimport sys\n\n" + RUN_TIME["env"] + RUN_TIME_TAIL,
    }
    root = tmp_path / "deploy"
    for name, text in scripts.items():
        write(root, f"transformers/{name}", text)
    runs = "".join(f"RUN python3 /opt/transformers/{n}\n" for n in scripts)
    write(
        root, "Dockerfile", f"FROM vllm/vllm-openai@sha256:{'ab' * 32}\nCOPY transformers/ /opt/transformers/\n" + runs
    )
    imported, checked = _import_then_check(root, invoke)
    expected = [
        ("patcher-not-anchored", "transformers/40-unchecked.py", None),
        ("patcher-target-unknown", "transformers/50-run-time.py", 5),
        ("patcher-target-unknown", "transformers/50-run-time.py", 8),
    ]
    assert (imported, checked) == (expected, expected)
