"""Kubernetes manifests from the lockfile and ``deploy.toml``: ``patchkit emit --target kubernetes``.

One file per profile, ``kubernetes/<profile>.yaml``, byte-stable: for every
replica a Deployment (one pod, the derived image by digest, ``amd.com/gpu``,
shared memory as a memory-backed ``emptyDir``, the Hugging Face cache
mounted read-only with the model at its pinned revision path, probes from
the healthcheck, a locked-down security context) and a Service of the
replica's name (so the proxy's Caddyfile reaches it as under compose), then
the proxy's Deployment and a LoadBalancer Service keeping client addresses
(its IP allowlist needs them).

The pod runs the derived image (``patchkit image build``), not the base with
mounts: a cluster has no repository checkout to bind-mount from. A profile
without a derived pin, or with one built on another base digest than the
lockfile pins now, is refused. What the manifests do not decide (node
placement, GPU device plugin, the cache volume's provisioning, the proxy's
Caddyfile ConfigMap, ulimits) is the cluster's; docs/fleet.md lists it.

Validation is offline against the Kubernetes JSON schemas of
``[kubernetes] version`` with ``kubernetes-validate`` (the ``kubernetes``
extra); without it the manifests are written with a note that they were
not validated.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

from patchkit.errors import BadInput, Problem

if TYPE_CHECKING:
    from patchkit.core.outcome import Outcome
    from patchkit.emit.config import DeployConfig, Healthcheck, Profile
    from patchkit.lockfile.model import Derived, Lockfile
    from patchkit.store.repo import Repo

DIRECTORY = "kubernetes"
DEFAULT_VERSION = "1.33.0"
GPU_RESOURCE = "amd.com/gpu"
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_VERSION = re.compile(r"1\.\d+\.\d+")
_KNOWN = (
    "version",
    "namespace",
    "model_cache_claim",
    "gpus",
    "supplemental_groups",
    "caddyfile_configmap",
    "proxy_data_claim",
)
_UNITS = {"b": "", "k": "Ki", "m": "Mi", "g": "Gi", "t": "Ti"}
_DURATION = re.compile(r"(\d+)(us|ms|s|m|h)")


@dataclass(frozen=True)
class KubernetesConfig:
    """The ``[kubernetes]`` table of deploy.toml."""

    model_cache_claim: str
    version: str = DEFAULT_VERSION
    namespace: str | None = None
    gpus: int = 1
    supplemental_groups: tuple[int, ...] = ()
    caddyfile_configmap: str | None = None
    proxy_data_claim: str | None = None


def file_of(profile: str) -> str:
    """The manifest file of a profile, relative to the repository."""
    return f"{DIRECTORY}/{profile}.yaml"


def _names(raw: Mapping[str, object], bad: Callable[[str, str, str | None], None]) -> dict[str, str | None]:
    """The object names of ``[kubernetes]`` (``None`` where unset or invalid); ``model_cache_claim`` is required."""
    names: dict[str, str | None] = {}
    for key in ("model_cache_claim", "namespace", "caddyfile_configmap", "proxy_data_claim"):
        value = raw.get(key)
        if value is not None and (not isinstance(value, str) or not _DNS_LABEL.fullmatch(value)):
            bad(key, f"{value!r} is not a Kubernetes name (lowercase letters, digits, '-', at most 63)", None)
            value = None
        names[key] = value
    if "model_cache_claim" not in raw:
        bad("model_cache_claim", "missing required field 'model_cache_claim'", "name the PVC with the model cache")
    return names


def read_config(config: DeployConfig) -> KubernetesConfig:
    """The ``[kubernetes]`` table, checked; ``ConfigError`` naming every bad field with its line."""
    from patchkit.emit.config import ConfigError

    raw = config.kubernetes
    if raw is None:
        raise BadInput(
            f"{config.file}: no [kubernetes] table",
            'add [kubernetes] with model_cache_claim = "<PVC holding the Hugging Face cache>" (docs/deploy.md)',
        )
    problems: list[Problem] = []

    def bad(key: str, message: str, hint: str | None = None) -> None:
        problems.append(config.locate(f"kubernetes.{key}", message, hint))

    for key in raw:
        if key not in _KNOWN:
            bad(key, f"unknown field '{key}' (known: {', '.join(_KNOWN)})")
    names = _names(raw, bad)
    version = raw.get("version", DEFAULT_VERSION)
    if not isinstance(version, str) or not _VERSION.fullmatch(version):
        bad("version", f"{version!r} is not a Kubernetes version like '{DEFAULT_VERSION}'")
    gpus = raw.get("gpus", 1)
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1:
        bad("gpus", f"must be a positive integer, got {gpus!r}")
    groups = raw.get("supplemental_groups", [])
    if not isinstance(groups, list) or not all(isinstance(g, int) and not isinstance(g, bool) for g in groups):
        bad("supplemental_groups", "must be an array of numeric group ids (e.g. video = 44, render = 110)")
    # Without a problem the types hold; the checks again are for the type checker.
    if problems or not isinstance(version, str) or not isinstance(gpus, int) or not isinstance(groups, list):
        raise ConfigError(problems)
    return KubernetesConfig(
        model_cache_claim=str(names["model_cache_claim"]),
        version=version,
        namespace=names["namespace"],
        gpus=gpus,
        supplemental_groups=tuple(groups),
        caddyfile_configmap=names["caddyfile_configmap"],
        proxy_data_claim=names["proxy_data_claim"],
    )


# --- the pure part -----------------------------------------------------------------------------------


def seconds(duration: str) -> int:
    """A compose duration (``30s``, ``1h30m``) in whole seconds, at least 1."""
    scale = {"us": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
    total = sum(int(n) * scale[u] for n, u in _DURATION.findall(duration))
    return max(1, math.ceil(total))


def quantity(size: str) -> str:
    """A Docker size (``64gb``, ``512m``; binary units) as a Kubernetes quantity (``64Gi``)."""
    m = re.fullmatch(r"(\d+)\s*([bkmgt]?)b?", size.strip().lower())
    if m is None:
        raise BadInput(f"shm_size {size!r} is not a size like 64gb")
    return m.group(1) + _UNITS[m.group(2) or "b"]


class Probe(TypedDict, total=False):
    """A Kubernetes probe: one handler (``exec`` or ``httpGet``) and its timing."""

    exec: dict[str, list[str]]
    httpGet: dict[str, str]  # Kubernetes spells its fields in camelCase
    periodSeconds: int
    timeoutSeconds: int
    failureThreshold: int


def _handler(test: tuple[str, ...], port: int) -> Probe | None:
    """The probe handler of a compose healthcheck test: an HTTP GET for ``curl`` of the local port, else exec."""
    if not test or test[0] == "NONE":
        return None
    if test[0] == "CMD-SHELL":
        return {"exec": {"command": ["/bin/sh", "-c", " ".join(test[1:])]}}
    argv = list(test[1:] if test[0] == "CMD" else test)
    if argv and argv[0] == "curl":
        url = next((a for a in argv[1:] if a.startswith("http://")), None)
        m = re.fullmatch(r"http://(?:127\.0\.0\.1|localhost)(?::(\d+))?(/[^\s?#]*)?", url or "")
        if m is not None and int(m.group(1) or 80) == port:
            return {"httpGet": {"path": m.group(2) or "/", "port": "http"}}
    return {"exec": {"command": argv}}


def probes(h: Healthcheck | None, port: int) -> dict[str, Probe]:
    """Startup, readiness and liveness probes from a compose healthcheck (empty when it has none).

    ``start_period`` becomes a startup probe that allows that long (loading a
    model takes minutes); ``interval``, ``timeout`` and ``retries`` the
    others' period, timeout and failure threshold.
    """
    handler = _handler(h.test, port) if h is not None else None
    if h is None or handler is None:
        return {}
    period = seconds(h.interval) if h.interval else 30
    common: Probe = {**handler, "periodSeconds": period, "timeoutSeconds": seconds(h.timeout) if h.timeout else 30}
    steady: Probe = {**common, "failureThreshold": h.retries or 3}
    out: dict[str, Probe] = {}
    if h.start_period:
        out["startupProbe"] = {**common, "failureThreshold": max(1, math.ceil(seconds(h.start_period) / period))}
    out["readinessProbe"] = steady
    out["livenessProbe"] = steady
    return out


def _labels(project: str, instance: str, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": project,
        "app.kubernetes.io/instance": instance,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": "patchkit",
    }


def _metadata(name: str, labels: Mapping[str, str], k: KubernetesConfig) -> dict[str, object]:
    meta: dict[str, object] = {"name": name}
    if k.namespace:
        meta["namespace"] = k.namespace
    meta["labels"] = dict(labels)
    return meta


def _selector(labels: Mapping[str, str]) -> dict[str, str]:
    return {key: labels[key] for key in ("app.kubernetes.io/name", "app.kubernetes.io/instance")}


def _seccomp(security_opt: Iterable[str]) -> str:
    return (
        "Unconfined"
        if "seccomp=unconfined" in security_opt or "seccomp:unconfined" in security_opt
        else ("RuntimeDefault")
    )


def _deployment(
    name: str, labels: Mapping[str, str], k: KubernetesConfig, pod: dict[str, object], wait: int
) -> dict[str, object]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(name, labels, k),
        "spec": {
            "replicas": 1,
            # One pod holding the GPUs: a surge pod would wait for GPUs the old one holds.
            "strategy": {"type": "Recreate"},
            "progressDeadlineSeconds": wait,
            "selector": {"matchLabels": _selector(labels)},
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod},
        },
    }


def _service(
    name: str, labels: Mapping[str, str], k: KubernetesConfig, ports: list[dict[str, object]], **spec: str
) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(name, labels, k),
        "spec": {**spec, "selector": _selector(labels), "ports": ports},
    }


def manifests(lock: Lockfile, config: DeployConfig, profile: str) -> list[dict[str, object]]:
    """Every object of ``profile``'s manifests, in a fixed order (pure)."""
    from patchkit.emit.config import ConfigError

    k = read_config(config)
    prof = config.profile(profile)
    inf = config.inference
    derived = _derived(lock, config, prof.name)
    entry = next((a for a in lock.artifacts if a.name == inf.entrypoint and a.target is not None), None)
    if entry is None or lock.model is None:
        raise ConfigError(
            [config.locate("inference.entrypoint", "needs the entrypoint artifact with a target and a [model] pin")]
        )
    org, _, model_name = lock.model.repo.partition("/")
    model_path = f"{inf.hf_cache_target}/hub/models--{org}--{model_name}/snapshots/{lock.model.revision}"
    probe = probes(inf.healthcheck, inf.port)
    startup = probe.get("startupProbe", {})
    wait = startup.get("periodSeconds", 0) * startup.get("failureThreshold", 0) + 600
    container: dict[str, object] = {
        "name": "vllm",
        "image": f"{derived.repository}@{derived.digest}",
        "imagePullPolicy": "IfNotPresent",
        "command": [str(entry.target)],
        "args": [model_path, *inf.args, f"--port={inf.port}"],
    }
    if inf.environment:
        container["env"] = [{"name": n, "value": v} for n, v in inf.environment]
    container["ports"] = [{"name": "http", "containerPort": inf.port, "protocol": "TCP"}]
    container["resources"] = {"limits": {GPU_RESOURCE: k.gpus}, "requests": {GPU_RESOURCE: k.gpus}}
    mounts = [{"name": "model-cache", "mountPath": str(inf.hf_cache_target), "readOnly": True}]
    volumes: list[dict[str, object]] = [
        {"name": "model-cache", "persistentVolumeClaim": {"claimName": k.model_cache_claim, "readOnly": True}}
    ]
    if inf.shm_size:
        mounts.insert(0, {"name": "dshm", "mountPath": "/dev/shm"})  # noqa: S108 (the container's shared memory)
        volumes.insert(0, {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": quantity(inf.shm_size)}})
    container["volumeMounts"] = mounts
    container.update(probe)
    container["securityContext"] = {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": _seccomp(inf.security_opt)},
    }
    pod: dict[str, object] = {"automountServiceAccountToken": False, "enableServiceLinks": False}
    if k.supplemental_groups:
        pod["securityContext"] = {"supplementalGroups": list(k.supplemental_groups)}
    pod["containers"] = [container]
    pod["volumes"] = volumes
    out: list[dict[str, object]] = []
    for rep in prof.replicas:
        labels = _labels(config.name, rep.service, "inference")
        out.append(_deployment(rep.service, labels, k, pod, wait))
        port: dict[str, object] = {"name": "http", "port": inf.port, "targetPort": "http", "protocol": "TCP"}
        out.append(_service(rep.service, labels, k, [port], type="ClusterIP"))
    out.extend(_proxy(lock, config, prof, k))
    return out


def _derived(lock: Lockfile, config: DeployConfig, profile: str) -> Derived:
    """The profile's derived image pin, refused when missing or built on another base than the pinned one."""
    d = next((x for x in lock.derived if x.name == profile), None)
    base = next((i for i in lock.images if i.name == config.inference.image), None)
    build = f"patchkit image build --profile {profile} --push REGISTRY/REPO:TAG"
    if d is None:
        raise BadInput(f"lockfile.toml: no [derived.{profile}]: Kubernetes runs the derived image", build)
    if base is None or d.base != base.name or d.base_digest != base.digest:
        now = f"images.{base.name} pins {base.digest}" if base is not None else "its base is not pinned"
        raise BadInput(
            f"lockfile.toml: derived.{profile} was built on {d.base}@{d.base_digest}, but {now}", "rebuild: " + build
        )
    return d


def _proxy(lock: Lockfile, config: DeployConfig, prof: Profile, k: KubernetesConfig) -> list[dict[str, object]]:
    px = config.proxy
    if px is None:
        return []
    img = next((i for i in lock.images if i.name == px.image), None)
    if img is None:
        raise BadInput(f"{config.file}: proxy.image names '{px.image}', which lockfile.toml does not pin")
    labels = _labels(config.name, px.service, "proxy")
    ports = []
    for spec in px.ports:
        host, _, inside = spec.rpartition(":")
        published = host.rsplit(":", 1)[-1]
        if not published.isdigit() or not inside.split("/")[0].isdigit():
            raise BadInput(f"{config.file}: proxy.ports entry {spec!r} is not HOST:CONTAINER")
        ports.append((int(published), int(inside.split("/")[0])))
    container: dict[str, object] = {
        "name": "caddy",
        "image": img.reference,
        "imagePullPolicy": "IfNotPresent",
        "ports": [{"name": f"port-{c}", "containerPort": c, "protocol": "TCP"} for _, c in ports],
    }
    configmap = k.caddyfile_configmap or f"{config.name.replace('_', '-').replace('.', '-')}-caddyfile"
    mounts = [{"name": "caddyfile", "mountPath": str(px.caddyfile_target), "subPath": "Caddyfile", "readOnly": True}]
    volumes: list[dict[str, object]] = [{"name": "caddyfile", "configMap": {"name": configmap}}]
    claim = k.proxy_data_claim or px.data_volume
    if claim:
        mounts.append({"name": "data", "mountPath": str(px.data_target)})
        volumes.append({"name": "data", "persistentVolumeClaim": {"claimName": claim}})
    container["volumeMounts"] = mounts
    container["securityContext"] = {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    pod: dict[str, object] = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [container],
    }
    pod["volumes"] = volumes
    service_ports: list[dict[str, object]] = [
        {"name": f"port-{c}", "port": p, "targetPort": f"port-{c}", "protocol": "TCP"} for p, c in ports
    ]
    return [
        _deployment(px.service, labels, k, pod, 600),
        # Local keeps the clients' addresses, which the Caddyfile's IP allowlist matches on.
        _service(px.service, labels, k, service_ports, type="LoadBalancer", externalTrafficPolicy="Local"),
    ]


def render(objects: Sequence[Mapping[str, object]], profile: str, version: str) -> str:
    """The manifests as one YAML stream with a header (pure, byte-stable)."""
    import yaml  # type: ignore[import-untyped]  # PyYAML ships no type information

    head = (
        "# Generated by `patchkit emit --target kubernetes` from lockfile.toml (pins) and deploy.toml\n"
        f"# (service configuration), profile {profile}, for Kubernetes {version}. Do not edit by hand:\n"
        "# edit those files and run it again; `patchkit check` fails when this file drifts.\n"
    )

    class Dumper(yaml.SafeDumper):  # type: ignore[misc]  # untyped base
        def ignore_aliases(self, data: object) -> bool:
            return True  # a shared value written out each time: no &id001 anchors in a manifest

    docs = [
        yaml.dump(o, Dumper=Dumper, sort_keys=False, default_flow_style=False, width=4096, allow_unicode=True)
        for o in objects
    ]
    return head + "".join(f"---\n{d}" for d in docs)


def validate(objects: Sequence[Mapping[str, object]], version: str) -> tuple[list[str], bool]:
    """Every schema violation of ``objects`` for Kubernetes ``version`` (strict: no unknown fields).

    The second value says whether validation ran: without the
    ``kubernetes-validate`` package it cannot, and nothing is claimed.
    """
    try:
        import kubernetes_validate  # type: ignore[import-untyped]  # it ships no type information
    except ImportError:
        return [], False
    problems = []
    for o in objects:
        meta = o.get("metadata")
        where = f"{o.get('kind')}/{meta.get('name') if isinstance(meta, dict) else None}"
        try:
            kubernetes_validate.validate(o, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            path = ".".join(str(p) for p in e.path)
            problems.append(f"{where}: {path}: {e.message}")
        except (kubernetes_validate.SchemaNotFoundError, kubernetes_validate.utils.VersionNotSupportedError) as e:
            problems.append(f"{where}: no schema for Kubernetes {version} ({e})")
    return problems, True


def manifest_texts(
    lock: Lockfile,
    config: DeployConfig,
    profiles: Iterable[str] = (),
    *,
    validate_output: bool = True,
    notes: list[str] | None = None,
) -> dict[str, str]:
    """Every (or the named) profile's manifests by file name (pure; ``BadInput`` on the first problem).

    With ``validate_output`` each object is checked against the schemas of
    ``[kubernetes] version``; when that cannot run, ``notes`` gets a line
    saying so for every file.
    """
    k = read_config(config)
    wanted = set(profiles)
    unknown = wanted - {p.name for p in config.profiles}
    if unknown:
        raise BadInput(f"--profile: unknown profile {', '.join(sorted(unknown))}")
    files: dict[str, str] = {}
    for p in config.profiles:
        if wanted and p.name not in wanted:
            continue
        objects = manifests(lock, config, p.name)
        if validate_output:
            problems, ran = validate(objects, k.version)
            if problems:
                raise BadInput(f"{file_of(p.name)}: {problems[0]}", "fix deploy.toml; nothing was written")
            if not ran and notes is not None:
                notes.append(
                    f"{file_of(p.name)}: NOT validated against the Kubernetes {k.version} schemas: "
                    "kubernetes-validate is not installed (pip install 'patchkit[kubernetes]')"
                )
        files[file_of(p.name)] = render(objects, p.name, k.version)
    return files


def emit_files(
    repo: Repo,
    lock: Lockfile,
    profiles: Iterable[str] = (),
    *,
    check_only: bool = False,
    notes: list[str] | None = None,
    validate_output: bool = True,
) -> tuple[Outcome, list[str]]:
    """Emit every (or the named) profile's manifests, validated, written as one transaction; and the drift.

    Mirrors ``emit.files.emit_files``: nothing is written when any profile
    fails or with ``check_only``; the second value lists the files that differ.
    """
    from patchkit.core.outcome import Outcome
    from patchkit.emit.config import CONFIG_NAME, load_config
    from patchkit.emit.files import drifted
    from patchkit.store.repo import write_all

    config = load_config(repo.root / CONFIG_NAME)
    files = manifest_texts(lock, config, profiles, validate_output=validate_output, notes=notes)

    def current(rel: str) -> bytes | None:
        from patchkit.store.repo import Escape

        try:
            return repo.read(rel)
        except (FileNotFoundError, Escape):  # a link is never read through; the write refuses it
            return None

    drift = drifted(files, current)
    if check_only:
        return Outcome(), drift
    return Outcome(written=write_all(repo.root, {k: v.encode() for k, v in files.items()})), drift
