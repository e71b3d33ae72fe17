"""The compose security rules one by one, on parsed services: images, ports and volumes."""

from __future__ import annotations

from patchkit.emit.rules import _image_problem, _port_problems, _volume_problems, security_problems
from patchkit.errors import Problem

H = "c" * 64


def test_an_image_passes_pinned_by_digest_alone() -> None:
    assert _image_problem("vllm", f"vllm/vllm-openai@sha256:{H}") is None
    untagged = _image_problem("vllm", "vllm/vllm-openai:nightly")
    assert untagged is not None
    assert (
        untagged[0]
        == "service 'vllm': image 'vllm/vllm-openai:nightly' is not pinned by digest (repository@sha256:...)"
    )
    assert _image_problem("vllm", f"${{IMAGE}}@sha256:{H}") is not None  # interpolated: not what was pinned
    tagged = _image_problem("vllm", f"vllm/vllm-openai:v1@sha256:{H}")
    assert tagged is not None
    assert "has a tag beside its digest" in tagged[0]


def test_only_loopback_ports_pass() -> None:
    ports = {
        "ports": ["127.0.0.1:8000:8000", "[::1]:8001:8000", "8002:8000", "0.0.0.0:8003:8000", "10.0.0.1:8004:8000"]
    }
    found = [m for m, _ in _port_problems("vllm", ports)]
    assert found == [
        "service 'vllm' would be published on every address (0.0.0.0): only the proxy may be public",
        "service 'vllm' would be published on 0.0.0.0: only the proxy may be public",
        "service 'vllm' would be published on 10.0.0.1: only the proxy may be public",
    ]
    assert list(_port_problems("vllm", {})) == []


def test_volumes_writable_repository_files_and_shadowed_pins() -> None:
    svc = {
        "volumes": [
            "./patches/a.py:/opt/a.py:ro",
            "./patches/b.py:/opt/b.py",
            "/srv/x:/opt/pinned.py:rw",
            "/srv/y:/opt/pinned.py:ro",
            {"type": "bind", "source": "/srv/z", "target": "/opt/pinned.py"},
            "/srv/scratch:/scratch",
        ]
    }
    found = [m for m, _ in _volume_problems("vllm", svc, {"/opt/pinned.py"})]
    assert found == [
        "service 'vllm': repository file ./patches/b.py is mounted writable; patches, tuning tables "
        "and artifacts are mounted read-only",
        "service 'vllm': a writable mount shadows the pinned target /opt/pinned.py",
        "service 'vllm': a writable mount shadows the pinned target /opt/pinned.py",
    ]


def test_security_problems_locate_each_rule_by_service_and_key() -> None:
    doc = {
        "services": {
            "proxy": {"image": f"caddy@sha256:{H}", "ports": ["443:443"]},
            "vllm": {"image": "vllm:latest", "ports": ["8000:8000"], "volumes": ["./x.py:/opt/x.py"]},
        }
    }

    def origin(service: str, key: str) -> Problem:
        return Problem("deploy.toml", 1, f"{service}.{key}", "")

    found = [(p.field, p.message.split(":")[0]) for p in security_problems(doc, {"proxy"}, set(), origin)]
    assert found == [
        ("vllm.image", "service 'vllm'"),
        ("vllm.ports", "service 'vllm' would be published on every address (0.0.0.0)"),
        ("vllm.volumes", "service 'vllm'"),
    ]
