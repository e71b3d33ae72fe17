"""patchkit check --online against the real local registry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import Invoke

from .conftest import ClientFactory, FakeRegistry, ImageBuilder, RegistryServer, Reply, registry_error

TARGET = "/usr/local/lib/python3.12/dist-packages/vllm/worker.py"
BASE = b"def restore():\n    return 1\n"


@pytest.fixture
def pinned(
    invoke: Invoke, tmp_path: Path, image_builder: ImageBuilder, registry_server: RegistryServer
) -> tuple[Path, str]:
    """A deployment pinning a fresh image (its own tag) that carries TARGET with BASE."""
    tag = f"online-{tmp_path.name[-12:].lower().replace('_', '-')}"
    image_builder.new(tag)
    image_builder.repack(tag, {TARGET.lstrip("/"): BASE})
    ref = registry_server.push(image_builder.ref(tag), f"patchkit/online:{tag}")
    root = tmp_path / "deploy"
    assert invoke("init", str(root)).exit_code == 0
    assert invoke("image", "pin", "vllm", ref, repo=root).exit_code == 0
    with (root / "lockfile.toml").open("a") as f:
        f.write('\n[upstreams.vllm]\ngit = "https://github.com/vllm-project/vllm"\n')
    assert invoke("lock", repo=root).exit_code == 0
    base = tmp_path / "base.py"
    base.write_bytes(BASE)
    edited = tmp_path / "worker.py"
    edited.write_bytes(BASE.replace(b"return 1", b"return 2"))
    r = invoke(
        "add", str(edited), "--target", TARGET, "--upstream", "vllm", "--upstream-path", "vllm/worker.py",
        "--base", str(base), repo=root,
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    return root, tag


def findings(invoke: Invoke, root: Path, *args: str) -> tuple[int, list[dict[str, object]]]:
    r = invoke("check", "--online", "--format", "json", *args, repo=root)
    assert r.stdout, r.stderr
    return r.exit_code, json.loads(r.stdout)["findings"]


def test_online_passes_and_image_bases_match(invoke: Invoke, pinned: tuple[Path, str]) -> None:
    root, _ = pinned
    code, found = findings(invoke, root, "--image-bases")
    assert code == 0, found
    assert found == []


def test_tag_moved_is_a_note(
    invoke: Invoke, pinned: tuple[Path, str], image_builder: ImageBuilder, registry_server: RegistryServer
) -> None:
    root, tag = pinned
    image_builder.repack(tag, {"etc/moved": b"1\n"})
    registry_server.push(image_builder.ref(tag), f"patchkit/online:{tag}")
    code, found = findings(invoke, root)
    assert code == 0
    assert [(f["code"], f["severity"]) for f in found] == [("tag-moved", "note")]


def test_pinned_digest_gone_fails(invoke: Invoke, pinned: tuple[Path, str]) -> None:
    root, _ = pinned
    lock = root / "lockfile.toml"
    text = lock.read_text()
    start = text.index('digest = "sha256:') + len('digest = "sha256:')
    lock.write_text(text[:start] + "0" * 64 + text[start + 64 :])
    assert invoke("sums", repo=root).exit_code == 0
    code, found = findings(invoke, root)
    assert code == 1
    # The digest edited by hand also leaves the overlay's base verified for the old image (offline).
    assert [f["code"] for f in found] == ["base-unverified", "image-gone"]
    assert found[1]["field"] == "images.vllm.digest"


def test_image_base_mismatch_fails(invoke: Invoke, pinned: tuple[Path, str], tmp_path: Path) -> None:
    root, _ = pinned
    assert invoke("remove", "worker", repo=root).exit_code == 0
    older = tmp_path / "older.py"
    older.write_bytes(b"def restore():\n    return 0\n")
    edited = tmp_path / "worker.py"
    r = invoke(
        "add", str(edited), "--target", TARGET, "--upstream", "vllm", "--upstream-path", "vllm/worker.py",
        "--base", str(older), repo=root,
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    assert invoke("check", repo=root).exit_code == 0  # offline, nothing can tell
    code, found = findings(invoke, root, "--image-bases")
    assert code == 1
    assert [f["code"] for f in found] == ["image-base-mismatch"]
    assert "would revert what the image contains" in str(found[0]["message"])


def test_image_bases_needs_online(invoke: Invoke, pinned: tuple[Path, str]) -> None:
    root, _ = pinned
    r = invoke("check", "--image-bases", repo=root)
    assert r.exit_code == 2 and "--image-bases needs --online" in r.stderr


def test_an_unreachable_service_is_reported_and_the_others_still_checked(
    invoke: Invoke, pinned: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GitHub unreachable: the registry is still asked, and the references are 'not checked', not a pass."""
    root, _ = pinned
    module = tmp_path / "sync_fix.py"
    module.write_bytes(b"def sync():\n    return 0\n")
    r = invoke(
        "add", str(module), "--kind", "module", "--target", "/opt/patchkit/sync_fix.py",
        "--ref", "vllm-project/vllm#47291", repo=root,
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    monkeypatch.setenv("GITHUB_API_URL", "http://127.0.0.1:9")
    code, found = findings(invoke, root)
    assert code == 3
    (unknown,) = found
    assert (unknown["code"], unknown["severity"], unknown["field"]) == ("online-unavailable", "unknown", "refs")
    assert "the issue tracker could not be asked" in str(unknown["message"])
    assert "cannot reach http://127.0.0.1:9" in str(unknown["message"])
    text = invoke("check", "--online", repo=root)
    assert text.exit_code == 3 and "lockfile.toml: unknown: refs: the issue tracker" in text.stdout
    assert (
        text.stdout.splitlines()[-1] == "check: incomplete: 3 files hashed, 1 diffs verified, 0 errors, 1 not checked"
    )

    lock = root / "lockfile.toml"  # the registry's answer is still heard: a pin that is gone fails
    content = lock.read_text()
    start = content.index('digest = "sha256:') + len('digest = "sha256:')
    lock.write_text(content[:start] + "0" * 64 + content[start + 64 :])
    assert invoke("sums", repo=root).exit_code == 0
    code, found = findings(invoke, root)
    assert code == 1
    # The digest edited by hand also leaves the overlay's base verified for the old image (offline).
    assert [f["code"] for f in found] == ["base-unverified", "image-gone", "online-unavailable"]


def _pin_unreachable(root: Path, *names: str) -> str:
    """Pin ``names`` on a registry that nothing listens on (a closed port on 127.0.0.1); its host."""
    from .conftest import free_port

    host = f"127.0.0.1:{free_port()}"
    with (root / "lockfile.toml").open("a") as f:
        for name in names:
            f.write(f'\n[images.{name}]\nrepository = "{host}/proxy/{name}"\ndigest = "sha256:{"c" * 64}"\n')
    return host


def test_an_unreachable_registry_hides_nothing_of_the_reachable_one(
    invoke: Invoke,
    pinned: tuple[Path, str],
    tmp_path: Path,
    image_builder: ImageBuilder,
    registry_server: RegistryServer,
) -> None:
    """The proxy image's registry is down: the image on the other registry still gets every finding."""
    root, tag = pinned
    host = _pin_unreachable(root, "proxy")
    assert invoke("lock", repo=root).exit_code == 0
    code, found = findings(invoke, root, "--image-bases")
    assert code == 3, found  # only "not checked": the reachable registry found nothing
    assert [(f["code"], f["severity"], f["field"]) for f in found] == [
        ("online-unavailable", "unknown", "images.proxy")
    ]
    assert str(found[0]["message"]).startswith(f"registry {host} could not be asked, so this was not checked: ")
    assert found[0]["line"] == (root / "lockfile.toml").read_text().splitlines().index("[images.proxy]") + 3

    # Drift on the reachable registry: its tag moved, and an overlay's base is not the image's file.
    image_builder.repack(tag, {"etc/moved": b"1\n"})
    registry_server.push(image_builder.ref(tag), f"patchkit/online:{tag}")
    assert invoke("remove", "worker", repo=root).exit_code == 0
    older = tmp_path / "older.py"
    older.write_bytes(b"def restore():\n    return 0\n")
    r = invoke(
        "add", str(tmp_path / "worker.py"), "--target", TARGET, "--upstream", "vllm",
        "--upstream-path", "vllm/worker.py", "--base", str(older), repo=root,
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    code, found = findings(invoke, root, "--image-bases")
    assert code == 1  # a failure found on the reachable registry wins over "not checked"
    assert [(f["code"], f["field"]) for f in found] == [
        ("tag-moved", "images.vllm.tag"),
        ("image-base-mismatch", "patches[worker].base.sha256"),
        ("online-unavailable", "images.proxy"),
    ]
    text = invoke("check", "--online", "--image-bases", repo=root)
    assert text.exit_code == 1
    lines = [line for line in text.stdout.splitlines() if "unknown:" in line]
    assert len(lines) == 1 and f"unknown: images.proxy: registry {host} could not be asked" in lines[0]


def test_images_on_one_unreachable_registry_share_one_line(invoke: Invoke, pinned: tuple[Path, str]) -> None:
    """The registry is asked once: the second image on it is named on the same line, not asked again."""
    root, _ = pinned
    host = _pin_unreachable(root, "cache", "proxy")
    assert invoke("lock", repo=root).exit_code == 0
    code, found = findings(invoke, root)
    assert code == 3
    assert [(f["code"], f["field"]) for f in found] == [("online-unavailable", "images.cache")]
    message = str(found[0]["message"])
    assert message.startswith(f"registry {host} could not be asked, so images.cache, images.proxy were not checked")
    assert "cannot connect ([Errno 111] Connection refused)" in message


def test_a_failing_or_silent_registry_is_its_own_line(
    invoke: Invoke, pinned: tuple[Path, str], fake_registry: FakeRegistry, make_client: ClientFactory
) -> None:
    """A registry answering 500, and one that does not answer in time, are each one line; the good one is asked."""
    from patchkit.lockfile.reader import loads as load_lock
    from patchkit.lockfile.tomlpos import LineIndex
    from patchkit.tracking.online import image_findings

    root, _ = pinned
    digest = "sha256:" + "c" * 64
    fake_registry.route("HEAD", f"/v2/proxy/caddy/manifests/{digest}", Reply(503, registry_error("UNAVAILABLE", "x")))
    slow = FakeRegistry()
    try:
        slow.route("HEAD", f"/v2/proxy/cache/manifests/{digest}", Reply(delay=2.0))
        with (root / "lockfile.toml").open("a") as f:
            for name, host in (("caddy", fake_registry.host), ("cache", slow.host)):
                f.write(f'\n[images.{name}]\nrepository = "{host}/proxy/{name}"\ndigest = "{digest}"\n')
        text = (root / "lockfile.toml").read_text()
        vllm = next(i for i in load_lock(text).images if i.name == "vllm")
        gone = text.replace(str(vllm.digest), "sha256:" + "0" * 64)  # and the reachable one's pin is gone
        found = image_findings(load_lock(gone), LineIndex(gone).line_of, make_client(timeout=0.5))
    finally:
        slow.close()
    assert [(f.code, f.field, f.severity) for f in found] == [
        ("image-gone", "images.vllm.digest", "error"),
        ("online-unavailable", "images.caddy", "unknown"),
        ("online-unavailable", "images.cache", "unknown"),
    ]
    assert found[1].message.startswith(f"registry {fake_registry.host} could not be asked, so this was not checked")
    assert "503" in found[1].message
    assert found[2].message.startswith(f"registry {slow.host} could not be asked, so this was not checked")


def test_an_image_the_registry_refuses_is_one_line_with_image_bases(
    pinned: tuple[Path, str], auth_registry_server: RegistryServer, make_client: ClientFactory
) -> None:
    """401 (no credentials) is about that image, not the registry: one line for it, however often it would be read."""
    from patchkit.lockfile.reader import loads as load_lock
    from patchkit.lockfile.tomlpos import LineIndex
    from patchkit.tracking.online import image_findings

    root, _ = pinned
    with (root / "lockfile.toml").open("a") as f:
        f.write(
            f'\n[images.private]\nrepository = "{auth_registry_server.host}/team/app"\ndigest = "sha256:{"d" * 64}"\n'
        )
    text = (root / "lockfile.toml").read_text()
    found = image_findings(load_lock(text), LineIndex(text).line_of, make_client(), image_bases=True)
    assert [(f.code, f.field) for f in found] == [("online-unavailable", "images.private")]
    assert "401 authentication required" in found[0].message
