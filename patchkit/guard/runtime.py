#!/usr/bin/env python3
"""The runtime guard: the bytes that run are the bytes reviewed, checked inside the container.

The entrypoint runs this script before the server starts::

    python3 /opt/patchkit/guard.py --manifest /opt/patchkit/guard.json -- SERVER ARGS...

It reads the manifest ``patchkit emit`` writes from the lockfile (``guard.json``:
every container target with its sha256, the runtime version the pinned image
records, the model snapshot path at the pinned revision), hashes each target,
reads the runtime's version without importing it, checks the model snapshot and
the model the server is asked to serve, and exits:

- 0 when everything matches (one ``guard: ok: …`` line on stderr);
- 1 when anything differs: one line per mismatch on stderr (``guard: MISSING``,
  ``STALE``, ``NOT-A-FILE``, ``UNPINNED``, ``VERSION``, ``MODEL``), then ``guard:
  refusing to start: …`` — a missing mount, an overlay from an older checkout, a
  file in the transformers directory the lockfile does not pin, a re-tagged
  nightly, a model cache at another revision, a model argument that is not the
  pinned snapshot;
- 2 when the manifest is missing or malformed, or ``PATCHKIT_GUARD`` has a value
  other than ``on`` or ``off`` (it fails closed).

``PATCHKIT_GUARD=off`` is the only way to skip it; that is logged on stderr and
the exit is 0. The script depends on nothing but the Python standard library
(3.9 or newer), so it runs on the image's own interpreter; patchkit ships it in
its package and a deployment pins a copy of it as a module.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import stat
import sys
import time
from dataclasses import dataclass, field
from typing import Any, NoReturn

MANIFEST_SCHEMA = 1
DEFAULT_MANIFEST = "/opt/patchkit/guard.json"
TRANSFORMERS_ENV = "PATCHKIT_TRANSFORMERS_DIR"
DEFAULT_TRANSFORMERS = "/opt/patchkit/transformers"
SWITCH = "PATCHKIT_GUARD"
CHUNK = 1 << 20
_MAX_MANIFEST = 16 << 20
_MAX_VERSION_FILE = 64 << 10


class ManifestError(Exception):
    """The manifest cannot be read or is not what ``patchkit emit`` writes."""


def log(line: str) -> None:
    """One line on stderr, prefixed, flushed at once (the container log shows it even if the start dies)."""
    sys.stderr.write(f"guard: {line}\n")
    sys.stderr.flush()


def short(hexdigest: str) -> str:
    return hexdigest[:12] + "…"


# --- the manifest ---------------------------------------------------------------------------------


def _field(doc: dict[str, Any], key: str, kind: type, where: str, *, required: bool = True) -> Any:
    value = doc.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ManifestError(f"{where}.{key}: expected {kind.__name__}, found {type(value).__name__}")
    return value


def _hex64(value: str, where: str) -> str:
    if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise ManifestError(f"{where}: not a sha256 (64 lower-case hex digits): {value!r}")
    return value


def _absolute(value: str, where: str) -> str:
    if not value.startswith("/") or "\0" in value or "/../" in f"{value}/":
        raise ManifestError(f"{where}: not an absolute container path: {value!r}")
    return value


def _read_json(path: str) -> dict[str, Any]:
    """The manifest file's JSON object, bounded in size, of the schema this guard reads."""
    try:
        with open(path, "rb") as f:
            raw = f.read(_MAX_MANIFEST + 1)
    except OSError as e:
        raise ManifestError(f"cannot read the manifest: {e.strerror or e}") from e
    if len(raw) > _MAX_MANIFEST:
        raise ManifestError("the manifest is larger than 16 MiB; it is not one patchkit emit writes")
    try:
        doc = json.loads(raw)
    except ValueError as e:
        raise ManifestError(f"not JSON: {e}") from e
    if not isinstance(doc, dict):
        raise ManifestError("not a JSON object")
    if doc.get("schema") != MANIFEST_SCHEMA:
        raise ManifestError(f"schema: expected {MANIFEST_SCHEMA}, found {doc.get('schema')!r}")
    return doc


def _check_pinned_files(files: list[Any]) -> None:
    """Each pinned file: an object with an absolute target, a sha256 and a name."""
    for i, entry in enumerate(files):
        where = f"files[{i}]"
        if not isinstance(entry, dict):
            raise ManifestError(f"{where}: expected an object")
        _absolute(_field(entry, "target", str, where), f"{where}.target")
        _hex64(_field(entry, "sha256", str, where), f"{where}.sha256")
        _field(entry, "name", str, where)


def _check_model(model: dict[str, Any]) -> None:
    """The model: its absolute path, revision, and each listed file's path and size."""
    _absolute(_field(model, "path", str, "model"), "model.path")
    _field(model, "revision", str, "model")
    for i, entry in enumerate(_field(model, "files", list, "model", required=False) or []):
        where = f"model.files[{i}]"
        if not isinstance(entry, dict):
            raise ManifestError(f"{where}: expected an object")
        _field(entry, "path", str, where)
        _field(entry, "size", int, where)


def load_manifest(path: str) -> dict[str, Any]:
    """The manifest at ``path``, every field checked; ``ManifestError`` names the first bad one."""
    doc = _read_json(path)
    _check_pinned_files(_field(doc, "files", list, "manifest"))
    runtime = _field(doc, "runtime", dict, "manifest", required=False)
    if runtime is not None:
        _field(runtime, "package", str, "runtime")
        _field(runtime, "version", str, "runtime")
    model = _field(doc, "model", dict, "manifest", required=False)
    if model is not None:
        _check_model(model)
    return doc


# --- the checks -----------------------------------------------------------------------------------


def sha256_file(path: str) -> str:
    """The sha256 of the file at ``path``, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def check_files(files: list[dict[str, Any]]) -> list[str]:
    """One line per target that is missing, not a regular file, or has other bytes than pinned."""
    out = []
    for entry in files:
        target, pinned, label = entry["target"], entry["sha256"], f"{entry['name']}, {entry.get('kind', 'file')}"
        try:
            st = os.stat(target)
        except FileNotFoundError:
            out.append(f"MISSING {target} ({label}): not in the container; is its mount missing?")
            continue
        except OSError as e:
            out.append(f"MISSING {target} ({label}): cannot be read: {e.strerror}")
            continue
        if not stat.S_ISREG(st.st_mode):
            out.append(f"NOT-A-FILE {target} ({label}): not a regular file")
            continue
        try:
            found = sha256_file(target)
        except OSError as e:
            out.append(f"MISSING {target} ({label}): cannot be read: {e.strerror}")
            continue
        if found != pinned:
            out.append(
                f"STALE {target} ({label}): sha256 {short(found)} but the lockfile pins {short(pinned)} "
                "(a mount from an older checkout, a missing mount over the image's own file, or an edit)"
            )
    return out


def check_transformers(files: list[dict[str, Any]]) -> list[str]:
    """One line per entry of a transformers directory that the manifest does not pin.

    The entrypoint runs every ``*.py`` there (``$PATCHKIT_TRANSFORMERS_DIR``,
    else /opt/patchkit/transformers), and a transformer imports its
    neighbours, so anything unpinned in the directory, or in the directory of
    a pinned transformer, is refused: hashing the pinned files alone would let
    an added ``00-extra.py`` run.
    """
    pinned = {entry["target"] for entry in files}
    dirs = {os.path.normpath(os.environ.get(TRANSFORMERS_ENV) or DEFAULT_TRANSFORMERS)}
    dirs |= {os.path.dirname(entry["target"]) for entry in files if entry.get("kind") == "transformer"}
    out = []
    for directory in sorted(dirs):
        try:
            names = sorted(os.listdir(directory))
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as e:
            out.append(f"UNPINNED {directory}: the transformers directory cannot be listed: {e.strerror}")
            continue
        out += [
            f"UNPINNED {directory}/{name}: in the transformers directory but not pinned by the lockfile "
            "(the entrypoint would run it; remove it, or pin it with patchkit add)"
            for name in names
            if f"{directory}/{name}" not in pinned
        ]
    return out


def _version_from_file(path: str) -> str | None:
    """The version a setuptools-scm ``_version.py`` assigns, parsed (never executed); None if none."""
    try:
        with open(path, "rb") as f:
            data = f.read(_MAX_VERSION_FILE + 1)
    except OSError:
        return None
    if len(data) > _MAX_VERSION_FILE:
        return None
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        return None
    for node in tree.body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        while isinstance(value, ast.NamedExpr):
            value = value.value
        names = {t.id for t in targets if isinstance(t, ast.Name)}
        if names & {"__version__", "version"} and isinstance(value, ast.Constant) and isinstance(value.value, str):
            return value.value
    return None


def installed_version(package: str) -> tuple[str | None, str]:
    """The installed version of ``package`` and where it was read, without importing the package.

    ``_version.py`` in the package directory first (what ``package.__version__``
    is for setuptools-scm projects such as vLLM), else the distribution's
    metadata.
    """
    import importlib.util

    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            path = os.path.join(location, "_version.py")
            found = _version_from_file(path)
            if found is not None:
                return found, path
    import importlib.metadata

    try:
        return importlib.metadata.version(package), f"the {package} distribution's metadata"
    except importlib.metadata.PackageNotFoundError:
        return None, "nowhere"


def check_runtime(runtime: dict[str, Any] | None) -> list[str]:
    """One line when the runtime package is absent or has another version than the pinned image records."""
    if runtime is None:
        return []
    package, pinned = runtime["package"], runtime["version"]
    found, where = installed_version(package)
    image = f"images.{runtime['image']}" if isinstance(runtime.get("image"), str) else "the pinned image"
    if found is None:
        return [f"VERSION {package} is not installed in the container; {image} records {pinned}"]
    if found != pinned:
        return [
            f"VERSION {package} is {found} ({where}) but {image} records {pinned} "
            "(a re-tagged nightly, or another image than the pinned digest)"
        ]
    return []


# What vllm serve's options take (vLLM's FlexibleArgumentParser over argparse). Options that take
# no value: store_true flags, and both forms of the BooleanOptionalAction ones (any --no-X).
_FLAGS = frozenset(
    [
        "--trust-remote-code", "--enforce-eager", "--disable-log-requests", "--disable-log-stats",
        "--enable-log-requests", "--enable-prefix-caching", "--enable-chunked-prefill", "--headless",
        "--enable-auto-tool-choice", "--disable-custom-all-reduce", "--enable-lora", "--enable-expert-parallel",
        "--disable-frontend-multiprocessing", "--enable-request-id-headers", "--disable-fastapi-docs",
        "--enable-prompt-tokens-details", "--enable-server-load-tracking", "--enable-force-include-usage",
        "--allow-credentials", "--return-tokens-as-token-ids", "--skip-tokenizer-init", "--enable-sleep-mode",
        "--async-scheduling", "--enable-eplb", "--enable-dbo", "--data-parallel-hybrid-lb",
        "--data-parallel-external-lb",
        "--data-parallel-multi-port-external-lb", "--enable-tokenizer-info-endpoint", "--enable-log-outputs",
        "--disable-uvicorn-access-log", "--disable-sliding-window", "--disable-cascade-attn", "--fully-sharded-loras",
        "--calculate-kv-scales", "--enable-elastic-ep", "--grpc", "--disable-async-output-proc", "--use-tqdm-on-load",
        "--enable-multimodal-encoder-data-parallel", "--ray-workers-use-nsight", "--disable-mm-preprocessor-cache",
        "--enable-ssl-refresh", "--help", "-h", "--version",
    ]
)  # fmt: skip
# Options that take every value up to the next option (nargs="+").
_MANY = frozenset({"--served-model-name", "--lora-modules", "--prompt-adapters"})
# Options known to take exactly one value.
_ONE = frozenset(
    [
        "--host", "--port", "--uds", "--uvicorn-log-level", "--api-key", "--ssl-keyfile", "--ssl-certfile",
        "--ssl-ca-certs", "--root-path", "--middleware", "--allowed-origins", "--allowed-methods", "--allowed-headers",
        "--chat-template", "--response-role", "--tokenizer", "--tokenizer-mode", "--revision", "--code-revision",
        "--tokenizer-revision", "--download-dir", "--load-format", "--dtype", "--kv-cache-dtype", "--max-model-len",
        "--seed", "--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp", "--data-parallel-size", "-dp",
        "--data-parallel-size-local", "-dpl", "--data-parallel-address", "-dpa", "--data-parallel-rpc-port", "-dpp",
        "--data-parallel-start-rank", "-dpr", "--data-parallel-rank", "-dpn", "--api-server-count", "-asc",
        "--gpu-memory-utilization", "--block-size", "--swap-space", "--cpu-offload-gb", "--max-num-seqs",
        "--max-num-batched-tokens", "--max-logprobs", "--quantization", "-q", "--max-loras", "--max-lora-rank",
        "--max-cpu-loras", "--lora-dtype", "--tool-call-parser", "--tool-parser-plugin", "--reasoning-parser",
        "--distributed-executor-backend", "--compilation-config", "-O", "--optimization-level", "--speculative-config",
        "--hf-overrides", "--generation-config", "--override-generation-config", "--limit-mm-per-prompt", "--config",
        "--attention-backend", "--kv-transfer-config", "--model-impl", "--hf-config-path", "--device", "--worker-cls",
        "--worker-extension-cls", "--log-config-file", "--max-log-len", "--chat-template-content-format",
    ]
)  # fmt: skip


@dataclass
class ServerArgs:
    """The models a ``vllm serve`` command line names, read as vLLM's parser reads it.

    ``positional``: the bare arguments (the first is vLLM's ``model_tag``; any
    other makes vLLM exit); ``options``: every ``--model`` value; ``unsure``:
    (option, argument) where the argument is the model if the option, unknown
    here, takes no value.
    """

    positional: list[str] = field(default_factory=list)
    options: list[str] = field(default_factory=list)
    unsure: list[tuple[str, str]] = field(default_factory=list)
    leading: bool = False
    config: bool = False


def _is_option(arg: str) -> bool:
    if not arg.startswith("-") or arg == "-":
        return False
    try:
        float(arg)  # argparse reads "-1" as a value when no option looks like a number
    except ValueError:
        return True
    return False


def _option_name(arg: str) -> tuple[str, bool]:
    """An option's name as vLLM's parser normalises it (``_`` to ``-``, ``--x.y`` dicts), and whether ``=VALUE``."""
    key, eq, _ = arg.partition("=")
    if key.startswith("--"):
        key = "--" + key[2:].split(".", 1)[0].replace("_", "-")
    elif key.startswith("-O") and len(key) > 2:
        return "-O", True  # -O3, as vLLM rewrites it
    return key, bool(eq)


def _looks_like_a_value(arg: str) -> bool:
    """A number or a JSON object or list: an option's value, never a model to serve."""
    try:
        float(arg)
    except ValueError:
        return arg[:1] in ("{", "[")
    return True


def _values(args: list[str], i: int, name: str, out: ServerArgs) -> int:
    """Skip the values option ``args[i]`` (called ``name``) takes; the index after them."""
    if name in _FLAGS or name.startswith("--no-"):
        return i + 1
    if name in _MANY:
        i += 1
        while i < len(args) and not _is_option(args[i]):
            i += 1
        return i
    if i + 1 < len(args) and (name in _ONE or not _is_option(args[i + 1])):
        if name not in _ONE and not _looks_like_a_value(args[i + 1]):
            out.unsure.append((name, args[i + 1]))
        return i + 2
    return i + 1


def read_server_args(args: list[str]) -> ServerArgs:
    """Every model ``vllm serve ARGS`` could be asked to serve (see :class:`ServerArgs`).

    vLLM's own rules, which the guard does not have to choose between: the
    positional ``model_tag`` wins over ``--model`` (``vllm serve``'s command);
    of several ``--model``, argparse keeps the last, and newer vLLM moves the
    first one into the positional's place (``FlexibleArgumentParser``), so
    every one of them counts.
    """
    out = ServerArgs(leading=bool(args) and not _is_option(args[0]))
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            out.positional.extend(args[i + 1 :])
            break
        if not _is_option(arg):
            out.positional.append(arg)
            i += 1
            continue
        name, inline = _option_name(arg)
        out.config = out.config or name == "--config"
        if name == "--model":
            if inline:
                out.options.append(arg.partition("=")[2])
            elif i + 1 < len(args):
                out.options.append(args[i + 1])
                i += 1
            i += 1
        else:
            i = i + 1 if inline else _values(args, i, name, out)
    return out


def served_model(args: list[str]) -> str | None:
    """The model vLLM serves for ``args``: the positional, else a ``--model`` (the last, as argparse keeps)."""
    read = read_server_args(args)
    if read.positional:
        return read.positional[0]
    return read.options[-1] if read.options else None


def model_problems(args: list[str], path: str) -> list[str]:
    """MODEL lines for a command line that could serve anything but the snapshot at ``path``.

    Every model the arguments name must be the pinned snapshot, and there must
    be one (without, vLLM serves its default or refuses). An argument that is
    the model or an unknown option's value depending on that option is refused
    unless it is the snapshot, when no model leads the arguments; so is
    ``--config``, whose file can add any option, ``--model`` among them.
    """
    read = read_server_args(args)
    pinned = path.rstrip("/")
    out = [
        f"MODEL the server is asked to serve {asked}, not the pinned snapshot {path}"
        for asked in dict.fromkeys([*read.positional, *read.options])
        if asked.rstrip("/") != pinned
    ]
    named = bool(read.positional or read.options)
    unsure = [] if read.leading else [(n, v) for n, v in read.unsure if v.rstrip("/") != pinned or not named]
    out += [
        f"MODEL cannot tell whether {value} is the value of {name} or the model the server is to serve; "
        f"write {name}={value}, or give the model first"
        for name, value in unsure
    ]
    if not named and not unsure:
        out.append(f"MODEL the server's arguments name no model (vLLM would serve its default); give it {path}")
    if read.config:
        out.append(
            "MODEL --config: vLLM adds a YAML file's options to the arguments (before the model, in some versions), "
            "which the guard cannot read; give the options on the command line"
        )
    return out


def check_model(model: dict[str, Any] | None, server_args: list[str] | None) -> list[str]:
    """Lines for a snapshot that is not there, files missing or of another size, a different model served."""
    if model is None:
        return []
    path, revision = model["path"], model["revision"]
    out = model_problems(server_args, path) if server_args is not None else []
    if not os.path.isdir(path):
        out.append(
            f"MODEL {path} is missing: the model at the pinned revision {revision} is not in the mounted cache "
            "(patchkit model fetch, or mount the cache that has it)"
        )
        return out
    for entry in model.get("files") or []:
        full = os.path.join(path, entry["path"])
        try:
            size = os.stat(full).st_size
        except OSError:
            out.append(f"MODEL {full} is missing from the snapshot at {revision}")
            continue
        if size != entry["size"]:
            out.append(f"MODEL {full} has {size} bytes, the pinned revision {revision} has {entry['size']}")
    return out


# --- the command ----------------------------------------------------------------------------------


def _usage(message: str) -> NoReturn:
    log(f"{message}; usage: guard.py [--manifest PATH] [-- SERVER ARGS...]")
    sys.exit(2)


def parse_args(argv: list[str]) -> tuple[str, list[str] | None]:
    """``--manifest PATH`` (default: ``$PATCHKIT_GUARD_MANIFEST`` or /opt/patchkit/guard.json), ``--`` server args."""
    manifest = os.environ.get("PATCHKIT_GUARD_MANIFEST") or DEFAULT_MANIFEST
    server: list[str] | None = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            server = argv[i + 1 :]
            break
        if arg == "--manifest":
            if i + 1 >= len(argv):
                _usage("--manifest needs a path")
            manifest = argv[i + 1]
            i += 2
            continue
        if arg.startswith("--manifest="):
            manifest = arg.split("=", 1)[1]
        else:
            _usage(f"unknown argument {arg!r}")
        i += 1
    return manifest, server


def run(argv: list[str]) -> int:
    """Check everything the manifest names; the exit code (0 ok or off, 1 mismatches, 2 bad input)."""
    switch = os.environ.get(SWITCH, "on")
    if switch == "off":
        log(f"{SWITCH}=off: the runtime guard is switched off; nothing was checked, the server starts unchecked")
        return 0
    if switch not in ("on", ""):
        log(f"{SWITCH}={switch!r}: unknown value (on or off); refusing to start")
        return 2
    manifest_path, server_args = parse_args(argv)
    started = time.perf_counter()
    try:
        manifest = load_manifest(manifest_path)
    except ManifestError as e:
        log(f"{manifest_path}: {e}; refusing to start (patchkit emit writes it; is its mount missing?)")
        return 2
    files = manifest["files"]
    problems = [
        *check_files(files),
        *check_transformers(files),
        *check_runtime(manifest.get("runtime")),
        *check_model(manifest.get("model"), server_args),
    ]
    name = manifest.get("deployment") or "the deployment"
    for line in problems:
        log(line)
    if problems:
        log(f"refusing to start: {len(problems)} mismatch(es) against {manifest_path} ({name})")
        return 1
    elapsed = (time.perf_counter() - started) * 1000
    runtime = manifest.get("runtime")
    model = manifest.get("model")
    parts = [f"{len(files)} files match"]
    if runtime:
        parts.append(f"{runtime['package']} {runtime['version']}")
    if model:
        parts.append(f"model at {model['revision']}")
    log(f"ok: {', '.join(parts)} ({name}, {elapsed:.0f} ms)")
    return 0


def main() -> None:
    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
