"""``deploy.toml``: what the deployment's services look like, read strictly with its lines.

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
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from patchkit.core.values import ContainerPath, check_name
from patchkit.errors import BadInput, LockfileError, Problem
from patchkit.guard.config import GuardConfig, read_config
from patchkit.lockfile.tomlpos import FieldReader, parse, render_path, toml_type

CONFIG_NAME = "deploy.toml"
CONFIG_SCHEMA = 1
DEFAULT_PROFILE = "single"
_SERVICE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9._-]*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TRANSFORMERS_DIR = ContainerPath("/opt/patchkit/transformers")
_HF_CACHE_TARGET = ContainerPath("/root/.cache/huggingface")
_CADDYFILE_TARGET = ContainerPath("/etc/caddy/Caddyfile")
_DATA_TARGET = ContainerPath("/data")


DOCS = "docs/deploy.md"
_SEE_DOCS = f"{CONFIG_NAME}'s fields: {DOCS}"


class ConfigError(LockfileError):
    """``deploy.toml`` cannot be read, or what it asks for breaks a rule; every problem with its line.

    A problem without a fix of its own points to the page that documents every field.
    """

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__([p if p.hint else Problem(p.file, p.line, p.field, p.message, _SEE_DOCS) for p in problems])


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
    guard: GuardConfig | None = None
    file: str = CONFIG_NAME
    lines: Mapping[str, int] = field(default_factory=dict, compare=False)
    kubernetes: Mapping[str, object] | None = None  # the [kubernetes] table as written; emit/kubernetes.py reads it

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
    return loads_config(_read_text(path), path.name)


def _read_text(path: Path) -> str:
    """The text of ``deploy.toml``; never through a symlink, and a missing file says how to get one.

    Read as bytes, then decoded: text mode would turn a lone CR into a line
    end, and accept a file ``check`` (and TOML) refuses, or shift its lines.
    """
    if path.is_symlink():
        raise BadInput(
            f"{path}: is a symlink (to {os.readlink(path)}); refusing to read it",
            f"commit {path.name} itself in place of the link",
        )
    try:
        return path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(
            f"{path}: cannot read ({e})", f"create {CONFIG_NAME} (patchkit init writes a starter; fields: {DOCS})"
        ) from e


@dataclass(frozen=True)
class BuildConfig:
    """What ``image build`` reads of ``deploy.toml``: the base image, the entrypoint, the profile names.

    A base and one layer need nothing more, so a file without ``[profiles]``
    (nothing for ``emit`` to write) needs nothing more. With ``[profiles]`` or
    ``[guard]`` (the image then carries the guard's manifest, which describes
    the whole deployment) ``deploy`` is the whole configuration, read strictly.
    """

    image: str
    entrypoint: str | None
    profiles: tuple[str, ...]
    file: str = CONFIG_NAME
    deploy: DeployConfig | None = None  # the whole file, when it also describes services (profiles, guard)

    def profile(self, name: str) -> str:
        """``name`` if the file declares it, or declares no profile at all (a build needs none)."""
        if self.profiles and name not in self.profiles:
            known = ", ".join(self.profiles)
            hint = f"add [profiles.{name}] to {self.file}"
            raise BadInput(f"{self.file}: no profile '{name}' (known: {known})", hint)
        return name


def load_build_config(path: Path) -> BuildConfig:
    """Read ``deploy.toml`` for ``image build`` (:func:`loads_build_config`)."""
    return loads_build_config(_read_text(path), path.name)


def loads_build_config(text: str, filename: str = CONFIG_NAME) -> BuildConfig:
    """``deploy.toml`` as ``image build`` reads it: ``schema``, ``[inference]`` with ``image``; ``ConfigError`` else.

    With ``[profiles]`` or ``[guard]`` the file is also for ``emit``, and is read whole, strictly.
    """
    raw = parse(text, filename)
    if isinstance(raw, Problem):
        raise ConfigError([raw])
    if "guard" in raw or "profiles" in raw:
        config = loads_config(text, filename)
        inf = config.inference
        return BuildConfig(inf.image, inf.entrypoint, tuple(p.name for p in config.profiles), config.file, config)
    r = _ConfigReader(filename, text)
    found = r.read_build(raw)
    if r.problems or found is None:
        raise ConfigError(r.problems or [Problem(filename, None, None, "cannot be read")])
    return found


def loads_config(text: str, filename: str = CONFIG_NAME) -> DeployConfig:
    raw = parse(text, filename)
    if isinstance(raw, Problem):
        raise ConfigError([raw])
    r = _ConfigReader(filename, text)
    config = r.read(raw)
    if r.problems or config is None:
        raise ConfigError(r.problems or [Problem(filename, None, None, "cannot be read")])
    return config


class _ConfigReader(FieldReader):
    def read(self, raw: Mapping[str, object]) -> DeployConfig | None:
        self.known(raw, (), ("schema", "name", "inference", "proxy", "profiles", "kubernetes", "guard"))
        self.schema(raw)
        name = self.typed(raw, (), "name", lambda s: check_name(s, "project name"), required=True)
        inf = self.table(raw, (), "inference")
        if inf is None:
            self.problem((), "missing required table [inference]")
        inference = self.inference(inf) if inf is not None else None
        proxy_raw = self.table(raw, (), "proxy")
        proxy = self.proxy(proxy_raw) if proxy_raw is not None else None
        profiles = self.profiles(raw)
        self.distinct(profiles, proxy)
        if self.problems or name is None or inference is None:
            return None
        return DeployConfig(
            name=name,
            inference=inference,
            profiles=tuple(sorted(profiles, key=lambda p: p.name)),
            proxy=proxy,
            guard=read_config(self, raw),
            file=self.filename,
            lines=self.lines(),
            kubernetes=self.table(raw, (), "kubernetes"),
        )

    def read_build(self, raw: Mapping[str, object]) -> BuildConfig | None:
        """What ``image build`` needs (see :class:`BuildConfig`); the other fields are left to ``emit``."""
        self.known(raw, (), ("schema", "name", "inference", "proxy", "profiles", "kubernetes", "guard"))
        self.schema(raw)
        inf = self.table(raw, (), "inference")
        if inf is None:
            self.problem((), "missing required table [inference]", 'add [inference] with image = "NAME"')
            return None
        image = self.string(inf, ("inference",), "image", required=True)
        entrypoint = self.string(inf, ("inference",), "entrypoint")
        if image is None:
            return None
        return BuildConfig(image, entrypoint, (), self.filename)

    def schema(self, raw: Mapping[str, object]) -> None:
        schema = raw.get("schema")
        if schema != CONFIG_SCHEMA or isinstance(schema, bool):
            self.problem(("schema",) if "schema" in raw else (), f"must be {CONFIG_SCHEMA}, got {schema!r}")

    def profiles(self, raw: Mapping[str, object]) -> list[Profile]:
        """The ``[profiles.*]`` tables that read cleanly; at least one is needed."""
        profiles = []
        for key, value in (self.table(raw, (), "profiles") or {}).items():
            if not isinstance(value, dict):
                self.problem(("profiles", key), f"must be a table, got {toml_type(value)}")
                continue
            prof = self.profile(key, value)
            if prof is not None:
                profiles.append(prof)
        if not profiles:
            self.problem(("profiles",), "needs at least one profile", "add [profiles.single] with one replica")
        return profiles

    def distinct(self, profiles: list[Profile], proxy: Proxy | None) -> None:
        """Each profile writes its own file, and within one its services (proxy included) have distinct names."""
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

    def lines(self) -> dict[str, int]:
        return {render_path(p): line for p, line in self.index._lines.items()}

    def strings(self, data: Mapping[str, object], path: tuple[str | int, ...], key: str) -> tuple[str, ...]:
        value = data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.problem((*path, key), f"must be an array of strings, got {toml_type(value)}")
            return ()
        for i, v in enumerate(value):
            if any(ord(c) < 0x20 for c in v):
                self.problem((*path, key, i), "contains a control character")
        return tuple(value)

    def integer(
        self, data: Mapping[str, object], path: tuple[str | int, ...], key: str, *, required: bool = False
    ) -> int | None:
        if key not in data:
            if required:
                self.problem(path, f"missing required field '{key}'")
            return None
        value = data[key]
        if not isinstance(value, int) or isinstance(value, bool):
            self.problem((*path, key), f"must be an integer, got {toml_type(value)}")
            return None
        return value

    def service_name(
        self, data: Mapping[str, object], path: tuple[str | int, ...], key: str, default: str | None
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

    def inference(self, t: Mapping[str, object]) -> Inference | None:
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
        port = self.port(t, p)
        args = self.args(t, p)
        env = self.environment(t, p)
        ulimits = self.ulimits(t, p)
        health = self.healthcheck(t, p)
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

    def port(self, t: Mapping[str, object], p: tuple[str | int, ...]) -> int | None:
        """``inference.port``: required, a TCP port."""
        port = self.integer(t, p, "port", required=True)
        if port is not None and not 0 < port < 65536:
            self.problem((*p, "port"), f"{port} is not a TCP port (1-65535)")
            return None
        return port

    def args(self, t: Mapping[str, object], p: tuple[str | int, ...]) -> tuple[str, ...]:
        """``inference.args``; none may set ``--port``, which emit appends from ``inference.port``."""
        args = self.strings(t, p, "args")
        for i, a in enumerate(args):
            if a == "--port" or a.startswith("--port="):
                self.problem((*p, "args", i), "sets --port; set inference.port instead (emit appends --port)")
        return args

    def environment(self, t: Mapping[str, object], p: tuple[str | int, ...]) -> list[tuple[str, str]]:
        """``[inference.environment]``: variable names to string values."""
        env = []
        for k, v in (self.table(t, p, "environment") or {}).items():
            if not _ENV_NAME.fullmatch(k):
                self.problem((*p, "environment", k), f"'{k}' is not an environment variable name")
            elif not isinstance(v, str):
                self.problem((*p, "environment", k), f"must be a string, got {toml_type(v)} (quote it)")
            else:
                env.append((k, v))
        return env

    def ulimits(self, t: Mapping[str, object], p: tuple[str | int, ...]) -> list[Ulimit]:
        """``[inference.ulimits]``: each a number, or a table of exactly ``soft`` and ``hard``."""
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
        return ulimits

    def healthcheck(self, t: Mapping[str, object], p: tuple[str | int, ...]) -> Healthcheck | None:
        """``[inference.healthcheck]``, which needs a ``test``."""
        h = self.table(t, p, "healthcheck")
        if h is None:
            return None
        hp = (*p, "healthcheck")
        self.known(h, hp, ("test", "interval", "timeout", "retries", "start_period"))
        test = self.strings(h, hp, "test")
        if not test:
            self.problem(hp, 'needs \'test\', e.g. ["CMD", "curl", "-fsS", "http://127.0.0.1:8000/health"]')
        return Healthcheck(
            test=test,
            interval=self.duration(h, hp, "interval"),
            timeout=self.duration(h, hp, "timeout"),
            retries=self.integer(h, hp, "retries"),
            start_period=self.duration(h, hp, "start_period"),
        )

    def duration(self, data: Mapping[str, object], path: tuple[str | int, ...], key: str) -> str | None:
        value = self.string(data, path, key)
        if value is not None and not re.fullmatch(r"(\d+(us|ms|s|m|h))+", value):
            self.problem((*path, key), f"'{value}' is not a duration (e.g. 30s, 5m, 1h30m)")
            return None
        return value

    def proxy(self, t: Mapping[str, object]) -> Proxy | None:
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

    def profile(self, name: str, t: Mapping[str, object]) -> Profile | None:
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
            if publish is not None and split_publish(publish) is None:
                self.problem((*rp, "publish"), f"'{publish}' is not ADDRESS:PORT (e.g. 127.0.0.1:8000)")
                publish = None
            if service is not None and publish is not None:
                replicas.append(Replica(service=service, publish=publish, devices=self.strings(rt, rp, "devices")))
        if len(replicas) != len(raw):
            return None
        return Profile(name=name, file=file, replicas=tuple(replicas), caddyfile=self.string(t, p, "caddyfile"))


def split_publish(publish: str) -> tuple[str, int] | None:
    m = re.fullmatch(r"(\[[0-9a-fA-F:.]+\]|[0-9.]+|[A-Za-z0-9.-]+):(\d{1,5})", publish)
    if not m or not 0 < int(m.group(2)) < 65536:
        return None
    return m.group(1), int(m.group(2))


# --------------------------------------------------------------------------- emitting

_Origin = Callable[[str, str], Problem]
