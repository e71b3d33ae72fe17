"""How patcher scripts find their targets and check their anchors, read statically, class by class.

A deployment's source transformer finds the upstream file it edits from the
installed package (``find_spec``, ``import_module``, ``__file__``, ``__path__``),
often through a helper function, a module constant or a parameter default, and
may let an environment variable override it for tests. It checks the old text
fail-closed: an ``assert``, an ``if`` that raises or exits non-zero, or a
failure returned to a caller that exits with it. Each such form reads as a
known target and an anchored edit; a path only the run time knows stays unknown
with its reason, and a check that only warns, exits 0 or returns quietly is no
anchor.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.importing import patchers

HEAD = (
    "import importlib\nimport importlib.util\nimport os\nimport re\nimport sys\nfrom pathlib import Path\nimport vllm\n"
)
OLD_NEW = 'OLD = "    if block_size != 64:\\n"\nNEW = "    if block_size not in (1, 64):\\n"\n'
CHECKED = (
    'src = {p}.read_text()\nif OLD not in src:\n    sys.exit("anchor moved")\n'
    "{p}.write_text(src.replace(OLD, NEW, 1))\n"
)
SCHED = "vllm/v1/core/sched/scheduler.py"

TARGETS = {
    "find-spec-variable": (
        'spec = importlib.util.find_spec("vllm.v1.core.sched.scheduler")\np = Path(spec.origin)\n',
        [SCHED],
    ),
    "import-module-variable-parent": (
        'mod = importlib.import_module("vllm.v1.core.sched.interface")\n'
        'p = Path(mod.__file__).parent / "scheduler.py"\n',
        [SCHED],
    ),
    "dirname-join": (
        'p = Path(os.path.join(os.path.dirname(vllm.__file__), "v1", "core/sched", "scheduler.py"))\n',
        [SCHED],
    ),
    "package-path": ('p = Path(vllm.__path__[0]) / "v1" / "core" / "sched" / "scheduler.py"\n', [SCHED]),
    "search-locations": (
        'spec = importlib.util.find_spec("vllm")\n'
        'p = Path(os.path.join(next(iter(spec.submodule_search_locations)), "v1", "core", "sched", "scheduler.py"))\n',
        [SCHED],
    ),
    "helper-function": (
        'def target():\n    """Where it is."""\n    spec = importlib.util.find_spec("vllm")\n    if spec is None:\n'
        '        return None\n    return Path(spec.origin).parent / "v1/core/sched/scheduler.py"\n\n\np = target()\n',
        [SCHED],
    ),
    "env-override-of-a-known-path": (
        'def target():\n    if os.environ.get("SCHED_FILE"):\n        return Path(os.environ["SCHED_FILE"])\n'
        '    return Path(vllm.__file__).parent / "v1/core/sched/scheduler.py"\n\n\np = target()\n',
        [SCHED],
    ),
    # the package found by searching the interpreter's path, as many build-time patchers do
    "sys-path-search": (
        "p = None\nfor entry in sys.path:\n"
        "    cand = os.path.join(entry, 'vllm', 'v1', 'core', 'sched', 'scheduler.py')\n"
        "    if os.path.exists(cand):\n        p = Path(cand)\n        break\n"
        "if p is None:\n    sys.exit('no vllm')\n",
        [SCHED],
    ),
    "site-packages-search": (
        "import site\nfor d in site.getsitepackages():\n"
        "    p = Path(d) / 'vllm/v1/core/sched/scheduler.py'\n    if p.exists():\n        break\n",
        [SCHED],
    ),
    "env-get-default": (
        'p = Path(os.environ.get("SCHED_FILE", "/usr/local/lib/python3.12/site-packages/' + SCHED + '"))\n',
        [SCHED],
    ),
}
# The module constant, the parameter default and the argument: the edit is in a function.
IN_FUNCTION = {
    "module-constant": (
        'TARGET = Path(vllm.__file__).parent / "v1" / "core" / "sched" / "scheduler.py"\n\n\ndef main():\n',
        "TARGET",
        "main()\n",
    ),
    "parameter-default": (
        'def main(p=Path(vllm.__file__).parent / "v1/core/sched/scheduler.py"):\n',
        "p",
        "main()\n",
    ),
    "argument": (
        "def patch(p):\n",
        "p",
        'patch(Path(importlib.import_module("vllm").__file__).parent / "v1/core/sched/scheduler.py")\n',
    ),
}


def _in_function(form: str) -> str:
    head, p, call = IN_FUNCTION[form]
    body = "".join(f"    {line}\n" for line in CHECKED.format(p=p).splitlines())
    return HEAD + OLD_NEW + head + body + "\n\n" + call


@pytest.mark.parametrize("form", sorted(TARGETS) + sorted(IN_FUNCTION))
def test_the_file_a_patcher_edits_is_read_from_the_installed_package(form: str) -> None:
    if form in TARGETS:
        text, want = HEAD + OLD_NEW + TARGETS[form][0] + CHECKED.format(p="p"), TARGETS[form][1]
    else:
        text, want = _in_function(form), [SCHED]
    got = patchers.read(text.encode())
    assert got is not None
    assert ([t for t, _ in got.targets], got.unknown, got.anchored) == (want, [], True)
    assert patchers.issues(got, "x.py") == []


RUN_TIME = {
    "env-var": ('p = Path(os.environ["SCHED_FILE"])\n', "os.environ['SCHED_FILE']"),
    "env-get-no-default": ('p = Path(os.getenv("SCHED_FILE"))\n', "'SCHED_FILE'"),
    "argv": ("p = Path(sys.argv[1])\n", "sys.argv[1]"),
    "argument-from-argv": ("def patch(p):\n    return p\n\n\np = patch(Path(sys.argv[1]))\n", "sys.argv[1]"),
    "env-joined": ('p = Path(os.environ["SITE"]) / "vllm" / "envs.py"\n', "os.environ['SITE']"),
    "spec-of-a-computed-name": ("p = Path(importlib.util.find_spec(sys.argv[1]).origin)\n", None),
}


@pytest.mark.parametrize("form", sorted(RUN_TIME))
def test_a_path_only_the_run_time_knows_is_unknown_with_its_reason(form: str) -> None:
    head, source = RUN_TIME[form]
    text = HEAD + OLD_NEW + head + CHECKED.format(p="p")
    got = patchers.read(text.encode())
    assert got is not None and got.targets == [] and got.anchored
    line = text[: text.index("src = p.read_text()")].count("\n") + 1
    assert [n for n, _ in got.unknown] == [line, line + 3]
    if source is not None:
        assert all(why.endswith(f"read at run time from {source}") for _, why in got.unknown), got.unknown
    assert {k for k, *_ in patchers.issues(got, "x.py")} == {"patcher-target-unknown"}


P = 'p = Path(vllm.__file__).parent / "envs.py"\nsrc = p.read_text()\n'
ANCHORED = {
    "if-not-in-exit": "if OLD not in src:\n    sys.exit(f'{p}: anchor moved')\np.write_text(src.replace(OLD, NEW))\n",
    "if-not-in-raise": "if OLD not in src:\n    raise RuntimeError('moved')\np.write_text(src.replace(OLD, NEW))\n",
    "assert-in": "assert OLD in src, 'moved'\np.write_text(src.replace(OLD, NEW))\n",
    "count-then-replace-once": "if src.count(OLD) != 1:\n    sys.exit(1)\np.write_text(src.replace(OLD, NEW, 1))\n",
    "subn-count": (
        "src, n = re.subn(re.escape(OLD), NEW, src)\nif n != 1:\n    raise SystemExit('moved')\np.write_text(src)\n"
    ),
    "search-then-sub": "if not re.search(OLD, src):\n    os._exit(3)\np.write_text(re.sub(OLD, NEW, src, count=1))\n",
    "else-fails": "if OLD in src:\n    p.write_text(src.replace(OLD, NEW))\nelse:\n    sys.exit('moved')\n",
    "replaced-text-compared": (
        "out = src.replace(OLD, NEW, 1)\nif out == src:\n    sys.exit('moved')\np.write_text(out)\n"
    ),
    "failure-returned-to-exit": (
        "def main():\n    if OLD not in src:\n        print('moved')\n        return 1\n"
        "    p.write_text(src.replace(OLD, NEW))\n    return 0\n\n\nsys.exit(main())\n"
    ),
    "none-returned-and-checked": (
        "def edit(text):\n    if text.count(OLD) != 1:\n        return None\n    return text.replace(OLD, NEW, 1)\n\n\n"
        "out = edit(src)\nif out is None:\n    sys.exit('moved')\np.write_text(out)\n"
    ),
    # [0] of the matches raises IndexError when there is none: the script fails.
    "line-splice-first-match": (
        "if not p.exists():\n    sys.exit('no file')\nlines = src.splitlines(keepends=True)\n"
        "lines[[i for i, line in enumerate(lines) if line == OLD][0]] = NEW\n"
        "with open(p, 'w') as f:\n    f.write(''.join(lines))\nos.replace(p, p)\n"
    ),
    # the result picks the exit code: False from a miss exits 1
    "false-returned-to-a-chosen-exit-code": (
        "def patch():\n    if OLD not in src:\n        print('moved')\n        return False\n"
        "    p.write_text(src.replace(OLD, NEW))\n    return True\n\n\n"
        "ok = patch()\nsys.exit(0 if ok else 1)\n"
    ),
    "false-returned-to-exit-not": (
        "def patch():\n    if OLD not in src:\n        return False\n    p.write_text(src.replace(OLD, NEW))\n"
        "    return True\n\n\nok = patch()\nraise SystemExit(1 if not ok else 0)\n"
    ),
    # one of two texts (an older and a newer upstream), the chain failing when neither is there
    "elif-chain-else-fails": (
        "OLDER = 'if block_size != 32:'\n"
        "def patch():\n    if OLD in src:\n        out = src.replace(OLD, NEW)\n"
        "    elif OLDER in src:\n        out = src.replace(OLDER, NEW)\n    else:\n        return False\n"
        "    p.write_text(out)\n    return True\n\n\nok = patch()\nsys.exit(0 if ok else 1)\n"
    ),
    "failing-in-both-branches-of-a-diagnosis": (
        "if OLD in src:\n    p.write_text(src.replace(OLD, NEW))\nelse:\n    print('looking closer')\n"
        "    if re.search('block_size', src):\n        sys.exit('moved')\n    else:\n        raise SystemExit(2)\n"
    ),
    "line-splice-fail-closed": (
        "lines = src.splitlines(keepends=True)\nat = [i for i, line in enumerate(lines) if line == OLD]\n"
        "if len(at) != 1:\n    sys.exit('moved')\n"
        "lines[at[0]] = NEW\nwith open(p, 'w') as f:\n    f.write(''.join(lines))\n"
        "os.replace(p, p)\n"
    ),
}
NOT_ANCHORED = {
    "only-the-edited-file-checked": (
        "src = src.replace(OLD, NEW)\nif 'import os' not in src:\n    sys.exit('not python')\np.write_text(src)\n"
    ),
    "line-splice-only-the-file-checked": (
        "if not p.exists():\n    sys.exit('no file')\nlines = src.splitlines(keepends=True)\n"
        "at = [i for i, line in enumerate(lines) if line == OLD]\nif at:\n    lines[at[0]] = NEW\n"
        "with open(p, 'w') as f:\n    f.write(''.join(lines))\nos.replace(p, p)\n"
    ),
    "no-check": "p.write_text(src.replace(OLD, NEW))\n",
    "warns-only": "if OLD not in src:\n    print('moved')\np.write_text(src.replace(OLD, NEW))\n",
    "exits-0": "if OLD not in src:\n    sys.exit(0)\np.write_text(src.replace(OLD, NEW))\n",
    "returns-quietly": (
        "def main():\n    if OLD not in src:\n        return 1\n    p.write_text(src.replace(OLD, NEW))\n\n\nmain()\n"
    ),
    "none-returned-unchecked": (
        "def edit(text):\n    if OLD not in text:\n        return None\n    return text.replace(OLD, NEW)\n\n\n"
        "out = edit(src)\np.write_text(out or src)\n"
    ),
    "false-returned-exit-code-ignores-it": (
        "def patch():\n    if OLD not in src:\n        return False\n    p.write_text(src.replace(OLD, NEW))\n"
        "    return True\n\n\nok = patch()\nsys.exit(0 if ok or not ok else 1)\n"
    ),
    "false-returned-exit-0-either-way": (
        "def patch():\n    if OLD not in src:\n        return False\n    p.write_text(src.replace(OLD, NEW))\n"
        "    return True\n\n\nok = patch()\nsys.exit(0 if ok else 0)\n"
    ),
    "elif-chain-else-passes": (
        "OLDER = 'if block_size != 32:'\n"
        "if OLD in src:\n    src = src.replace(OLD, NEW)\nelif OLDER in src:\n    src = src.replace(OLDER, NEW)\n"
        "else:\n    print('nothing to patch')\np.write_text(src)\n"
    ),
    "failing-in-one-branch-of-a-diagnosis": (
        "if OLD in src:\n    p.write_text(src.replace(OLD, NEW))\nelse:\n"
        "    if re.search('block_size', src):\n        sys.exit('moved')\n    else:\n        print('nothing')\n"
    ),
    "subn-count-only-printed": "src, n = re.subn(OLD, NEW, src)\nprint(n)\np.write_text(src)\n",
    "one-of-two-checked": (
        "assert OLD in src\nsrc = src.replace(OLD, NEW)\np.write_text(src.replace('block_size', 'bs'))\n"
    ),
    "check-of-something-else": (
        "if '--dry-run' in sys.argv:\n    sys.exit('dry run')\np.write_text(src.replace(OLD, NEW))\n"
    ),
}


@pytest.mark.parametrize("form", sorted(ANCHORED) + sorted(NOT_ANCHORED))
def test_an_edit_is_anchored_only_by_a_check_that_fails_closed(form: str) -> None:
    text = HEAD + OLD_NEW + P + (ANCHORED.get(form) or NOT_ANCHORED[form])
    got = patchers.read(text.encode())
    assert got is not None and [t for t, _ in got.targets] == ["vllm/envs.py"]
    kinds = [k for k, *_ in patchers.issues(got, "x.py")]
    assert kinds == ([] if form in ANCHORED else ["patcher-not-anchored"])


def test_the_shipped_transformer_reads_as_anchored_with_its_target() -> None:
    shipped = Path(__file__).parents[2] / "patches/transformers/10-aiter-private-merge.py"
    got = patchers.read(shipped.read_bytes())
    assert got is not None
    assert ([t for t, _ in got.targets], got.unknown, got.anchored) == (["aiter/jit/core.py"], [], True)
