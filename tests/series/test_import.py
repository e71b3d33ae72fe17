"""``patchkit import`` of a patch-queue repository, laid out as such repositories are really kept."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from patchkit.lockfile.reader import loads
from tests.conftest import Invoke
from tests.series.queue import FI_NAMES, VLLM_NAMES, build_queue

DIGEST = "sha256:" + "4c" * 32


def _queue_repo(tmp_path: Path, *, series_file: bool) -> tuple[Path, str, str]:
    """A hand-kept queue: patches per upstream, a Containerfile with git apply lines, profiles, a JSON lock."""
    q = build_queue(tmp_path)
    root = q.root
    if not series_file:
        (root / "patches/vllm/series").unlink()
        (root / "patches/flashinfer/series").unlink()
    apply_lines = " && \\\n    ".join(
        f"git apply /patches/vllm/{n}" for n in (VLLM_NAMES[1], VLLM_NAMES[0], VLLM_NAMES[2])
    )
    (root / "Containerfile").write_text(
        f"ARG BASE_IMAGE=vllm/vllm-openai-rocm@{DIGEST}\n"
        f"FROM vllm/vllm-openai-rocm@{DIGEST}\n"
        "ARG PROFILE=full\n"
        f"ARG VLLM_COMMIT={q.vllm_c1}\n"
        "RUN git clone https://github.com/vllm-project/vllm /opt/vllm && git -C /opt/vllm checkout ${VLLM_COMMIT}\n"
        "COPY patches /patches\n"
        f"RUN cd /opt/vllm && {apply_lines}\n"
        f"RUN cd /opt/flashinfer && git apply /patches/flashinfer/{FI_NAMES[0]}\n"
    )
    (root / "profiles").mkdir()
    (root / "profiles/full.txt").write_text("".join(f"{n}\n" for n in (*VLLM_NAMES, *FI_NAMES)))
    (root / "profiles/mxfp4.txt").write_text(f"# the MXFP4 image\n{VLLM_NAMES[0]}\n{VLLM_NAMES[1]}\n")
    (root / "versions.lock.json").write_text(
        json.dumps(
            {
                "upstreams": {
                    "vllm": {"repo": "https://github.com/vllm-project/vllm", "commit": q.vllm_c1},
                    "flashinfer": {"repo": "https://github.com/flashinfer-ai/flashinfer", "commit": q.fi_c1},
                },
                "images": {"vllm": f"vllm/vllm-openai-rocm:nightly@{DIGEST}"},
                "packages": {"flashinfer-python": "0.5.2"},
            },
            indent=2,
        )
    )
    return root, q.vllm_c1, q.fi_c1


def test_a_patch_queue_is_imported_with_its_order_pins_and_profiles(tmp_path: Path, invoke: Invoke) -> None:
    root, c1, f1 = _queue_repo(tmp_path, series_file=False)
    run = invoke("import", str(root), "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    doc = json.loads(run.stdout)["import"]
    assert doc["found"]["series"] == 2 and doc["found"]["series_patches"] == 4
    lock = loads((root / "lockfile.toml").read_text())
    vllm = next(s for s in lock.series if s.name == "vllm")
    # The order of the Containerfile's git apply lines, not the names' order.
    assert [str(p.file) for p in vllm.patches] == [
        f"patches/vllm/{n}" for n in (VLLM_NAMES[1], VLLM_NAMES[0], VLLM_NAMES[2])
    ]
    assert str(vllm.commit) == c1
    assert [str(r) for r in vllm.patches[1].refs] == ["vllm-project/vllm#48303"]
    assert vllm.patches[1].reason == "[Quant] MXFP4: FlashInfer CUTLASS backend (#48303)"
    assert vllm.patches[1].profiles == ("full", "mxfp4")
    assert vllm.patches[2].profiles == ("full",)
    assert str(lock.upstream("vllm").commit) == c1  # type: ignore[union-attr]
    assert lock.upstream("flashinfer").git == "https://github.com/flashinfer-ai/flashinfer"  # type: ignore[union-attr]
    assert str(next(s for s in lock.series if s.name == "flashinfer").commit) == f1
    assert [(i.repository, str(i.digest)) for i in lock.images] == [("vllm/vllm-openai-rocm", DIGEST)]
    kinds = {(i["kind"], i["file"]) for i in doc["issues"]}
    assert ("queue-profile-arg", "Containerfile") in kinds
    assert not any(k.startswith("queue-order") for k, _ in kinds)
    check = invoke("check", repo=root)
    assert check.exit_code == 1  # the imported SHA256SUMS is not written yet: the next commands say so
    assert invoke("sums", repo=root).exit_code == 0
    check = invoke("check", "--format", "json", repo=root)
    codes = [f["code"] for f in json.loads(check.stdout)["findings"] if f["severity"] == "error"]
    assert codes == [], check.stdout


def test_a_series_file_wins_and_what_no_source_states_is_reported(tmp_path: Path, invoke: Invoke) -> None:
    root, _, _ = _queue_repo(tmp_path, series_file=True)
    (root / "versions.lock.json").unlink()
    shutil.copy(root / "patches/flashinfer" / FI_NAMES[0], root / "patches/flashinfer/flashinfer-1600-extra.patch")
    run = invoke("import", "--dry-run", str(root), "--format", "json")
    assert run.exit_code == 0, run.stderr
    issues = [(i["kind"], i["file"], i["message"]) for i in json.loads(run.stdout)["import"]["issues"]]
    assert (
        "queue-order",
        "patches/flashinfer/series",
        "patches/flashinfer/flashinfer-1600-extra.patch is not listed, so it never applies",
    ) in issues
    assert (
        "queue-commit-unknown",
        "patches/flashinfer",
        "no lock or build file states the flashinfer commit the series applies to",
    ) in issues
    assert (
        "queue-url-unknown",
        "patches/flashinfer",
        "no lock or build file states where flashinfer comes from",
    ) in issues
    assert not (root / "lockfile.toml").exists()


def test_a_no_prefix_queue_applied_with_p0_is_imported_at_strip_0(tmp_path: Path, invoke: Invoke) -> None:
    root, _, _ = _queue_repo(tmp_path, series_file=False)
    for name in VLLM_NAMES:
        path = root / "patches/vllm" / name
        data = path.read_bytes()
        for prefix in (b"a/", b"b/"):
            data = data.replace(b" " + prefix + b"vllm/", b" vllm/").replace(b" " + prefix + b"tests/", b" tests/")
            data = data.replace(b" " + prefix + b"requirements/", b" requirements/")
        path.write_bytes(data)
    text = (root / "Containerfile").read_text().replace("git apply /patches/vllm/", "git apply -p0 /patches/vllm/")
    (root / "Containerfile").write_text(text)
    run = invoke("import", str(root), "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    issues = [i for i in json.loads(run.stdout)["import"]["issues"] if i["kind"] == "queue-patch-parse"]
    assert issues == []
    lock = loads((root / "lockfile.toml").read_text())
    assert next(s for s in lock.series if s.name == "vllm").strip == 0
    assert next(s for s in lock.series if s.name == "flashinfer").strip == 1
    assert "strip = 0" in (root / "lockfile.toml").read_text()
    assert invoke("sums", repo=root).exit_code == 0
    check = invoke("check", "--format", "json", repo=root)
    codes = [f["code"] for f in json.loads(check.stdout)["findings"] if f["severity"] == "error"]
    assert codes == [], check.stdout
