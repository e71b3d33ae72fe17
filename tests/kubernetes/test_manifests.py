"""``patchkit emit --target kubernetes``: manifests of the shipped deployment, validated, byte-stable, checked."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]

from patchkit.emit import kubernetes
from patchkit.emit.config import ConfigError, Healthcheck, load_config
from patchkit.errors import BadInput
from patchkit.lockfile.reader import loads as load_lock
from tests.conftest import Invoke, copy_shipped, snapshot

DERIVED = "sha256:" + "d" * 64
LAYER = "sha256:" + "1" * 64
DIFF_ID = "sha256:" + "2" * 64
KUBERNETES = """
[kubernetes]
version = "1.33.0"
namespace = "inference"
model_cache_claim = "hf-cache"
supplemental_groups = [44, 110]
"""


def derived_table(profile: str, base_digest: str) -> str:
    return (
        f'\n[derived.{profile}]\nbase = "vllm"\nrepository = "registry.example/team/vllm-patched"\n'
        f'tag = "{profile}"\ndigest = "{DERIVED}"\nbase_digest = "{base_digest}"\n'
        f'layer_digest = "{LAYER}"\ndiff_id = "{DIFF_ID}"\ncreated = "2026-01-01T00:00:00Z"\n'
    )


@pytest.fixture
def shipped(tmp_path: Path, invoke: Invoke) -> Path:
    """The shipped deployment with a [kubernetes] table and a derived image pinned for both profiles."""
    root = copy_shipped(tmp_path / "shipped")
    with (root / "deploy.toml").open("a") as f:
        f.write(KUBERNETES)
    base = load_lock((root / "lockfile.toml").read_text()).images
    vllm = next(i for i in base if i.name == "vllm")
    with (root / "lockfile.toml").open("a") as f:
        f.write(derived_table("single", vllm.digest.text) + derived_table("tp1x2", vllm.digest.text))
    r = invoke("lock", repo=root)
    assert r.exit_code == 0, r.stderr
    return root


def objects(root: Path, profile: str) -> list[dict[str, Any]]:
    lock = load_lock((root / "lockfile.toml").read_text())
    return kubernetes.manifests(lock, load_config(root / "deploy.toml"), profile)


def by_kind(objs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(o["kind"], o["metadata"]["name"]) for o in objs]


def test_every_replica_gets_a_deployment_and_a_service_and_the_proxy_follows(shipped: Path) -> None:
    objs = objects(shipped, "tp1x2")
    assert by_kind(objs) == [
        ("Deployment", "vllm-0"),
        ("Service", "vllm-0"),
        ("Deployment", "vllm-1"),
        ("Service", "vllm-1"),
        ("Deployment", "proxy"),
        ("Service", "proxy"),
    ]
    assert {o["metadata"]["namespace"] for o in objs} == {"inference"}
    problems, ran = kubernetes.validate(objs, "1.33.0")
    assert (problems, ran) == ([], True)


def test_the_inference_pod_runs_the_derived_image_with_gpus_shm_cache_and_probes(shipped: Path) -> None:
    lock = load_lock((shipped / "lockfile.toml").read_text())
    assert lock.model is not None
    deployment = objects(shipped, "single")[0]
    spec = deployment["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    # 30 min of start-up allowance plus ten minutes: a model load is not a failed rollout.
    assert spec["progressDeadlineSeconds"] == 1800 + 600
    pod = spec["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"] == {"supplementalGroups": [44, 110]}
    (c,) = pod["containers"]
    assert c["image"] == f"registry.example/team/vllm-patched@{DERIVED}"
    assert c["command"] == ["/opt/patchkit/entrypoint.sh"]
    model_path = (
        f"/root/.cache/huggingface/hub/models--deepseek-ai--DeepSeek-V4-Flash-0731/snapshots/{lock.model.revision}"
    )
    assert c["args"] == [
        model_path,
        "--served-model-name=deepseek-v4-flash",
        "--tensor-parallel-size=1",
        "--host=0.0.0.0",
        "--port=8000",
    ]
    assert c["env"] == [{"name": "HF_HUB_OFFLINE", "value": "1"}, {"name": "VLLM_ROCM_USE_AITER", "value": "1"}]
    assert c["resources"] == {"limits": {"amd.com/gpu": 1}, "requests": {"amd.com/gpu": 1}}
    assert c["volumeMounts"] == [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "model-cache", "mountPath": "/root/.cache/huggingface", "readOnly": True},
    ]
    assert pod["volumes"] == [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}},
        {"name": "model-cache", "persistentVolumeClaim": {"claimName": "hf-cache", "readOnly": True}},
    ]
    get = {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 30, "timeoutSeconds": 5}
    assert c["startupProbe"] == {**get, "failureThreshold": 60}
    assert c["readinessProbe"] == c["livenessProbe"] == {**get, "failureThreshold": 3}
    assert c["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "Unconfined"},
    }


def test_the_proxy_keeps_client_addresses_and_pins_caddy_by_digest(shipped: Path) -> None:
    lock = load_lock((shipped / "lockfile.toml").read_text())
    caddy = next(i for i in lock.images if i.name == "caddy")
    proxy, service = objects(shipped, "single")[-2:]
    (c,) = proxy["spec"]["template"]["spec"]["containers"]
    assert c["image"] == f"caddy@{caddy.digest}"
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}
    assert proxy["spec"]["template"]["spec"]["volumes"] == [
        {"name": "caddyfile", "configMap": {"name": "deepseek-v4-flash-caddyfile"}},
        {"name": "data", "persistentVolumeClaim": {"claimName": "caddy-data"}},
    ]
    assert service["spec"]["type"] == "LoadBalancer"
    assert service["spec"]["externalTrafficPolicy"] == "Local"
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(80, "port-80"), (443, "port-443")]


def test_emit_writes_byte_stable_validated_files_and_check_catches_drift(shipped: Path, invoke: Invoke) -> None:
    r = invoke("emit", "--target", "kubernetes", repo=shipped)
    assert r.exit_code == 0, r.stderr
    assert "wrote kubernetes/single.yaml" in r.stdout and "wrote kubernetes/tp1x2.yaml" in r.stdout
    assert "note:" not in r.stderr  # validated
    text = (shipped / "kubernetes/single.yaml").read_text()
    assert text.startswith("# Generated by `patchkit emit --target kubernetes`")
    assert "for Kubernetes 1.33.0" in text
    assert "&id" not in text and "*id" not in text  # every value written out, no YAML anchors
    assert list(yaml.safe_load_all(text)) == kubernetes.manifests(
        load_lock((shipped / "lockfile.toml").read_text()), load_config(shipped / "deploy.toml"), "single"
    )
    assert [d["kind"] for d in yaml.safe_load_all(text)] == ["Deployment", "Service", "Deployment", "Service"]
    before = snapshot(shipped)
    r = invoke("emit", "--target", "kubernetes", repo=shipped)
    assert r.exit_code == 0 and "Kubernetes manifests are up to date" in r.stdout
    assert snapshot(shipped) == before

    assert invoke("emit", "--target", "kubernetes", "--check", repo=shipped).exit_code == 0
    r = invoke("check", "--format", "json", repo=shipped)
    assert "kubernetes-drift" not in r.stdout

    (shipped / "kubernetes/tp1x2.yaml").write_text(text.replace("amd.com/gpu: 1", "amd.com/gpu: 2"))
    r = invoke("check", repo=shipped)
    assert r.exit_code == 1
    assert "kubernetes/tp1x2.yaml: error: differs from what patchkit emit --target kubernetes writes" in r.stdout, (
        r.stdout
    )
    assert "fix: regenerate it: patchkit emit --target kubernetes" in r.stdout
    r = invoke("emit", "--target", "kubernetes", "--check", repo=shipped)
    assert r.exit_code == 1
    assert "kubernetes/tp1x2.yaml: differs from what patchkit emit --target kubernetes writes" in r.stdout


def test_a_new_derived_digest_changes_only_the_image_lines(shipped: Path, invoke: Invoke) -> None:
    assert invoke("emit", "--target", "kubernetes", repo=shipped).exit_code == 0
    old = (shipped / "kubernetes/single.yaml").read_text()
    text = (shipped / "lockfile.toml").read_text()
    (shipped / "lockfile.toml").write_text(text.replace(DERIVED, "sha256:" + "e" * 64))
    assert invoke("lock", repo=shipped).exit_code == 0
    assert invoke("check", repo=shipped).exit_code == 1  # the manifests drifted with the pin
    assert invoke("emit", "--target", "kubernetes", repo=shipped).exit_code == 0
    new = (shipped / "kubernetes/single.yaml").read_text()
    changed = [(a, b) for a, b in zip(old.splitlines(), new.splitlines(), strict=True) if a != b]
    assert changed == [
        (
            f"        image: registry.example/team/vllm-patched@{DERIVED}",
            f"        image: registry.example/team/vllm-patched@sha256:{'e' * 64}",
        )
    ]


def test_without_a_derived_image_or_with_a_stale_one_nothing_is_written(shipped: Path, invoke: Invoke) -> None:
    text = (shipped / "lockfile.toml").read_text()
    lock = load_lock(text)
    vllm = next(i for i in lock.images if i.name == "vllm")
    (shipped / "lockfile.toml").write_text(text.replace(f'base_digest = "{vllm.digest}"', f'base_digest = "{LAYER}"'))
    assert invoke("lock", repo=shipped).exit_code == 0
    before = snapshot(shipped)
    r = invoke("emit", "--target", "kubernetes", repo=shipped)
    assert r.exit_code == 2
    assert f"derived.single was built on vllm@{LAYER}, but images.vllm pins {vllm.digest}" in r.stderr
    assert "rebuild: patchkit image build --profile single --push" in r.stderr
    assert snapshot(shipped) == before
    r = invoke("check", repo=shipped)
    assert "kubernetes-unchecked" not in r.stdout  # text output names the file, not the code
    assert "cannot emit the Kubernetes manifests" in r.stdout

    lock = load_lock((shipped / "lockfile.toml").read_text())
    import dataclasses

    with pytest.raises(BadInput, match=r"no \[derived.single\]: Kubernetes runs the derived image"):
        kubernetes.manifests(dataclasses.replace(lock, derived=()), load_config(shipped / "deploy.toml"), "single")


def test_bad_kubernetes_fields_are_named_with_their_lines(shipped: Path) -> None:
    text = (shipped / "deploy.toml").read_text().replace(KUBERNETES, "")
    bad = (
        '\n[kubernetes]\nversion = "latest"\nnamespace = "Inference"\ngpus = 0\n'
        'supplemental_groups = ["video"]\nreplicas = 3\n'
    )
    (shipped / "deploy.toml").write_text(text + bad)
    config = load_config(shipped / "deploy.toml")
    with pytest.raises(ConfigError) as info:
        kubernetes.read_config(config)
    lines = text.count("\n") + 1
    NOT_A_NAME = "is not a Kubernetes name (lowercase letters, digits, '-', at most 63)"  # noqa: N806
    GROUPS = "e.g. video = 44, render = 110"  # noqa: N806
    got = [(p.line, p.field, p.message) for p in info.value.problems]
    assert got == [
        (lines + 6, "kubernetes.replicas", f"unknown field 'replicas' (known: {', '.join(kubernetes._KNOWN)})"),
        (lines + 3, "kubernetes.namespace", f"'Inference' {NOT_A_NAME}"),
        (lines + 1, "kubernetes.model_cache_claim", "missing required field 'model_cache_claim'"),
        (lines + 2, "kubernetes.version", "'latest' is not a Kubernetes version like '1.33.0'"),
        (lines + 4, "kubernetes.gpus", "must be a positive integer, got 0"),
        (lines + 5, "kubernetes.supplemental_groups", f"must be an array of numeric group ids ({GROUPS})"),
    ]  # fmt: skip


def test_schema_violations_are_reported_and_a_missing_validator_is_said(
    shipped: Path, invoke: Invoke, monkeypatch: pytest.MonkeyPatch
) -> None:
    objs = objects(shipped, "single")
    objs[1]["spec"]["ports"][0]["port"] = "eight thousand"
    objs[0]["spec"]["template"]["spec"]["hostNetwrk"] = True
    problems, ran = kubernetes.validate(objs, "1.33.0")
    assert ran
    assert problems == [
        "Deployment/vllm: spec.template.spec: Additional properties are not allowed ('hostNetwrk' was unexpected)",
        "Service/vllm: spec.ports.0.port: 'eight thousand' is not of type 'integer'",
    ]
    assert kubernetes.validate(objs[:1], "1.99.0")[0][0].startswith("Deployment/vllm: no schema for Kubernetes 1.99.0")

    monkeypatch.setitem(sys.modules, "kubernetes_validate", None)  # as if the extra were not installed
    assert kubernetes.validate(objs, "1.33.0") == ([], False)
    r = invoke("emit", "--target", "kubernetes", repo=shipped)
    assert r.exit_code == 0
    assert (
        "note: kubernetes/single.yaml: NOT validated against the Kubernetes 1.33.0 schemas: "
        "kubernetes-validate is not installed (pip install 'patchkit[kubernetes]')"
    ) in r.stderr


def test_probes_follow_the_healthcheck_kind() -> None:
    curl = Healthcheck(("CMD", "curl", "-fsS", "http://localhost:8000/v1/models"), "10s", "2s", 5, "1m30s")
    assert kubernetes.probes(curl, 8000) == {
        "startupProbe": {
            "httpGet": {"path": "/v1/models", "port": "http"},
            "periodSeconds": 10,
            "timeoutSeconds": 2,
            "failureThreshold": 9,
        },
        "readinessProbe": {
            "httpGet": {"path": "/v1/models", "port": "http"},
            "periodSeconds": 10,
            "timeoutSeconds": 2,
            "failureThreshold": 5,
        },
        "livenessProbe": {
            "httpGet": {"path": "/v1/models", "port": "http"},
            "periodSeconds": 10,
            "timeoutSeconds": 2,
            "failureThreshold": 5,
        },
    }
    other_port = Healthcheck(("CMD", "curl", "-f", "http://127.0.0.1:9000/health"))
    assert kubernetes.probes(other_port, 8000)["readinessProbe"]["exec"] == {
        "command": ["curl", "-f", "http://127.0.0.1:9000/health"]
    }
    shell = Healthcheck(("CMD-SHELL", "test -e /tmp/ready"))
    assert kubernetes.probes(shell, 8000)["livenessProbe"]["exec"] == {
        "command": ["/bin/sh", "-c", "test -e /tmp/ready"]
    }
    assert kubernetes.probes(Healthcheck(("NONE",)), 8000) == {}
    assert kubernetes.probes(None, 8000) == {}


def test_sizes_and_durations() -> None:
    assert [kubernetes.quantity(s) for s in ("64gb", "512m", "1g", "100")] == ["64Gi", "512Mi", "1Gi", "100"]
    assert [kubernetes.seconds(s) for s in ("30s", "30m", "1h30m", "500ms")] == [30, 1800, 5400, 1]
    with pytest.raises(BadInput, match="is not a size"):
        kubernetes.quantity("lots")
