"""Patcher scripts that splice text in instead of calling ``replace``: recognised, and anchored only when a miss fails.

Field patchers find an anchor and splice around it: ``src[:i] + NEW +
src[j:]`` after ``src.index(OLD)``, a line inserted after the line a loop or
``lines.index`` finds, ``re.sub`` on a pattern. Each is a patcher (a
transformer with its target). Whether it is anchored follows Python: ``index``
and ``next`` without a default raise when the anchor is gone, so the script
fails; ``find`` returns -1 and splices at the wrong place unless its result is
checked by a branch that fails; a search loop is anchored only when its
``else`` (no ``break``: nothing found) fails; a ``try`` that swallows the
``ValueError`` undoes the anchor.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.importing import patchers
from patchkit.lockfile.reader import loads
from tests.conftest import Invoke
from tests.importing.conftest import write
from tests.importing.test_patchers_deployed import _import_then_check

HEAD = (
    "import re\nimport sys\nfrom pathlib import Path\n\nimport vllm\n\n"
    'OLD = "    if block_size != 64:\\n"\nNEW = "    if block_size not in (1, 64):\\n"\n'
    'p = Path(vllm.__file__).parent / "config" / "cache.py"\nsrc = p.read_text()\n'
)
ANCHORED = {
    "index-splice": "i = src.index(OLD)\np.write_text(src[:i] + NEW + src[i + len(OLD) :])\n",
    "find-checked": (
        "i = src.find(OLD)\nif i < 0:\n    sys.exit('anchor moved')\n"
        "p.write_text(src[:i] + NEW + src[i + len(OLD) :])\n"
    ),
    "find-checked-equal": (
        "at = src.find(OLD)\nif at == -1:\n    raise RuntimeError('moved')\n"
        "src = src[:at] + NEW + src[at + len(OLD) :]\n"
        "p.write_text(src)\n"
    ),
    "lines-index-insert": (
        "lines = src.splitlines(keepends=True)\nat = lines.index(OLD)\nlines.insert(at + 1, NEW)\n"
        "p.write_text(''.join(lines))\n"
    ),
    "loop-break-else-fails": (
        "lines = src.splitlines(keepends=True)\nfor i, line in enumerate(lines):\n    if line.startswith(OLD):\n"
        "        lines.insert(i + 1, NEW)\n        break\nelse:\n    sys.exit('anchor moved')\n"
        "p.write_text(''.join(lines))\n"
    ),
    "next-without-default": (
        "lines = src.splitlines(keepends=True)\nat = next(i for i, line in enumerate(lines) if OLD in line)\n"
        "lines[at + 1 : at + 1] = [NEW]\np.write_text(''.join(lines))\n"
    ),
    "re-sub-count-checked": (
        "new, n = re.subn(r'^    if block_size != 64:$', NEW.rstrip(), src, flags=re.M)\n"
        "if n != 1:\n    sys.exit(f'{n} matches')\np.write_text(new)\n"
    ),
    "index-splice-in-a-function": (
        "def main():\n    s = p.read_text()\n    i = s.index(OLD)\n    p.write_text(s[:i] + NEW + s[i + len(OLD) :])\n"
        "\n\nmain()\n"
    ),
}
NOT_ANCHORED = {
    "find-unchecked": "i = src.find(OLD)\np.write_text(src[:i] + NEW + src[i + len(OLD) :])\n",
    "find-only-printed": (
        "i = src.find(OLD)\nif i < 0:\n    print('moved')\np.write_text(src[:i] + NEW + src[i + len(OLD) :])\n"
    ),
    "index-swallowed": (
        "try:\n    i = src.index(OLD)\nexcept ValueError:\n    print('already patched?')\n    i = 0\n"
        "p.write_text(src[:i] + NEW + src[i:])\n"
    ),
    "loop-break-no-else": (
        "lines = src.splitlines(keepends=True)\nfor i, line in enumerate(lines):\n    if line.startswith(OLD):\n"
        "        lines.insert(i + 1, NEW)\n        break\np.write_text(''.join(lines))\n"
    ),
    "loop-else-only-prints": (
        "lines = src.splitlines(keepends=True)\nfor i, line in enumerate(lines):\n    if OLD in line:\n"
        "        lines.insert(i + 1, NEW)\n        break\nelse:\n    print('moved')\n"
        "p.write_text(''.join(lines))\n"
    ),
    "re-sub-unchecked": "p.write_text(re.sub(r'^    if block_size != 64:$', NEW.rstrip(), src, flags=re.M))\n",
}


@pytest.mark.parametrize("form", sorted(ANCHORED) + sorted(NOT_ANCHORED))
def test_a_splicing_patcher_is_one_and_anchored_only_when_a_missing_anchor_fails(form: str) -> None:
    got = patchers.read((HEAD + (ANCHORED.get(form) or NOT_ANCHORED[form])).encode())
    assert got is not None, "a splicing patcher is a patcher"
    assert ([t for t, _ in got.targets], got.unknown) == (["vllm/config/cache.py"], [])
    kinds = [k for k, *_ in patchers.issues(got, "x.py")]
    assert kinds == ([] if form in ANCHORED else ["patcher-not-anchored"])


NOT_PATCHERS = {
    "json-rewrite": (
        "import json\nfrom pathlib import Path\n\ncfg = Path('config.json')\ndata = json.loads(cfg.read_text())\n"
        "data['order'].insert(0, 'x')\ncfg.write_text(json.dumps(data))\n"
    ),
    "log-tail": (
        "from pathlib import Path\n\nlog = Path('/var/log/x.log')\ntext = log.read_text()\n"
        "Path('/tmp/tail').write_text(text[-1000:])\n"
    ),
}


@pytest.mark.parametrize("form", sorted(NOT_PATCHERS))
def test_a_script_that_searches_no_text_is_no_patcher(form: str) -> None:
    assert patchers.read(NOT_PATCHERS[form].encode()) is None


def test_a_build_that_runs_splicing_and_per_function_patchers_imports_each_as_read(
    tmp_path: Path, invoke: Invoke
) -> None:
    """Through the CLI: each patcher a transformer with its targets; only the unchecked ``find`` is reported."""
    scripts = {
        "10-index-splice.py": HEAD + ANCHORED["index-splice"],
        "20-two-files.py": _two_files(),
        "30-find-unchecked.py": HEAD + NOT_ANCHORED["find-unchecked"],
    }
    root = tmp_path / "deploy"
    for name, text in scripts.items():
        write(root, f"docker/patchers/{name}", text)
    runs = "".join(f"RUN python3 /opt/patchers/{n}\n" for n in scripts)
    write(
        root,
        "docker/Dockerfile",
        f"FROM rocm/vllm:v0.11.0@sha256:{'ab' * 32}\nCOPY docker/patchers/ /opt/patchers/\n" + runs,
    )
    imported, checked = _import_then_check(root, invoke)
    expected = [("patcher-not-anchored", "docker/patchers/30-find-unchecked.py", None)]
    assert (imported, checked) == (expected, expected)
    lock = loads((root / "lockfile.toml").read_text())
    got = {(str(p.file), str(p.target), p.reason) for p in lock.patches}
    assert got == {
        (
            "docker/patchers/10-index-splice.py",
            "/opt/patchers/10-index-splice.py",
            "replaces anchored text in vllm/config/cache.py; run by docker/Dockerfile:3",
        ),
        (
            "docker/patchers/20-two-files.py",
            "/opt/patchers/20-two-files.py",
            "replaces anchored text in vllm/v1/core/sched/scheduler.py, vllm/envs.py; run by docker/Dockerfile:4",
        ),
        (
            "docker/patchers/30-find-unchecked.py",
            "/opt/patchers/30-find-unchecked.py",
            "replaces text (unchecked) in vllm/config/cache.py; run by docker/Dockerfile:5",
        ),
    }


def _two_files() -> str:
    """One function per file, each with its own ``path`` and its own anchor."""
    one = (
        "    src = path.read_text()\n    i = src.index({old!r})\n"
        "    path.write_text(src[:i] + 'x = 2' + src[i + {n}:])\n"
    )
    return (
        "from pathlib import Path\n\nimport vllm\n\nROOT = Path(vllm.__file__).parent\n\n\n"
        "def sched():\n    path = ROOT / 'v1/core/sched/scheduler.py'\n"
        + one.format(old="a = 1", n=5)
        + "\n\ndef envs():\n    path = ROOT / 'envs.py'\n"
        + one.format(old="b = 1", n=5)
        + "\n\nsched()\nenvs()\n"
    )


IN_PLACE = {
    "fileinput-unchecked": (
        "import fileinput\nfrom pathlib import Path\n\nimport vllm\n\n"
        "p = str(Path(vllm.__file__).with_name('envs.py'))\n"
        "for line in fileinput.input(p, inplace=True):\n    print(line.replace('A = 1', 'A = 2'), end='')\n",
        False,
    ),
    "fileinput-files-keyword-checked": (
        "import fileinput\nimport os\nimport sys\n\nimport vllm\n\nOLD = 'A = 1'\n"
        "p = os.path.join(os.path.dirname(vllm.__file__), 'envs.py')\n"
        "if OLD not in open(p).read():\n    sys.exit('anchor moved')\n"
        "with fileinput.FileInput(files=(p,), inplace=True) as f:\n"
        "    for line in f:\n        print(line.replace(OLD, 'A = 2'), end='')\n",
        True,
    ),
}


@pytest.mark.parametrize("form", sorted(IN_PLACE))
def test_a_fileinput_in_place_rewrite_is_a_patcher(form: str) -> None:
    text, anchored = IN_PLACE[form]
    got = patchers.read(text.encode())
    assert got is not None and ([t for t, _ in got.targets], got.anchored) == (["vllm/envs.py"], anchored)
