"""The compose writer: the lockfile and ``deploy.toml`` to compose text, pure.

Output is byte-stable: fixed key order, mounts sorted by container target,
every string written as a double-quoted YAML scalar by :func:`quote` (PyYAML
cannot write comments, and the per-mount comments are required; the shape is
fixed, so writing the text directly is simple and exact). ``emit`` parses its
own output back with ``yaml.safe_load`` and enforces the security rules
(``emit.rules``) on that structure, naming the ``deploy.toml`` field and line
that breaks one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from patchkit.emit import manifest as guard_manifest
from patchkit.emit.config import (
    ConfigError,
    DeployConfig,
    Healthcheck,
    Inference,
    Profile,
    Proxy,
    Replica,
    Ulimit,
    split_publish,
)
from patchkit.emit.rules import security_problems
from patchkit.emit.validate import load_yaml
from patchkit.errors import BadInput, Problem
from patchkit.lockfile.model import Artifact, Lockfile, Patch, PatchKind

# --------------------------------------------------------------------------- YAML text


def quote(text: str) -> str:
    """``text`` as a YAML double-quoted scalar: exact for any string, never a number, bool or null."""
    out = ['"']
    for c in text:
        o = ord(c)
        if c in '"\\':
            out.append("\\" + c)
        elif o < 0x20 or 0x7F <= o <= 0x9F or o in (0x2028, 0x2029, 0xFEFF) or 0xD800 <= o <= 0xDFFF or o >= 0xFFFE:
            out.append(f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def comment(text: str, limit: int = 120) -> str:
    """One comment line's text: no line breaks or control characters, at most ``limit`` characters."""
    lead = text[: len(text) - len(text.lstrip(" "))]
    clean = lead + " ".join("".join(c if c.isprintable() else " " for c in text).split())
    if len(clean) > limit:
        clean = clean[: limit - 3].rsplit(" ", 1)[0] + "..."
    return clean


@dataclass
class _Out:
    lines: list[str] = field(default_factory=list)

    def add(self, indent: int, text: str) -> None:
        self.lines.append("  " * indent + text)

    def seq(self, indent: int, key: str, items: tuple[str, ...] | list[str]) -> None:
        if items:
            self.add(indent, f"{key}:")
            for item in items:
                self.add(indent + 1, f"- {quote(item)}")


@dataclass(frozen=True)
class _Mount:
    target: str
    source: str
    notes: tuple[str, ...]

    @property
    def spec(self) -> str:
        return f"{self.source}:{self.target}:ro"


def _image(lock: Lockfile, name: str, field_path: str, config: DeployConfig) -> str:
    for img in lock.images:
        if img.name == name:
            if not img.digest:  # only constructed objects can lack one; the loader requires it
                return img.repository + (f":{img.tag}" if img.tag else "")
            return img.reference
    raise ConfigError(
        [config.locate(field_path, f"names image '{name}', which lockfile.toml does not pin", "patchkit image pin")]
    )


def _patch_notes(p: Patch) -> tuple[str, ...]:
    """The comments above a patch's mount: its reason, kind, references, and what else delivers it."""
    how = "committed" if p.committed else "diff-only, built by `patchkit materialize --out build`"
    notes = [comment(f"{p.name}: {p.reason or 'no reason recorded'}"), comment(f"  {p.kind.value}, {how}")]
    if p.refs:
        notes.append(comment("  refs: " + ", ".join(str(r) for r in p.refs)))
    if p.build is not None:  # the pinned image does not carry what a hand-kept build copied in
        notes.append(comment(f"  copied in by {p.build}'s image build; mounted so the pinned image runs it"))
    return tuple(notes)


def _mounts(lock: Lockfile, config: DeployConfig) -> list[_Mount]:
    inf = config.inference
    tdir = str(inf.transformers_dir)
    problems: list[Problem] = []
    mounts: list[_Mount] = []

    def artifact_notes(kind: str, a: Artifact) -> tuple[str, ...]:
        return (comment(f"{a.name} ({kind}): {a.note or a.file}"),)

    for p in lock.patches:
        target = str(p.target)
        if p.kind is PatchKind.TRANSFORMER and target.rsplit("/", 1)[0] != tdir:
            problems.append(
                config.locate(
                    "inference.transformers_dir",
                    f"transformer '{p.name}' is pinned at {target}, "
                    f"not directly in {tdir} (where the entrypoint runs them)",
                    "move the transformer's target or set inference.transformers_dir",
                )
            )
        source = f"./{p.file}" if p.file is not None else f"./build{target}"
        mounts.append(_Mount(target, source, _patch_notes(p)))
    mounts.extend(_Mount(str(t.target), f"./{t.file}", artifact_notes("tuning", t)) for t in lock.tuning if t.target)
    mounts.extend(
        _Mount(str(a.target), f"./{a.file}", artifact_notes("artifact", a)) for a in lock.artifacts if a.target
    )
    if config.guard is not None:
        problems.extend(guard_manifest.problems(lock, config))
        note = comment("runtime guard manifest: written by `patchkit emit` from lockfile.toml")
        mounts.append(_Mount(str(config.guard.manifest_target), f"./{guard_manifest.MANIFEST_NAME}", (note,)))
    for m in mounts:
        if any(c in m.source + m.target for c in "$:,"):
            problems.append(
                config.locate("inference", f"pinned mount {m.source} -> {m.target} contains '$', ':' or ','")
            )
    if problems:
        raise ConfigError(problems)
    return sorted(mounts, key=lambda m: m.target)


def _entrypoint(lock: Lockfile, config: DeployConfig) -> Artifact:
    """The pinned artifact ``inference.entrypoint`` names; it must have a target to run from."""
    inf = config.inference
    entry = next((a for a in lock.artifacts if a.name == inf.entrypoint), None)
    if entry is None or entry.target is None:
        raise ConfigError(
            [
                config.locate(
                    "inference.entrypoint",
                    f"names artifact '{inf.entrypoint}', which lockfile.toml does not pin with a target",
                    "patchkit add entrypoint.sh --target /opt/patchkit/entrypoint.sh",
                )
            ]
        )
    return entry


def _ulimits(o: _Out, ulimits: tuple[Ulimit, ...]) -> None:
    """The ``ulimits`` block: a bare number when only the soft limit is set."""
    if not ulimits:
        return
    o.add(2, "ulimits:")
    for u in ulimits:
        if u.hard is None:
            o.add(3, f"{quote(u.name)}: {u.soft}")
        else:
            o.add(3, f"{quote(u.name)}:")
            o.add(4, f"soft: {u.soft}")
            o.add(4, f"hard: {u.hard}")


def _healthcheck(o: _Out, h: Healthcheck | None) -> None:
    """The ``healthcheck`` block, with only the fields ``deploy.toml`` sets."""
    if not h:
        return
    o.add(2, "healthcheck:")
    o.seq(3, "test", h.test)
    for key, val in (("interval", h.interval), ("timeout", h.timeout)):
        if val:
            o.add(3, f"{key}: {quote(val)}")
    if h.retries is not None:
        o.add(3, f"retries: {h.retries}")
    if h.start_period:
        o.add(3, f"start_period: {quote(h.start_period)}")


@dataclass(frozen=True)
class _Service:
    """What every inference replica shares: its image, entrypoint, model path and pinned mounts."""

    image: str
    entrypoint: Artifact
    model_path: str
    environment: tuple[tuple[str, str], ...]
    mounts: list[_Mount]


def _volumes(o: _Out, inf: Inference, mounts: list[_Mount]) -> None:
    """The ``volumes`` list: each pinned mount under its notes, the model cache, then extra volumes."""
    o.add(2, "volumes:")
    for m in mounts:
        for note in m.notes:
            o.add(3, f"# {note}")
        o.add(3, f"- {quote(m.spec)}")
    o.add(3, "# The Hugging Face cache; the model runs from its pinned revision.")
    o.add(3, f"- {quote(f'{inf.hf_cache}:{inf.hf_cache_target}:ro')}")
    for v in inf.volumes:
        o.add(3, f"- {quote(v)}")


def _replica(o: _Out, inf: Inference, svc: _Service, rep: Replica) -> None:
    """One inference service, in the fixed key order of the compose file."""
    o.add(1, f"{quote(rep.service)}:")
    o.add(2, f"image: {quote(svc.image)}")
    o.seq(2, "entrypoint", [str(svc.entrypoint.target)])
    o.seq(2, "command", [svc.model_path, *inf.args, f"--port={inf.port}"])
    if svc.environment:
        o.add(2, "environment:")
        for k, v in svc.environment:
            o.add(3, f"{quote(k)}: {quote(v)}")
    o.seq(2, "devices", [*inf.devices, *rep.devices])
    o.seq(2, "group_add", inf.group_add)
    o.seq(2, "security_opt", inf.security_opt)
    o.add(2, 'ipc: "private"')
    if inf.shm_size:
        o.add(2, f"shm_size: {quote(inf.shm_size)}")
    _ulimits(o, inf.ulimits)
    _volumes(o, inf, svc.mounts)
    host, port = split_publish(rep.publish) or ("", 0)
    o.add(2, "ports:")
    o.add(3, "# Loopback only: clients reach the inference service through the proxy.")
    o.add(3, f"- {quote(f'{host}:{port}:{inf.port}')}")
    _healthcheck(o, inf.healthcheck)
    if inf.restart:
        o.add(2, f"restart: {quote(inf.restart)}")


def _proxy(o: _Out, px: Proxy, image: str, prof: Profile) -> None:
    """The proxy service (the only public entry point) and its named data volume."""
    caddyfile = prof.caddyfile or px.caddyfile
    o.add(0, "")
    o.add(1, f"{quote(px.service)}:")
    o.add(2, f"image: {quote(image)}")
    o.seq(2, "depends_on", [r.service for r in prof.replicas])
    if px.ports:
        o.add(2, "ports:")
        o.add(3, "# The proxy is the only public entry point.")
        for port_spec in px.ports:
            o.add(3, f"- {quote(port_spec)}")
    vols = [f"{caddyfile}:{px.caddyfile_target}:ro"]
    if px.data_volume:
        vols.append(f"{px.data_volume}:{px.data_target}")
    o.seq(2, "volumes", vols)
    if px.restart:
        o.add(2, f"restart: {quote(px.restart)}")
    if px.data_volume:
        o.add(0, "")
        o.add(0, "volumes:")
        o.add(1, f"{quote(px.data_volume)}: {{}}")


def _origins(config: DeployConfig, prof: Profile) -> dict[tuple[str, str], Problem]:
    """The ``deploy.toml`` field behind each (service, compose key), so a broken rule names its source."""
    origins: dict[tuple[str, str], Problem] = {}
    for ri, rep in enumerate(prof.replicas):
        origins[(rep.service, "image")] = config.locate("inference.image", "")
        origins[(rep.service, "ports")] = config.locate(f"profiles.{prof.name}.replicas[{ri}].publish", "")
        origins[(rep.service, "volumes")] = config.locate("inference.volumes", "")
    px = config.proxy
    if px is not None:
        origins[(px.service, "image")] = config.locate("proxy.image", "")
        origins[(px.service, "volumes")] = config.locate(
            f"profiles.{prof.name}.caddyfile" if prof.caddyfile else "proxy.caddyfile", ""
        )
    return origins


def _check_security(text: str, config: DeployConfig, prof: Profile, mounts: list[_Mount]) -> None:
    """Parse the written text back and enforce the security rules on it, naming the field that breaks one."""
    doc = load_yaml(text)
    px = config.proxy
    public = {px.service} if px else set()
    pinned = {m.target for m in mounts} | {str(config.inference.hf_cache_target)}
    origins = _origins(config, prof)

    def origin(service: str, key: str) -> Problem:
        return origins.get((service, key)) or Problem(config.file, None, None, "")

    problems = security_problems(doc, public, pinned, origin)
    if problems:
        raise ConfigError(problems)


def emit(lock: Lockfile, config: DeployConfig, profile: str) -> str:
    """The compose file of ``profile``: byte-stable text; ``ConfigError`` on any broken rule."""
    prof = config.profile(profile)
    inf = config.inference
    if lock.model is None:
        raise BadInput("lockfile.toml: no [model] pinned; emit needs the model revision", "pin [model] first")
    entry = _entrypoint(lock, config)
    org, _, model_name = lock.model.repo.partition("/")
    model_path = f"{inf.hf_cache_target}/hub/models--{org}--{model_name}/snapshots/{lock.model.revision}"
    vllm_image = _image(lock, inf.image, "inference.image", config)
    proxy_image = _image(lock, config.proxy.image, "proxy.image", config) if config.proxy else None
    mounts = _mounts(lock, config)
    environment = (*inf.environment, *guard_manifest.environment(lock, config))
    svc = _Service(vllm_image, entry, model_path, environment, mounts)

    o = _Out()
    o.add(0, "# Generated by `patchkit emit` from lockfile.toml (pins) and deploy.toml (service")
    o.add(0, f"# configuration), profile {comment(prof.name)}. Do not edit by hand: edit those files and")
    o.add(0, "# run `patchkit emit`; `patchkit check` fails when this file drifts.")
    o.add(0, f"name: {quote(config.name)}")
    o.add(0, "")
    o.add(0, "services:")
    for ri, rep in enumerate(prof.replicas):
        if ri:
            o.add(0, "")
        _replica(o, inf, svc, rep)
    if config.proxy is not None and proxy_image is not None:
        _proxy(o, config.proxy, proxy_image, prof)
    text = "\n".join(o.lines) + "\n"
    _check_security(text, config, prof, mounts)
    return text


def emit_all(lock: Lockfile, config: DeployConfig) -> dict[str, str]:
    """Every profile's compose text, by file name (``compose.yaml`` for ``single``)."""
    return {p.file: emit(lock, config, p.name) for p in config.profiles}
