from __future__ import annotations

import dataclasses

import pytest

from patchkit.core.values import ContainerPath, Digest, Reference, RepoPath, Revision, Sha256, UpstreamPath
from patchkit.errors import LockfileError
from patchkit.lockfile.model import (
    Artifact,
    Base,
    DiffPin,
    GitUpstream,
    Image,
    Lockfile,
    Model,
    Patch,
    PatchKind,
)
from patchkit.lockfile.reader import loads
from patchkit.lockfile.writer import dumps

H = "a" * 64
COMMIT = "124154a8843d1f8e4d4e2d5d466e2d3ebc3716da"

GOOD = f"""schema = 1

[images.vllm]
repository = "vllm/vllm-openai-rocm"
digest = "sha256:{H}"

[model]
repo = "deepseek-ai/DeepSeek-V4-Flash-0731"
revision = "7872f01b1d1fe23eabc4c98b48bffcef5a386062"

[upstreams.vllm]
git = "https://github.com/vllm-project/vllm"
commit = "{COMMIT}"

[[patches]]
name = "kv-fence"
kind = "overlay"
file = "patches/gpu_worker.py"
sha256 = "{H}"
target = "/usr/lib/vllm/gpu_worker.py"
refs = ["vllm-project/vllm#47291"]

[patches.base]
upstream = "vllm"
commit = "{COMMIT}"
path = "vllm/gpu_worker.py"
sha256 = "{H}"

[patches.diff]
file = "upstream/kv-fence.diff"
sha256 = "{H}"
"""


def problems_of(text: str) -> list[str]:
    with pytest.raises(LockfileError) as e:
        loads(text)
    return [p.render() for p in e.value.problems]


def test_loads_good() -> None:
    lock = loads(GOOD)
    assert lock.images[0].digest == Digest(f"sha256:{H}")
    assert lock.model is not None and lock.model.revision.sha.startswith("7872f01b")
    p = lock.patches[0]
    assert p.kind is PatchKind.OVERLAY and p.committed
    assert p.base is not None and p.base.path == UpstreamPath("vllm/gpu_worker.py")
    assert p.refs == (Reference("vllm-project/vllm#47291"),)


def test_malformed_toml_reports_line() -> None:
    text = GOOD.replace('name = "kv-fence"', 'name = "kv-fence')
    (msg,) = problems_of(text)
    line = text.splitlines().index('name = "kv-fence') + 1
    assert msg.startswith(f"lockfile.toml:{line}:")
    assert "not valid TOML" in msg


def test_unknown_schema_version() -> None:
    (msg,) = problems_of(GOOD.replace("schema = 1", "schema = 2"))
    assert msg.startswith("lockfile.toml:1: schema:")
    assert "unknown schema version 2" in msg


def test_missing_schema() -> None:
    (msg,) = problems_of(GOOD.replace("schema = 1\n", ""))
    assert "missing 'schema'" in msg


@pytest.mark.parametrize(
    ("bad", "expect"),
    [
        (f"sha256:{'a' * 63}", "got 63"),
        (f"sha256:{'A' * 64}", "uppercase"),
    ],
)
def test_bad_image_digest_located(bad: str, expect: str) -> None:
    text = GOOD.replace(f'digest = "sha256:{H}"', f'digest = "{bad}"')
    (msg,) = problems_of(text)
    assert msg.startswith("lockfile.toml:5: images.vllm.digest:")
    assert expect in msg


@pytest.mark.parametrize(
    ("header", "line"),
    [
        ('[images."vllm-é"]', 3),  # a quoted name, not ASCII
        ('[images."vllm\\u00E9"]', 3),  # an escape in it
        ('[images."vllm-\\U0001F600"]', 3),
    ],
)
def test_a_problem_under_a_quoted_name_is_at_its_line(header: str, line: int) -> None:
    (msg,) = problems_of(GOOD.replace("[images.vllm]", header))
    assert msg.startswith(f"lockfile.toml:{line}: images."), msg
    # A line separator a comment may hold (U+2028, U+0085) ends no line for TOML, nor for the lines reported.
    (msg,) = problems_of(GOOD.replace("[images.vllm]", "# a\u2028b\x85c\n" + header))
    assert msg.startswith(f"lockfile.toml:{line + 1}: images."), msg


def test_branch_as_model_revision() -> None:
    text = GOOD.replace('revision = "7872f01b1d1fe23eabc4c98b48bffcef5a386062"', 'revision = "main"')
    (msg,) = problems_of(text)
    assert msg.startswith("lockfile.toml:9: model.revision:")
    assert "'main' is not a full commit id" in msg


def test_branch_as_upstream_commit() -> None:
    text = GOOD.replace(f'commit = "{COMMIT}"\n\n[[patches]]', 'commit = "main"\n\n[[patches]]')
    (msg,) = problems_of(text)
    assert "upstreams.vllm.commit" in msg and "not a full commit id" in msg


def test_relative_container_target() -> None:
    text = GOOD.replace('target = "/usr/lib/vllm/gpu_worker.py"', 'target = "usr/lib/vllm/gpu_worker.py"')
    (msg,) = problems_of(text)
    line = text.splitlines().index('target = "usr/lib/vllm/gpu_worker.py"') + 1
    assert msg.startswith(f"lockfile.toml:{line}: patches[0].target:")
    assert "not an absolute container path" in msg


def test_path_with_dotdot() -> None:
    text = GOOD.replace('file = "patches/gpu_worker.py"', 'file = "patches/../../etc/passwd"')
    (msg,) = problems_of(text)
    assert "patches[0].file" in msg and "leaves the repository" in msg


def test_unknown_field_and_every_problem_reported() -> None:
    text = (
        GOOD.replace('kind = "overlay"', 'kind = "overlay"\nsha265 = "x"')
        .replace("schema = 1", "schema = 1\n")
        .replace('digest = "sha256:' + H, 'digest = "sha256:' + H[:10])
    )
    msgs = problems_of(text)
    assert len(msgs) == 2
    assert any("unknown field 'sha265'" in m for m in msgs)
    assert any("images.vllm.digest" in m for m in msgs)


def test_overlay_without_base_or_diff() -> None:
    start = GOOD.index("[patches.base]")
    msgs = problems_of(GOOD[:start])
    assert any("an overlay needs [base]" in m for m in msgs)
    assert any("an overlay needs [diff]" in m for m in msgs)


def test_undeclared_upstream() -> None:
    msgs = problems_of(GOOD.replace('upstream = "vllm"', 'upstream = "aiter"'))
    assert any("upstream 'aiter' is not declared" in m for m in msgs)


def test_duplicate_patch_names() -> None:
    start = GOOD.index("[[patches]]")
    msgs = problems_of(GOOD + "\n" + GOOD[start:])
    assert any("duplicate patch name 'kv-fence'" in m for m in msgs)


def test_image_repository_with_tag_refused() -> None:
    msgs = problems_of(
        GOOD.replace('repository = "vllm/vllm-openai-rocm"', 'repository = "vllm/vllm-openai-rocm:nightly"')
    )
    assert any("without a tag or digest" in m for m in msgs)


def _sample() -> Lockfile:
    h = Sha256(H)
    return Lockfile(
        name="prod",
        images=(Image("vllm", "vllm/vllm-openai-rocm", Digest(f"sha256:{H}"), tag="nightly"),),
        model=Model("deepseek-ai/DeepSeek-V4-Flash-0731", Revision(COMMIT)),
        upstreams=(GitUpstream("vllm", git="https://github.com/vllm-project/vllm", commit=Revision(COMMIT)),),
        patches=(
            Patch(
                "kv-fence", PatchKind.OVERLAY, h, ContainerPath("/x/y.py"),
                file=RepoPath("patches/y.py"),
                base=Base("vllm", UpstreamPath("vllm/y.py"), h, Revision(COMMIT)),
                diff=DiffPin(RepoPath("upstream/kv-fence.diff"), h),
                reason='quotes " and \\ backslashes survive', refs=(Reference("vllm-project/vllm#47291"),),
            ),
            Patch(
                "diff-only", PatchKind.OVERLAY, h, ContainerPath("/x/z.py"),
                base=Base("vllm", UpstreamPath("vllm/z.py"), h),
                diff=DiffPin(RepoPath("upstream/diff-only.diff"), h),
            ),
        ),
        tuning=(Artifact("moe", RepoPath("tuning/moe.csv"), h, ContainerPath("/opt/moe.csv")),),
        artifacts=(Artifact("compose", RepoPath("compose.yaml"), h),),
    )  # fmt: skip


def test_dumps_round_trips_and_is_deterministic() -> None:
    lock = _sample()
    text = dumps(lock)
    again = loads(text)
    assert again == lock
    assert dumps(again) == text


def test_dumps_is_canonical_whatever_the_input_order() -> None:
    lock = _sample()
    text = dumps(lock)
    # The same images and upstreams given in another order dump identically.
    extra = Image("caddy", "caddy", Digest(f"sha256:{'b' * 64}"))
    one = dataclasses.replace(lock, images=(*lock.images, extra))
    two = dataclasses.replace(lock, images=(extra, *lock.images))
    assert dumps(one) == dumps(two)
    assert text.index("[images.vllm]") < text.index("[upstreams.vllm]")


def test_diff_only_patch_loads_without_file() -> None:
    lock = loads(dumps(_sample()))
    p = lock.patch("diff-only")
    assert p is not None and not p.committed and p.diff is not None


TUNING = '\n[[tuning]]\nname = "{name}"\nfile = "{file}"\nsha256 = "' + H + '"\n{target}'
ARTIFACT = '\n[[artifacts]]\nname = "{name}"\nfile = "{file}"\nsha256 = "' + H + '"\n'
HAND_DIFF = '\n[[diffs]]\nfile = "{file}"\nsha256 = "' + H + '"\npatches = ["kv-fence"]\n'


@pytest.mark.parametrize(
    ("extra", "expect"),
    [
        (TUNING.format(name="kv-fence", file="tuning/a.csv", target='target = "/opt/a.csv"\n'),
         "name 'kv-fence' is also used by patches[0]"),
        (TUNING.format(name="t", file="patches/gpu_worker.py", target='target = "/opt/a.csv"\n'),
         "patches/gpu_worker.py is already pinned by patches[0].file"),
        (TUNING.format(name="t", file="SHA256SUMS", target='target = "/opt/a.csv"\n'),
         "SHA256SUMS is generated by patchkit and cannot be pinned"),
        (TUNING.format(name="t", file="tuning/a.csv", target='target = "/opt/a.csv"\n')
         + ARTIFACT.format(name="t", file="a.txt"),
         "name 't' is also used by tuning[0]"),
        (ARTIFACT.format(name="a", file="upstream/kv-fence.diff"),
         "upstream/kv-fence.diff is already pinned by patches[0].diff.file"),
        (ARTIFACT.format(name="a", file="a.txt") + ARTIFACT.format(name="b", file="a.txt"),
         "a.txt is already pinned by artifacts[0].file"),
        (ARTIFACT.format(name="a", file="lockfile.toml"),
         "lockfile.toml is generated by patchkit and cannot be pinned"),
        (HAND_DIFF.format(file="upstream/kv-fence.diff"),
         "upstream/kv-fence.diff is already pinned by patches[0].diff.file"),
        (TUNING.format(name="t", file="tuning/a.csv", target=""), "tuning[0]: missing required field 'target'"),
        (TUNING.format(name="t", file="tuning/a.csv", target='target = "/"\n'), "'/' is not a file path"),
    ],
)  # fmt: skip
def test_cross_entry_rules(extra: str, expect: str) -> None:
    msgs = problems_of(GOOD + extra)
    assert any(expect in m for m in msgs), msgs


@pytest.mark.parametrize(
    ("old", "new", "expect"),
    [
        ('repository = "vllm/vllm-openai-rocm"', 'repository = ""', "images.vllm.repository: is empty"),
        ('repo = "deepseek-ai/DeepSeek-V4-Flash-0731"', 'repo = "deepseek-ai/"', "is not a Hugging Face repo id"),
        ('path = "vllm/gpu_worker.py"', 'path = "../vllm/gpu_worker.py"', "is not a path inside the upstream tree"),
        ('kind = "overlay"', 'kind = "module"', "a module is a new file and has no upstream base"),
        ('kind = "overlay"', 'kind = "transformer"', "a transformer has no diff against upstream"),
        ('kind = "overlay"', 'kind = "plugin"', "unknown kind 'plugin'"),
    ],
)
def test_field_rules(old: str, new: str, expect: str) -> None:
    assert old in GOOD
    msgs = problems_of(GOOD.replace(old, new))
    assert any(expect in m for m in msgs), msgs


@pytest.mark.parametrize("text", [GOOD, "schema = [\n", GOOD.replace("schema = 1", "schema = 2")])
def test_the_garbage_collector_runs_again_after_a_load_good_or_bad(text: str) -> None:
    import contextlib
    import gc

    assert gc.isenabled()
    with contextlib.suppress(LockfileError):
        loads(text)
    assert gc.isenabled()
    gc.disable()
    try:
        loads(GOOD)
        assert not gc.isenabled()  # a caller's pause is the caller's
    finally:
        gc.enable()
