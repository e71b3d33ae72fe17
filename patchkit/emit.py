"""Emit the production compose files from the lockfile and ``deploy.toml``.

Pins (images by digest, the model revision, every patch, module, transformer,
tuning table and artifact target) come only from the lockfile. Everything else
about the deployment is human-written and reviewed in ``deploy.toml``:

.. code-block:: toml

    schema = 1
    name = "deepseek-v4-flash"          # compose project name

    [inference]                         # the vLLM service (one per replica)
    image = "vllm"                      # name of a lockfile [images] entry
    entrypoint = "entrypoint"           # name of the lockfile artifact run as entrypoint (its target)
    transformers_dir = "/opt/patchkit/transformers"  # transformers must be pinned directly below it
    port = 8000                         # the port vLLM listens on in the container (`--port` is appended)
    args = ["--served-model-name=…", …] # `vllm serve` arguments after the model path (no --port)
    hf_cache = "${HF_CACHE:-/root/.cache/huggingface}"  # host side of the HF cache (read-only mount)
    hf_cache_target = "/root/.cache/huggingface"        # model path: <target>/hub/models--ORG--NAME/snapshots/REV
    devices = ["/dev/kfd"]              # devices of every replica (each replica adds its GPU)
    group_add = ["video", "render"]
    security_opt = ["seccomp=unconfined"]
    shm_size = "64gb"                   # per replica; shared memory is private (ipc: private)
    restart = "unless-stopped"
    volumes = []                        # extra short-syntax mounts; repository files only ":ro"
    [inference.environment]             # NAME = "value" (strings)
    [inference.ulimits]                 # NAME = integer, or NAME = { soft = N, hard = N }
    [inference.healthcheck]             # test (array), interval, timeout, start_period (strings), retries (int)

    [proxy]                             # optional: the only service that may publish publicly
    service = "proxy"
    image = "caddy"                     # name of a lockfile [images] entry
    ports = ["80:80", "443:443"]
    caddyfile = "./Caddyfile"           # mounted read-only at caddyfile_target
    caddyfile_target = "/etc/caddy/Caddyfile"
    data_volume = "caddy-data"          # named volume mounted at data_target
    data_target = "/data"
    restart = "unless-stopped"

    [profiles.single]                   # one compose file per profile
    file = "compose.yaml"               # default: compose.yaml for "single", else compose.<name>.yaml
    caddyfile = "./Caddyfile"           # optional: overrides proxy.caddyfile for this profile
    [[profiles.single.replicas]]        # one independent single-GPU inference service each
    service = "vllm"
    devices = ["/dev/dri"]              # this replica's GPU device(s)
    publish = "127.0.0.1:8000"          # host address:port, loopback only

Output is byte-stable: fixed key order, mounts sorted by container target,
every string written as a double-quoted YAML scalar by :func:`quote` (PyYAML
cannot write comments, and the per-mount comments are required; the shape is
fixed, so writing the text directly is simple and exact). ``emit`` parses its
own output back with ``yaml.safe_load`` and enforces the security rules on that
structure, naming the ``deploy.toml`` field and line that breaks one:

- only the proxy is published on a non-loopback address;
- every image is ``repository@sha256:<digest>``, with no tag (compose ignores a
  tag beside a digest) and no ``$`` variable (Renovate skips those);
- every mount of a repository file (``./…``: patches, materialized diff-only
  patches, tuning tables, artifacts) is read-only, and no extra mount shadows a
  pinned target.

:func:`validate` checks emitted text against the Compose specification schema
(the copy check-jsonschema ships and keeps current, see :func:`compose_schema`)
and the same security rules. :func:`emit_files` also validates the other files of the bundle
before writing anything: the entrypoint artifact with ``sh -n`` and every pinned
``Caddyfile*`` artifact with ``caddy validate --adapter caddyfile`` (skipped,
with a note, when caddy is not installed).
"""

from __future__ import annotations

import functools
import ipaddress
import os
import re
import shutil
import subprocess
import tempfile
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from patchkit.errors import BadInput, LockfileError, Problem
from patchkit.guard import manifest as guard_manifest
from patchkit.lockfile import Artifact, Lockfile, Patch, PatchKind, _Reader, _render_path, _toml_type
from patchkit.values import ContainerPath, check_name

if TYPE_CHECKING:
    from patchkit.outcome import Outcome as WriteOutcome
    from patchkit.repo import Repo

CONFIG_NAME = "deploy.toml"
CONFIG_SCHEMA = 1
DEFAULT_PROFILE = "single"
_SERVICE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9._-]*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TRANSFORMERS_DIR = ContainerPath("/opt/patchkit/transformers")
_HF_CACHE_TARGET = ContainerPath("/root/.cache/huggingface")
_CADDYFILE_TARGET = ContainerPath("/etc/caddy/Caddyfile")
_DATA_TARGET = ContainerPath("/data")
_DIGEST_REF = re.compile(r"(?P<name>[^\s@$]+)@sha256:[0-9a-f]{64}")


class ConfigError(LockfileError):
    """``deploy.toml`` cannot be read, or what it asks for breaks a rule; every problem with its line."""


# --------------------------------------------------------------------------- the configuration


@dataclass(frozen=True)
class Healthcheck:
    test: tuple[str, ...]
    interval: str | None = None
    timeout: str | None = None
    retries: int | None = None
    start_period: str | None = None


@dataclass(frozen=True)
class Ulimit:
    name: str
    soft: int
    hard: int | None = None  # None: a single value


@dataclass(frozen=True)
class Inference:
    image: str
    entrypoint: str
    port: int
    transformers_dir: ContainerPath = _TRANSFORMERS_DIR
    args: tuple[str, ...] = ()
    environment: tuple[tuple[str, str], ...] = ()
    devices: tuple[str, ...] = ()
    group_add: tuple[str, ...] = ()
    security_opt: tuple[str, ...] = ()
    shm_size: str | None = None
    ulimits: tuple[Ulimit, ...] = ()
    healthcheck: Healthcheck | None = None
    hf_cache: str = "${HF_CACHE:-/root/.cache/huggingface}"
    hf_cache_target: ContainerPath = _HF_CACHE_TARGET
    restart: str | None = "unless-stopped"
    volumes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Proxy:
    image: str
    service: str = "proxy"
    ports: tuple[str, ...] = ()
    caddyfile: str = "./Caddyfile"
    caddyfile_target: ContainerPath = _CADDYFILE_TARGET
    data_volume: str | None = "caddy-data"
    data_target: ContainerPath = _DATA_TARGET
    restart: str | None = "unless-stopped"


@dataclass(frozen=True)
class Replica:
    service: str
    publish: str
    devices: tuple[str, ...] = ()


@dataclass(frozen=True)
class Profile:
    name: str
    file: str
    replicas: tuple[Replica, ...]
    caddyfile: str | None = None  # overrides proxy.caddyfile (the proxy must reach this profile's services)


@dataclass(frozen=True)
class DeployConfig:
    """The reviewed service configuration; ``lines`` maps field paths to lines of ``file``."""

    name: str
    inference: Inference
    profiles: tuple[Profile, ...]
    proxy: Proxy | None = None
    guard: guard_manifest.GuardConfig | None = None
    file: str = CONFIG_NAME
    lines: Mapping[str, int] = field(default_factory=dict, compare=False)

    def profile(self, name: str) -> Profile:
        for p in self.profiles:
            if p.name == name:
                return p
        known = ", ".join(p.name for p in self.profiles) or "none"
        raise BadInput(f"{self.file}: no profile '{name}' (known: {known})", f"add [profiles.{name}] to {self.file}")

    def locate(self, field_path: str, message: str, hint: str | None = None) -> Problem:
        """A problem at ``field_path`` (or its nearest enclosing field that has a line)."""
        p, line = field_path, None
        while p and line is None:
            line = self.lines.get(p)
            parent = re.sub(r"(\.[^.\[\]]*|\[\d+\])$", "", p)
            p = "" if parent == p else parent
        return Problem(self.file, line, field_path, message, hint)


def load_config(path: Path | str) -> DeployConfig:
    """Read ``deploy.toml``; raise ``ConfigError`` listing every problem with file, line and field."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"{path}: cannot read ({e})", f"create {CONFIG_NAME} (see patchkit/emit.py)") from e
    return loads_config(text, path.name)


def loads_config(text: str, filename: str = CONFIG_NAME) -> DeployConfig:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"line (\d+)", str(e))
        raise ConfigError(
            [Problem(filename, int(m.group(1)) if m else None, None, f"not valid TOML: {e}", "fix the syntax")]
        ) from e
    r = _ConfigReader(filename, text)
    config = r.read(raw)
    if r.problems or config is None:
        raise ConfigError(r.problems or [Problem(filename, None, None, "cannot be read")])
    return config


class _ConfigReader(_Reader):
    def read(self, raw: dict[str, Any]) -> DeployConfig | None:
        self.known(raw, (), ("schema", "name", "inference", "proxy", "profiles", "guard"))
        schema = raw.get("schema")
        if schema != CONFIG_SCHEMA or isinstance(schema, bool):
            self.problem(("schema",) if "schema" in raw else (), f"must be {CONFIG_SCHEMA}, got {schema!r}")
        name = self.typed(raw, (), "name", lambda s: check_name(s, "project name"), required=True)
        inf = self.table(raw, (), "inference")
        if inf is None:
            self.problem((), "missing required table [inference]")
        inference = self.inference(inf) if inf is not None else None
        proxy_raw = self.table(raw, (), "proxy")
        proxy = self.proxy(proxy_raw) if proxy_raw is not None else None
        profiles = []
        for key, value in (self.table(raw, (), "profiles") or {}).items():
            if not isinstance(value, dict):
                self.problem(("profiles", key), f"must be a table, got {_toml_type(value)}")
                continue
            prof = self.profile(key, value)
            if prof is not None:
                profiles.append(prof)
        if not profiles:
            self.problem(("profiles",), "needs at least one profile", "add [profiles.single] with one replica")
        files: dict[str, str] = {}
        for prof in profiles:
            if prof.file in files:
                self.problem(("profiles", prof.name, "file"), f"'{prof.file}' is also profile '{files[prof.file]}'")
            files[prof.file] = prof.name
            seen = {proxy.service} if proxy is not None else set()
            for i, rep in enumerate(prof.replicas):
                if rep.service in seen:
                    self.problem(("profiles", prof.name, "replicas", i, "service"), f"'{rep.service}' is taken")
                seen.add(rep.service)
        if self.problems or name is None or inference is None:
            return None
        return DeployConfig(
            name=name,
            inference=inference,
            profiles=tuple(sorted(profiles, key=lambda p: p.name)),
            proxy=proxy,
            guard=guard_manifest.read_config(self, raw),
            file=self.filename,
            lines=self.lines(),
        )

    def lines(self) -> dict[str, int]:
        return {_render_path(p): line for p, line in self.index._lines.items()}

    def strings(self, data: dict[str, Any], path: tuple[str | int, ...], key: str) -> tuple[str, ...]:
        value = data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.problem((*path, key), f"must be an array of strings, got {_toml_type(value)}")
            return ()
        for i, v in enumerate(value):
            if any(ord(c) < 0x20 for c in v):
                self.problem((*path, key, i), "contains a control character")
        return tuple(value)

    def integer(
        self, data: dict[str, Any], path: tuple[str | int, ...], key: str, *, required: bool = False
    ) -> int | None:
        if key not in data:
            if required:
                self.problem(path, f"missing required field '{key}'")
            return None
        value = data[key]
        if not isinstance(value, int) or isinstance(value, bool):
            self.problem((*path, key), f"must be an integer, got {_toml_type(value)}")
            return None
        return value

    def service_name(
        self, data: dict[str, Any], path: tuple[str | int, ...], key: str, default: str | None
    ) -> str | None:
        value = self.string(data, path, key, required=default is None)
        if value is None:
            return default
        if not _SERVICE.fullmatch(value):
            self.problem(
                (*path, key), f"'{value}' is not a compose service name ([a-zA-Z0-9._-], no leading punctuation)"
            )
            return None
        return value

    def inference(self, t: dict[str, Any]) -> Inference | None:
        p: tuple[str | int, ...] = ("inference",)
        self.known(
            t,
            p,
            (
                "image", "entrypoint", "transformers_dir", "port", "args", "environment", "devices", "group_add",
                "security_opt", "shm_size", "ulimits", "healthcheck", "hf_cache", "hf_cache_target", "restart",
                "volumes",
            ),
        )  # fmt: skip
        image = self.string(t, p, "image", required=True)
        entrypoint = self.string(t, p, "entrypoint", required=True)
        port = self.integer(t, p, "port", required=True)
        if port is not None and not 0 < port < 65536:
            self.problem((*p, "port"), f"{port} is not a TCP port (1-65535)")
            port = None
        args = self.strings(t, p, "args")
        for i, a in enumerate(args):
            if a == "--port" or a.startswith("--port="):
                self.problem((*p, "args", i), "sets --port; set inference.port instead (emit appends --port)")
        env = []
        for k, v in (self.table(t, p, "environment") or {}).items():
            if not _ENV_NAME.fullmatch(k):
                self.problem((*p, "environment", k), f"'{k}' is not an environment variable name")
            elif not isinstance(v, str):
                self.problem((*p, "environment", k), f"must be a string, got {_toml_type(v)} (quote it)")
            else:
                env.append((k, v))
        ulimits = []
        for k, v in (self.table(t, p, "ulimits") or {}).items():
            if not re.fullmatch(r"[a-z_]+", k):
                self.problem((*p, "ulimits", k), f"'{k}' is not a ulimit name")
            elif isinstance(v, int) and not isinstance(v, bool):
                ulimits.append(Ulimit(k, v))
            elif (
                isinstance(v, dict)
                and set(v) == {"soft", "hard"}
                and all(isinstance(x, int) and not isinstance(x, bool) for x in v.values())
            ):
                ulimits.append(Ulimit(k, v["soft"], v["hard"]))
            else:
                self.problem((*p, "ulimits", k), "must be an integer or { soft = N, hard = N }")
        health = None
        h = self.table(t, p, "healthcheck")
        if h is not None:
            hp = (*p, "healthcheck")
            self.known(h, hp, ("test", "interval", "timeout", "retries", "start_period"))
            test = self.strings(h, hp, "test")
            if not test:
                self.problem(hp, 'needs \'test\', e.g. ["CMD", "curl", "-fsS", "http://127.0.0.1:8000/health"]')
            health = Healthcheck(
                test=test,
                interval=self.duration(h, hp, "interval"),
                timeout=self.duration(h, hp, "timeout"),
                retries=self.integer(h, hp, "retries"),
                start_period=self.duration(h, hp, "start_period"),
            )
        shm = self.string(t, p, "shm_size")
        if shm is not None and not re.fullmatch(r"\d+(b|k|m|g|kb|mb|gb)?", shm):
            self.problem((*p, "shm_size"), f"'{shm}' is not a size (e.g. 64gb)")
        tdir = self.typed(t, p, "transformers_dir", ContainerPath)
        hf_target = self.typed(t, p, "hf_cache_target", ContainerPath)
        if image is None or entrypoint is None or port is None:
            return None
        return Inference(
            image=image,
            entrypoint=entrypoint,
            port=port,
            transformers_dir=tdir or Inference.transformers_dir,
            args=args,
            environment=tuple(sorted(env)),
            devices=self.strings(t, p, "devices"),
            group_add=self.strings(t, p, "group_add"),
            security_opt=self.strings(t, p, "security_opt"),
            shm_size=shm,
            ulimits=tuple(sorted(ulimits, key=lambda u: u.name)),
            healthcheck=health,
            hf_cache=self.string(t, p, "hf_cache") or Inference.hf_cache,
            hf_cache_target=hf_target or Inference.hf_cache_target,
            restart=self.string(t, p, "restart") or Inference.restart,
            volumes=self.strings(t, p, "volumes"),
        )

    def duration(self, data: dict[str, Any], path: tuple[str | int, ...], key: str) -> str | None:
        value = self.string(data, path, key)
        if value is not None and not re.fullmatch(r"(\d+(us|ms|s|m|h))+", value):
            self.problem((*path, key), f"'{value}' is not a duration (e.g. 30s, 5m, 1h30m)")
            return None
        return value

    def proxy(self, t: dict[str, Any]) -> Proxy | None:
        p: tuple[str | int, ...] = ("proxy",)
        self.known(
            t,
            p,
            ("service", "image", "ports", "caddyfile", "caddyfile_target", "data_volume", "data_target", "restart"),
        )
        image = self.string(t, p, "image", required=True)
        service = self.service_name(t, p, "service", "proxy")
        caddy_target = self.typed(t, p, "caddyfile_target", ContainerPath)
        data_target = self.typed(t, p, "data_target", ContainerPath)
        if image is None or service is None:
            return None
        return Proxy(
            image=image,
            service=service,
            ports=self.strings(t, p, "ports"),
            caddyfile=self.string(t, p, "caddyfile") or Proxy.caddyfile,
            caddyfile_target=caddy_target or Proxy.caddyfile_target,
            data_volume=self.string(t, p, "data_volume") or Proxy.data_volume,
            data_target=data_target or Proxy.data_target,
            restart=self.string(t, p, "restart") or Proxy.restart,
        )

    def profile(self, name: str, t: dict[str, Any]) -> Profile | None:
        p: tuple[str | int, ...] = ("profiles", name)
        self.known(t, p, ("file", "replicas", "caddyfile"))
        if not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", name):
            self.problem(p, f"'{name}' is not a profile name ([a-z0-9_-])")
            return None
        default = "compose.yaml" if name == DEFAULT_PROFILE else f"compose.{name}.yaml"
        file = self.string(t, p, "file") or default
        if not re.fullmatch(r"[A-Za-z0-9._-]+\.ya?ml", file):
            self.problem((*p, "file"), f"'{file}' is not a top-level .yaml file name")
        replicas = []
        raw = t.get("replicas", [])
        if not isinstance(raw, list) or not raw or not all(isinstance(x, dict) for x in raw):
            self.problem((*p, "replicas"), f"needs [[profiles.{name}.replicas]] tables (at least one)")
            return None
        for i, rt in enumerate(raw):
            rp = (*p, "replicas", i)
            self.known(rt, rp, ("service", "publish", "devices"))
            service = self.service_name(rt, rp, "service", None)
            publish = self.string(rt, rp, "publish", required=True)
            if publish is not None and _split_publish(publish) is None:
                self.problem((*rp, "publish"), f"'{publish}' is not ADDRESS:PORT (e.g. 127.0.0.1:8000)")
                publish = None
            if service is not None and publish is not None:
                replicas.append(Replica(service=service, publish=publish, devices=self.strings(rt, rp, "devices")))
        if len(replicas) != len(raw):
            return None
        return Profile(name=name, file=file, replicas=tuple(replicas), caddyfile=self.string(t, p, "caddyfile"))


def _split_publish(publish: str) -> tuple[str, int] | None:
    m = re.fullmatch(r"(\[[0-9a-fA-F:.]+\]|[0-9.]+|[A-Za-z0-9.-]+):(\d{1,5})", publish)
    if not m or not 0 < int(m.group(2)) < 65536:
        return None
    return m.group(1), int(m.group(2))


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


# --------------------------------------------------------------------------- emitting

_Origin = Callable[[str, str], Problem]


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


def _mounts(lock: Lockfile, config: DeployConfig) -> list[_Mount]:
    inf = config.inference
    tdir = str(inf.transformers_dir)
    problems: list[Problem] = []
    mounts: list[_Mount] = []

    def patch_notes(p: Patch) -> tuple[str, ...]:
        how = "committed" if p.committed else "diff-only, built by `patchkit materialize --out build`"
        notes = [comment(f"{p.name}: {p.reason or 'no reason recorded'}"), comment(f"  {p.kind.value}, {how}")]
        if p.refs:
            notes.append(comment("  refs: " + ", ".join(str(r) for r in p.refs)))
        return tuple(notes)

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
        mounts.append(_Mount(target, source, patch_notes(p)))
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


def emit(lock: Lockfile, config: DeployConfig, profile: str) -> str:  # noqa: C901 (over the ceiling already)
    """The compose file of ``profile``: byte-stable text; ``ConfigError`` on any broken rule."""
    prof = config.profile(profile)
    inf = config.inference
    if lock.model is None:
        raise BadInput("lockfile.toml: no [model] pinned; emit needs the model revision", "pin [model] first")
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
    org, _, model_name = lock.model.repo.partition("/")
    model_path = f"{inf.hf_cache_target}/hub/models--{org}--{model_name}/snapshots/{lock.model.revision}"
    vllm_image = _image(lock, inf.image, "inference.image", config)
    proxy_image = _image(lock, config.proxy.image, "proxy.image", config) if config.proxy else None
    mounts = _mounts(lock, config)

    origins: dict[tuple[str, str], Problem] = {}
    o = _Out()
    o.add(0, "# Generated by `patchkit emit` from lockfile.toml (pins) and deploy.toml (service")
    o.add(0, f"# configuration), profile {comment(prof.name)}. Do not edit by hand: edit those files and")
    o.add(0, "# run `patchkit emit`; `patchkit check` fails when this file drifts.")
    o.add(0, f"name: {quote(config.name)}")
    o.add(0, "")
    o.add(0, "services:")
    for ri, rep in enumerate(prof.replicas):
        where = f"profiles.{prof.name}.replicas[{ri}]"
        origins[(rep.service, "image")] = config.locate("inference.image", "")
        origins[(rep.service, "ports")] = config.locate(f"{where}.publish", "")
        origins[(rep.service, "volumes")] = config.locate("inference.volumes", "")
        if ri:
            o.add(0, "")
        o.add(1, f"{quote(rep.service)}:")
        o.add(2, f"image: {quote(vllm_image)}")
        o.seq(2, "entrypoint", [str(entry.target)])
        o.seq(2, "command", [model_path, *inf.args, f"--port={inf.port}"])
        environment = (*inf.environment, *guard_manifest.environment(lock, config))
        if environment:
            o.add(2, "environment:")
            for k, v in environment:
                o.add(3, f"{quote(k)}: {quote(v)}")
        o.seq(2, "devices", [*inf.devices, *rep.devices])
        o.seq(2, "group_add", inf.group_add)
        o.seq(2, "security_opt", inf.security_opt)
        o.add(2, 'ipc: "private"')
        if inf.shm_size:
            o.add(2, f"shm_size: {quote(inf.shm_size)}")
        if inf.ulimits:
            o.add(2, "ulimits:")
            for u in inf.ulimits:
                if u.hard is None:
                    o.add(3, f"{quote(u.name)}: {u.soft}")
                else:
                    o.add(3, f"{quote(u.name)}:")
                    o.add(4, f"soft: {u.soft}")
                    o.add(4, f"hard: {u.hard}")
        o.add(2, "volumes:")
        for m in mounts:
            for note in m.notes:
                o.add(3, f"# {note}")
            o.add(3, f"- {quote(m.spec)}")
        o.add(3, "# The Hugging Face cache; the model runs from its pinned revision.")
        o.add(3, f"- {quote(f'{inf.hf_cache}:{inf.hf_cache_target}:ro')}")
        for v in inf.volumes:
            o.add(3, f"- {quote(v)}")
        host, port = _split_publish(rep.publish) or ("", 0)
        o.add(2, "ports:")
        o.add(3, "# Loopback only: clients reach the inference service through the proxy.")
        o.add(3, f"- {quote(f'{host}:{port}:{inf.port}')}")
        if inf.healthcheck:
            h = inf.healthcheck
            o.add(2, "healthcheck:")
            o.seq(3, "test", h.test)
            for key, val in (("interval", h.interval), ("timeout", h.timeout)):
                if val:
                    o.add(3, f"{key}: {quote(val)}")
            if h.retries is not None:
                o.add(3, f"retries: {h.retries}")
            if h.start_period:
                o.add(3, f"start_period: {quote(h.start_period)}")
        if inf.restart:
            o.add(2, f"restart: {quote(inf.restart)}")
    px = config.proxy
    if px is not None and proxy_image is not None:
        origins[(px.service, "image")] = config.locate("proxy.image", "")
        caddyfile = prof.caddyfile or px.caddyfile
        origins[(px.service, "volumes")] = config.locate(
            f"profiles.{prof.name}.caddyfile" if prof.caddyfile else "proxy.caddyfile", ""
        )
        o.add(0, "")
        o.add(1, f"{quote(px.service)}:")
        o.add(2, f"image: {quote(proxy_image)}")
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
    text = "\n".join(o.lines) + "\n"

    doc = _load_yaml(text)
    public = {px.service} if px else set()
    pinned = {m.target for m in mounts} | {str(inf.hf_cache_target)}

    def origin(service: str, key: str) -> Problem:
        return origins.get((service, key)) or Problem(config.file, None, None, "")

    problems = _security(doc, public, pinned, origin)
    if problems:
        raise ConfigError(problems)
    return text


def emit_all(lock: Lockfile, config: DeployConfig) -> dict[str, str]:
    """Every profile's compose text, by file name (``compose.yaml`` for ``single``)."""
    return {p.file: emit(lock, config, p.name) for p in config.profiles}


# --------------------------------------------------------------------------- rules and validation


def _is_loopback(host: str) -> bool:
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _port_host(entry: object) -> str | None:
    """The host address a port entry binds to; ``None`` means every address."""
    if isinstance(entry, dict):
        host = entry.get("host_ip")
        return str(host) if host else None
    text = str(entry)
    if text.startswith("["):
        return text[: text.index("]") + 1] if "]" in text else None
    parts = text.split(":")
    return parts[0] if len(parts) >= 3 and parts[0] else None


def _volume_rw_repo_file(entry: object) -> str | None:
    """The source of a writable bind mount of a repository file, else ``None``."""
    if isinstance(entry, dict):
        src = str(entry.get("source", ""))
        if src.startswith(("./", "../")) and not entry.get("read_only"):
            return src
        return None
    parts = str(entry).split(":")
    if parts[0].startswith(("./", "../")) and (len(parts) < 3 or "ro" not in parts[2].split(",")):
        return parts[0]
    return None


def _security(doc: Any, public: set[str], pinned: set[str], origin: Callable[[str, str], Problem]) -> list[Problem]:
    out: list[Problem] = []

    def refuse(service: str, key: str, message: str, hint: str) -> None:
        where = origin(service, key)
        out.append(Problem(where.file, where.line, where.field, message, hint))

    services = doc.get("services") if isinstance(doc, dict) else None
    for name, svc in sorted((services or {}).items()):
        if not isinstance(svc, dict):
            continue
        image = str(svc.get("image", ""))
        m = _DIGEST_REF.fullmatch(image)
        if m is None:
            refuse(
                name,
                "image",
                f"service '{name}': image '{image}' is not pinned by digest (repository@sha256:...)",
                "pin it: patchkit image pin NAME REF",
            )
        elif ":" in m.group("name").rsplit("/", 1)[-1]:
            refuse(
                name,
                "image",
                f"service '{name}': image '{image}' has a tag beside its digest; compose ignores the tag",
                "pin only the digest: repository@sha256:...",
            )
        if name not in public:
            for entry in svc.get("ports") or []:
                host = _port_host(entry)
                if host is None or not _is_loopback(host):
                    refuse(
                        name,
                        "ports",
                        f"service '{name}' would be published on {host or 'every address (0.0.0.0)'}: "
                        "only the proxy may be public",
                        "publish the inference service on 127.0.0.1 and reach it through the proxy",
                    )
        for entry in svc.get("volumes") or []:
            src = _volume_rw_repo_file(entry)
            if src is not None:
                refuse(
                    name,
                    "volumes",
                    f"service '{name}': repository file {src} is mounted writable; patches, tuning tables "
                    "and artifacts are mounted read-only",
                    "append ':ro' to the mount",
                )
            parts = str(entry).split(":") if not isinstance(entry, dict) else ["", str(entry.get("target", ""))]
            if len(parts) >= 2 and parts[1] in pinned and not (len(parts) >= 3 and parts[2] == "ro"):
                refuse(
                    name,
                    "volumes",
                    f"service '{name}': a writable mount shadows the pinned target {parts[1]}",
                    "remove the extra mount; the pinned file is mounted by emit",
                )
    return out


def _load_yaml(text: str) -> Any:
    """``text`` parsed with ``yaml.safe_load``; ``ValueError`` when it is not YAML."""
    import yaml  # type: ignore[import-untyped]  # PyYAML ships no type information

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ValueError(str(e)) from e


@functools.cache
def compose_schema() -> Mapping[str, Any]:
    """The Compose specification JSON schema, as check-jsonschema vendors it.

    check-jsonschema ships compose-spec.json with its Apache-2.0 licence and
    refreshes it from compose-spec/compose-spec, so every installed patchkit
    validates against a current schema; the lock pins which one.
    """
    from check_jsonschema.builtin_schemas import get_builtin_schema  # type: ignore[import-untyped]  # no type info

    schema: Mapping[str, Any] = get_builtin_schema("vendor.compose-spec")
    return schema


def validate(
    text: str,
    schema: Mapping[str, Any] | None,
    config: DeployConfig | None = None,
    profile: str | None = None,
) -> list[str]:
    """Problems with emitted compose text: the Compose ``schema`` (see :func:`compose_schema`; ``None``
    checks the security rules only) and the security rules. With ``config`` and ``profile``, rule
    violations name the ``deploy.toml`` line."""
    try:
        doc = _load_yaml(text)
    except ValueError as e:
        return [f"not valid YAML: {e}"]
    out: list[str] = []
    if schema is not None:
        import jsonschema  # type: ignore[import-untyped]  # no type information installed

        validator = jsonschema.validators.validator_for(schema)(schema)
        for err in sorted(validator.iter_errors(doc), key=lambda e: [str(x) for x in e.absolute_path]):
            where = "/".join(str(x) for x in err.absolute_path) or "(top)"
            out.append(f"compose schema: {where}: {err.message}")
    public = {"proxy"}
    origins: dict[tuple[str, str], Problem] = {}
    if config is not None:
        public = {config.proxy.service} if config.proxy else set()
        if profile is not None:
            for i, rep in enumerate(config.profile(profile).replicas):
                origins[(rep.service, "ports")] = config.locate(f"profiles.{profile}.replicas[{i}].publish", "")
                origins[(rep.service, "image")] = config.locate("inference.image", "")
                origins[(rep.service, "volumes")] = config.locate("inference.volumes", "")

    def origin(service: str, key: str) -> Problem:
        return origins.get((service, key)) or Problem("compose", None, f"services.{service}.{key}", "")

    out.extend(p.render() for p in _security(doc, public, set(), origin))
    return out


EXTERNAL_TIMEOUT = 60.0
CADDY_SKIPPED = "caddy is not installed: the Caddyfile artifacts were not validated (caddy validate skipped)"


def _first_error_line(output: str) -> str:
    """The first line of a tool's output that reads as an error (caddy also logs JSON lines first)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in lines:
        if line.startswith("Error:"):
            return line
    plain = [line for line in lines if not line.startswith("{")]
    return (plain or lines or ["(no message)"])[0]


def _run_tool(argv: list[str], cwd: Path, env: Mapping[str, str] | None, rel: str) -> str | None:
    """Run a validator; ``None`` when it passes, else its first error line. ``BadInput`` when it cannot run."""
    try:
        proc = subprocess.run(
            argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=EXTERNAL_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired as e:
        raise BadInput(f"{rel}: {argv[0]} did not finish within {EXTERNAL_TIMEOUT:.0f} s", "nothing was written") from e
    except OSError as e:
        raise BadInput(f"{rel}: cannot run {argv[0]} ({e})", "nothing was written") from e
    if proc.returncode == 0:
        return None
    return _first_error_line(proc.stderr + "\n" + proc.stdout)


def validate_bundle_files(repo_root: Path, lock: Lockfile, config: DeployConfig) -> list[str]:
    """Validate the other files of the bundle; return notes about skipped checks.

    ``sh -n`` on the entrypoint artifact named by ``inference.entrypoint``, and
    ``caddy validate --adapter caddyfile`` on every pinned artifact whose file
    name starts with ``Caddyfile`` (HOME and the XDG directories pointed at a
    temporary directory, so caddy touches nothing of the user's). Raises
    ``BadInput`` naming the file and the tool's first error line.
    """
    notes: list[str] = []
    entry = next((a for a in lock.artifacts if a.name == config.inference.entrypoint), None)
    if entry is not None:
        rel = str(entry.file)
        if not (repo_root / rel).is_file():
            raise BadInput(
                f"{rel}: the entrypoint artifact '{entry.name}' is missing", "restore it; nothing was written"
            )
        error = _run_tool(["sh", "-n", rel], repo_root, None, rel)
        if error is not None:
            raise BadInput(f"{rel}: sh -n: {error}", "fix the entrypoint script; nothing was written")
    caddyfiles = sorted(str(a.file) for a in lock.artifacts if Path(str(a.file)).name.startswith("Caddyfile"))
    if not caddyfiles:
        return notes
    caddy = shutil.which("caddy")
    if caddy is None:
        notes.append(CADDY_SKIPPED)
        return notes
    with tempfile.TemporaryDirectory(prefix="patchkit-caddy-") as home:
        env = {**os.environ, "HOME": home, "XDG_DATA_HOME": home, "XDG_CONFIG_HOME": home}
        for rel in caddyfiles:
            if not (repo_root / rel).is_file():
                raise BadInput(f"{rel}: the pinned Caddyfile is missing", "restore it; nothing was written")
            error = _run_tool([caddy, "validate", "--adapter", "caddyfile", "--config", rel], repo_root, env, rel)
            if error is not None:
                raise BadInput(f"{rel}: caddy validate: {error}", "fix the Caddyfile; nothing was written")
    return notes


def emit_files(
    repo: Repo,
    lock: Lockfile,
    profiles: Iterable[str] = (),
    *,
    check_only: bool = False,
    notes: list[str] | None = None,
    validate_output: bool = True,
) -> tuple[WriteOutcome, list[str]]:
    """Emit every (or the named) profile's compose file, validated, and write them as one transaction.

    Before anything is written (also with ``check_only``), the compose text is
    checked against the Compose schema and the security rules, the entrypoint
    with ``sh -n`` and every pinned ``Caddyfile*`` artifact with ``caddy
    validate`` (see :func:`validate_bundle_files`); any failure raises
    ``BadInput`` and nothing is written.

    With ``check_only`` nothing is written and the second value lists the
    files whose bytes differ from what would be written (drift). When
    ``notes`` is given, a line is appended to it for every validation that was
    skipped (caddy not installed).
    ``validate_output=False`` (for ``patchkit check``'s drift comparison)
    skips the schema and the external tools: a file equal to what emit writes
    was validated when emit wrote it, and ``emit`` itself still enforces the
    security rules.
    """
    from patchkit.outcome import Outcome as WriteOutcome
    from patchkit.repo import write_all

    config = load_config(repo.root / CONFIG_NAME)
    wanted = set(profiles)
    unknown = wanted - {p.name for p in config.profiles}
    if unknown:
        raise BadInput(
            f"--profile: unknown profile {', '.join(sorted(unknown))} (deploy.toml has "
            f"{', '.join(p.name for p in config.profiles)})"
        )
    schema = compose_schema() if validate_output else None
    files: dict[str, str] = {}
    for p in config.profiles:
        if wanted and p.name not in wanted:
            continue
        text = emit(lock, config, p.name)
        problems = validate(text, schema, config, p.name) if validate_output else []
        if problems:
            raise BadInput(f"{p.file}: {problems[0]}", "fix deploy.toml; nothing was written")
        files[p.file] = text
    files.update(guard_manifest.files(lock, config))
    skipped = validate_bundle_files(repo.root, lock, config) if validate_output else []
    if notes is not None:
        notes.extend(skipped)
    drift = []
    for rel, text in files.items():
        try:
            current = (repo.root / rel).read_bytes()
        except FileNotFoundError:
            current = None
        if current != text.encode():
            drift.append(rel)
    if check_only:
        return WriteOutcome(), drift
    return WriteOutcome(written=write_all(repo.root, {k: v.encode() for k, v in files.items()})), drift
