"""Patcher scripts (Python that replaces exact, anchored text in upstream files) import as transformers.

Each way such scripts find the file they edit is tried, as vLLM deployments
write them: from ``vllm.__file__``, ``importlib``, ``inspect``, the site
directory, a literal path, a table of edits; and the forms that cannot be
read statically are unknown targets with their line, never a guess.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from patchkit.importing import patchers
from patchkit.lockfile.model import PatchKind
from patchkit.lockfile.reader import loads
from tests.conftest import Invoke
from tests.importing.test_queue_scripts import DIGEST, _repo

ANCHOR = 'OLD = "    if block_size != 64:\\n"\nNEW = "    if block_size not in (1, 64):\\n"\n'
EDIT = 'src = {p}.read_text()\nassert OLD in src, "anchor moved"\n{p}.write_text(src.replace(OLD, NEW))\n'
MLA = "vllm/attention/backends/mla/rocm_aiter_mla.py"

FORMS = {
    "path-parent": (
        "import vllm\nfrom pathlib import Path\n"
        + ANCHOR
        + 'p = Path(vllm.__file__).parent / "attention" / "backends" / "mla" / "rocm_aiter_mla.py"\n'
        + EDIT.format(p="p"),
        [MLA],
    ),
    "os-path-join": (
        "import os\nimport vllm\n"
        + ANCHOR
        + 'f = os.path.join(os.path.dirname(vllm.__file__), "attention/backends/mla", "rocm_aiter_mla.py")\n'
        "with open(f) as h:\n    src = h.read()\nif OLD not in src:\n    raise SystemExit('anchor moved')\n"
        "with open(f, 'w') as h:\n    h.write(src.replace(OLD, NEW))\n",
        [MLA],
    ),
    "find-spec": (
        "import importlib.util\nfrom pathlib import Path\n"
        + ANCHOR
        + 'p = Path(importlib.util.find_spec("vllm.attention.backends.mla.rocm_aiter_mla").origin)\n'
        + EDIT.format(p="p"),
        [MLA],
    ),
    "import-module-parents": (
        "import importlib\nimport pathlib\n"
        + ANCHOR
        + 'root = pathlib.Path(importlib.import_module("vllm.envs").__file__).parents[0]\n'
        'p = root.joinpath("attention", "backends", "mla", "rocm_aiter_mla.py")\n' + EDIT.format(p="p"),
        [MLA],
    ),
    "inspect-getfile": (
        "import inspect\nfrom pathlib import Path\nfrom vllm.attention.backends.mla import rocm_aiter_mla\n"
        + ANCHOR
        + "p = Path(inspect.getfile(rocm_aiter_mla))\n"
        + EDIT.format(p="p"),
        [MLA],
    ),
    "edit-table": (
        "import sys\nfrom pathlib import Path\nimport vllm\nROOT = Path(vllm.__file__).resolve().parent\n"
        "EDITS = [\n"
        '    ("v1/core/sched/scheduler.py", "a = 1\\n", "a = 2\\n"),\n'
        '    ("model_executor/layers/rope.py", "b = 1\\n", "b = 2\\n"),\n'
        "]\n"
        "for rel, old, new in EDITS:\n    p = ROOT / rel\n    s = p.read_text()\n"
        "    if old not in s:\n        sys.exit(f'{p}: anchor not found')\n    p.write_text(s.replace(old, new, 1))\n",
        ["vllm/v1/core/sched/scheduler.py", "vllm/model_executor/layers/rope.py"],
    ),
    "site-and-literal": (
        "import os\nimport site\n" + ANCHOR + 'a = os.path.join(site.getsitepackages()[0], "vllm", "envs.py")\n'
        'b = "/usr/local/lib/python3.12/dist-packages/vllm/config/__init__.py"\n'
        "for t in (a, b):\n    s = open(t).read()\n    assert OLD in s\n    open(t, 'w').write(s.replace(OLD, NEW))\n",
        ["vllm/envs.py", "vllm/config/__init__.py"],
    ),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_the_file_a_patcher_edits_is_read_statically(form: str) -> None:
    text, targets = FORMS[form]
    got = patchers.read(text.encode())
    assert got is not None and got.anchored
    assert [t for t, _ in got.targets] == targets
    assert got.unknown == []


UNKNOWN = {
    "from-argv": ("import sys\nOLD, NEW = 'a', 'b'\np = sys.argv[1]\n", "p"),
    "f-string": ("import os\nOLD, NEW = 'a', 'b'\np = f\"{os.environ['SITE']}/vllm/envs.py\"\n", "p"),
    "glob": ("import glob\nOLD, NEW = 'a', 'b'\np = glob.glob('/opt/**/envs.py')[0]\n", "p"),
}


@pytest.mark.parametrize("form", sorted(UNKNOWN))
def test_a_target_built_at_run_time_is_unknown_with_its_line(form: str) -> None:
    head, name = UNKNOWN[form]
    text = head + f"s = open({name}).read()\nassert OLD in s\nopen({name}, 'w').write(s.replace(OLD, NEW))\n"
    got = patchers.read(text.encode())
    assert got is not None and got.targets == []
    lines = head.count("\n")
    assert [line for line, _ in got.unknown] == [lines + 1, lines + 3]


NOT_PATCHERS = {
    "writes-a-config": "import json\nopen('/etc/x.json', 'w').write(json.dumps({'a': 1}))\n",
    "replace-without-write": "print('a-b'.replace('-', '_'))\n",
    "not-python": "#!/bin/sh\necho hi\n",
}


@pytest.mark.parametrize("form", sorted(NOT_PATCHERS))
def test_other_scripts_are_not_patchers(form: str) -> None:
    assert patchers.read(NOT_PATCHERS[form].encode()) is None


def test_a_replace_nothing_checks_is_reported() -> None:
    text = "import vllm, pathlib\np = pathlib.Path(vllm.__file__).parent / 'envs.py'\n"
    text += "p.write_text(p.read_text().replace('a', 'b'))\n"
    got = patchers.read(text.encode())
    assert got is not None and not got.anchored
    assert [k for k, *_ in patchers.issues(got, "x.py")] == ["patcher-not-anchored"]


def test_patchers_a_containerfile_runs_import_as_transformers(tmp_path: Path, invoke: Invoke) -> None:
    root, _, _ = _repo(tmp_path)
    (root / "patchers").mkdir()
    (root / "patchers/fix_mla.py").write_text(FORMS["path-parent"][0])
    (root / "patchers/fix_sched.py").write_text(FORMS["edit-table"][0])
    unknown = "import sys\nOLD, NEW = 'a', 'b'\np = sys.argv[1]\ns = open(p).read()\nassert OLD in s\n"
    (root / "patchers/fix_any.py").write_text(unknown + "open(p, 'w').write(s.replace(OLD, NEW))\n")
    (root / "patchers/gen_config.py").write_text(NOT_PATCHERS["writes-a-config"])
    (root / "Containerfile").write_text(
        textwrap.dedent(
            f"""\
            FROM vllm/vllm-openai-rocm@{DIGEST}
            COPY patches/vllm /tmp/q
            RUN for p in /tmp/q/*.patch; do patch -p1 -d /usr/local/lib/python3.12/site-packages < $p; done
            COPY patchers/ /opt/patchers/
            RUN python3 /opt/patchers/fix_mla.py && \\
                python3 -u /opt/patchers/fix_sched.py
            RUN python3 /opt/patchers/fix_any.py /usr/local/lib/python3.12/site-packages/vllm/envs.py
            RUN python3 /opt/patchers/gen_config.py
            """
        )
    )
    run = invoke("import", str(root), "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    issues = [(i["kind"], i["file"], i["line"]) for i in json.loads(run.stdout)["import"]["issues"]]
    assert issues == [
        ("patcher-target-unknown", "patchers/fix_any.py", 4),
        ("patcher-target-unknown", "patchers/fix_any.py", 6),
    ]
    lock = loads((root / "lockfile.toml").read_text())
    got = {p.name: (p.kind, str(p.file), str(p.target), p.reason) for p in lock.patches}
    assert got == {
        "fix_mla": (
            PatchKind.TRANSFORMER,
            "patchers/fix_mla.py",
            "/opt/patchers/fix_mla.py",
            f"replaces anchored text in {MLA}; run by Containerfile:5",
        ),
        "fix_sched": (
            PatchKind.TRANSFORMER,
            "patchers/fix_sched.py",
            "/opt/patchers/fix_sched.py",
            "replaces anchored text in vllm/v1/core/sched/scheduler.py, vllm/model_executor/layers/rope.py; "
            "run by Containerfile:5",
        ),
        "fix_any": (
            PatchKind.TRANSFORMER,
            "patchers/fix_any.py",
            "/opt/patchers/fix_any.py",
            "replaces anchored text in a file no static reading finds; run by Containerfile:7",
        ),
    }
    assert invoke("sums", repo=root).exit_code == 0
    check = invoke("check", "--format", "json", repo=root)
    assert [f for f in json.loads(check.stdout)["findings"] if f["severity"] == "error"] == [], check.stdout


def test_in_a_compose_repository_a_patcher_the_containerfile_runs_is_a_transformer_not_an_orphan(
    tmp_path: Path, invoke: Invoke
) -> None:
    from tests.importing.test_relied_on import SUMS_MOUNTS, build

    root = build(tmp_path / "deploy", sums_mount=SUMS_MOUNTS["short"])
    (root / "patches/patch_mla.py").write_text(FORMS["find-spec"][0])
    (root / "Dockerfile").write_text(
        f"FROM vllm/vllm-openai@{DIGEST}\nWORKDIR /build\nCOPY patches/patch_mla.py .\nRUN python patch_mla.py\n"
    )
    run = invoke("import", str(root), "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    assert [i["kind"] for i in json.loads(run.stdout)["import"]["issues"]] == ["mount-generated"], run.stdout
    lock = loads((root / "lockfile.toml").read_text())
    (p,) = [p for p in lock.patches if p.kind is PatchKind.TRANSFORMER]
    assert (str(p.file), str(p.target)) == ("patches/patch_mla.py", "/build/patch_mla.py")
    assert p.reason == f"replaces anchored text in {MLA}; run by Dockerfile:4"
    assert invoke("sums", repo=root).exit_code == 0
    check = invoke("check", "--format", "json", repo=root)
    assert [f for f in json.loads(check.stdout)["findings"] if f["severity"] == "error"] == [], check.stdout


@pytest.mark.parametrize(
    "start",
    [
        'ENTRYPOINT ["/opt/entrypoint.sh"]\n',  # the Containerfile's entrypoint runs it at start
        'ENTRYPOINT ["python3", "/opt/patchers/fix_mla.py"]\n',
        "CMD python3 /opt/patchers/fix_mla.py && exec vllm serve\n",
    ],
)
def test_a_patcher_the_entrypoint_runs_at_start_is_a_transformer(tmp_path: Path, invoke: Invoke, start: str) -> None:
    root, _, _ = _repo(tmp_path)
    (root / "patchers").mkdir()
    (root / "patchers/fix_mla.py").write_text(FORMS["os-path-join"][0])
    (root / "entrypoint.sh").write_text('#!/bin/sh\nset -e\npython3 /opt/patchers/fix_mla.py\nexec vllm serve "$@"\n')
    (root / "Containerfile").write_text(
        f"FROM vllm/vllm-openai-rocm@{DIGEST}\nCOPY patches/vllm /q\n"
        "RUN for p in /q/*.patch; do git -C /opt/vllm apply $p; done\n"
        "COPY patchers /opt/patchers\nCOPY entrypoint.sh /opt/entrypoint.sh\n" + start
    )
    run = invoke("import", str(root), "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    assert json.loads(run.stdout)["import"]["issues"] == []
    lock = loads((root / "lockfile.toml").read_text())
    (p,) = lock.patches
    assert (p.kind, str(p.file), str(p.target)) == (
        PatchKind.TRANSFORMER,
        "patchers/fix_mla.py",
        "/opt/patchers/fix_mla.py",
    )
    assert p.reason is not None and p.reason.startswith(f"replaces anchored text in {MLA}; run by ")
