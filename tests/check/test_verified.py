"""check knows what the bases were verified against: an image re-pinned without moving them fails offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import UPSTREAM_COMMIT, Invoke

OLD = "sha256:" + "a" * 64
NEW = "sha256:" + "b" * 64
REPOSITORY = "vllm/vllm-openai-rocm"


def _pin_image(invoke: Invoke, root: Path, digest: str = OLD) -> None:
    """Pin the image by hand, as an edit would (no registry), and re-lock."""
    with (root / "lockfile.toml").open("a") as f:
        f.write(f'\n[images.vllm]\nrepository = "{REPOSITORY}"\ndigest = "{digest}"\n')
    r = invoke("lock", repo=root)
    assert r.exit_code == 0, r.stderr


def _findings(invoke: Invoke, root: Path) -> tuple[int, list[dict[str, object]]]:
    r = invoke("check", "--format", "json", repo=root)
    return r.exit_code, json.loads(r.stdout)["findings"]


def _recorded(invoke: Invoke, root: Path) -> None:
    _pin_image(invoke, root)
    r = invoke("lock", "--record-verified", repo=root)
    assert r.exit_code == 0, r.stderr


def test_a_lockfile_from_before_the_field_gets_a_note_and_lock_records_it(invoke: Invoke, deploy: Path) -> None:
    _pin_image(invoke, deploy)
    code, findings = _findings(invoke, deploy)
    assert code == 0
    [note] = [f for f in findings if f["code"] == "base-unrecorded"]
    assert note["severity"] == "note" and note["field"] == "patches[kv-restore-fence].base"
    assert note["fix"] == (
        "record it once the bases are known to fit the pinned image: patchkit lock --record-verified"
    )

    r = invoke("lock", "--record-verified", repo=deploy)
    assert r.exit_code == 0, r.stderr
    assert (
        "patches[kv-restore-fence].base.verified: unrecorded -> "
        f"vllm@sha256:{'a' * 12} (upstream {UPSTREAM_COMMIT[:12]})" in r.stdout
    )
    text = (deploy / "lockfile.toml").read_text()
    assert (
        f'[patches.base.verified]\nimage = "vllm"\ndigest = "{OLD}"\nagainst = "upstream"\npin = "{UPSTREAM_COMMIT}"\n'
    ) in text
    code, findings = _findings(invoke, deploy)
    assert code == 0 and not [f for f in findings if str(f["code"]).startswith("base-")]


def test_a_hand_repinned_image_fails_offline_check_naming_the_patch_and_the_fix(invoke: Invoke, deploy: Path) -> None:
    _recorded(invoke, deploy)
    lock = deploy / "lockfile.toml"
    text = lock.read_text()
    # The image's digest (its table comes first), not the one the base records.
    lock.write_text(text.replace(f'digest = "{OLD}"', f'digest = "{NEW}"', 1))
    assert invoke("lock", repo=deploy).exit_code == 0  # a re-lock does not hide it either
    code, findings = _findings(invoke, deploy)
    assert code == 1
    [f] = [f for f in findings if f["code"] == "base-unverified"]
    lines = lock.read_text().splitlines()
    assert f["severity"] == "error" and f["file"] == "lockfile.toml"
    assert f["field"] == "patches[kv-restore-fence].base.verified.digest"
    assert lines[int(str(f["line"])) - 1] == f'digest = "{OLD}"'
    assert f["message"] == (
        f"'kv-restore-fence' was verified for image vllm at sha256:{'a' * 12} (against vllm at "
        f"{UPSTREAM_COMMIT[:12]} (not the image's files)), but the lockfile now pins vllm at sha256:{'b' * 12}: "
        "the image was re-pinned without moving the base onto it"
    )
    assert f["fix"] == f"move the bases onto the pinned image: patchkit bump --image {REPOSITORY}@{NEW}"
    text_out = invoke("check", repo=deploy)
    assert text_out.exit_code == 1 and "base-unverified" not in text_out.stdout  # text shows severity, not code
    assert f"patchkit bump --image {REPOSITORY}@{NEW}" in text_out.stdout

    # Recording again never clears a stale record: only a rebase moves it.
    assert invoke("lock", "--record-verified", repo=deploy).exit_code == 0
    assert _findings(invoke, deploy)[0] == 1


def test_an_upstream_pin_moved_by_hand_is_unverified_too(invoke: Invoke, deploy: Path) -> None:
    _recorded(invoke, deploy)
    lock = deploy / "lockfile.toml"
    other = "0" * 40
    lock.write_text(lock.read_text().replace(f'commit = "{UPSTREAM_COMMIT}"', f'commit = "{other}"', 1))
    assert invoke("lock", repo=deploy).exit_code == 0
    code, findings = _findings(invoke, deploy)
    assert code == 1
    codes = {f["code"]: f for f in findings}
    assert "base-outdated" in codes
    f = codes["base-unverified"]
    assert f["field"] == "patches[kv-restore-fence].base.verified.pin"
    assert "the pin was moved without moving the base onto it" in str(f["message"])


def test_record_verified_refuses_a_base_not_at_its_upstreams_pin(invoke: Invoke, deploy: Path) -> None:
    _pin_image(invoke, deploy)
    lock = deploy / "lockfile.toml"
    lock.write_text(lock.read_text().replace(f'commit = "{UPSTREAM_COMMIT}"', f'commit = "{"0" * 40}"', 1))
    assert invoke("lock", repo=deploy).exit_code == 0
    before = lock.read_bytes()
    r = invoke("lock", "--record-verified", repo=deploy)
    assert r.exit_code == 1
    assert "kv-restore-fence: not at the upstream's pin, so not verified against it" in r.stderr
    assert lock.read_bytes() == before


def test_no_image_pinned_means_nothing_to_verify_against(invoke: Invoke, deploy: Path) -> None:
    code, findings = _findings(invoke, deploy)
    assert code == 0 and not [f for f in findings if str(f["code"]).startswith("base-")]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("image", "3", "patches[0].base.verified.image: must be a string, got an integer"),
        ("image", '"caddy"', "patches[0].base.verified.image: names image 'caddy', which [images] does not pin"),
        ("digest", f'"{OLD[:-1]}"', "patches[0].base.verified.digest: "),
        ("digest", '"sha256:' + "A" * 64 + '"', "patches[0].base.verified.digest: "),
        ("digest", "[]", "patches[0].base.verified.digest: must be a string, got an array"),
        ("against", '"wheel"', "patches[0].base.verified.against: unknown value 'wheel' (image or upstream)"),
        ("pin", '"124154a88"', "patches[0].base.verified.pin: '124154a88' is not a full commit id"),
        ("pin", '"' + "a" * 64 + '"', "patches[0].base.verified.pin: "),
    ],
)
def test_a_bad_record_is_bad_input_at_its_line(
    invoke: Invoke, deploy: Path, field: str, value: str, message: str
) -> None:
    _recorded(invoke, deploy)
    lock = deploy / "lockfile.toml"
    lines = lock.read_text().splitlines()
    at = lines.index("[patches.base.verified]")
    i = next(j for j in range(at, len(lines)) if lines[j].startswith(f"{field} = "))
    lines[i] = f"{field} = {value}"
    lock.write_text("\n".join(lines) + "\n")
    r = invoke("check", repo=deploy)
    assert r.exit_code == 2
    assert f"lockfile.toml:{i + 1}: {message}" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_base_read_from_the_image_has_no_upstream_pin(invoke: Invoke, deploy: Path) -> None:
    _recorded(invoke, deploy)
    lock = deploy / "lockfile.toml"
    lock.write_text(lock.read_text().replace('against = "upstream"', 'against = "image"'))
    r = invoke("check", repo=deploy)
    pin_line = lock.read_text().splitlines().index(f'pin = "{UPSTREAM_COMMIT}"') + 1
    assert r.exit_code == 2
    assert f"lockfile.toml:{pin_line}: patches[0].base.verified.pin: only with against = 'upstream'" in r.stderr


def test_after_a_bare_repin_the_rebase_moves_the_base_and_records_the_image(invoke: Invoke, tmp_path: Path) -> None:
    from tests.rebase.test_overlays import FENCED, WORKER, Upstream, make_deploy

    upstream = Upstream(tmp_path / "vllm")
    c1 = upstream.commit({"vllm/worker.py": WORKER})
    root = make_deploy(invoke, tmp_path, upstream, c1, {"vllm/worker.py": FENCED})
    _recorded(invoke, root)
    lock = root / "lockfile.toml"
    lock.write_text(lock.read_text().replace(f'digest = "{OLD}"', f'digest = "{NEW}"', 1))
    assert invoke("lock", repo=root).exit_code == 0
    assert invoke("check", repo=root).exit_code == 1  # re-pinned, not re-verified

    c2 = upstream.commit({"vllm/worker.py": WORKER.replace(b"import torch\n", b"import torch\nimport logging\n")})
    r = invoke("rebase", "--onto", c2, repo=root)
    assert r.exit_code == 0, r.stderr
    assert (
        f'[patches.base.verified]\nimage = "vllm"\ndigest = "{NEW}"\nagainst = "upstream"\npin = "{c2}"\n'
        in lock.read_text()
    )
    r = invoke("check", repo=root)
    assert r.exit_code == 0, r.stdout
