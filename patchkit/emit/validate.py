"""Validating what emit writes before anything is written.

:func:`validate` checks emitted text against the Compose specification schema
(the copy check-jsonschema ships and keeps current, see :func:`compose_schema`)
and the security rules. :func:`validate_bundle_files` checks the other files of
the bundle: the entrypoint artifact with ``sh -n`` and every pinned
``Caddyfile*`` artifact with ``caddy validate --adapter caddyfile`` (skipped,
with a note, when caddy is not installed).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from patchkit.emit.config import DeployConfig
from patchkit.emit.rules import security_problems
from patchkit.errors import BadInput, Problem
from patchkit.lockfile.model import Lockfile


def load_yaml(text: str) -> object:
    """``text`` parsed with ``yaml.safe_load``; ``ValueError`` when it is not YAML."""
    import yaml  # type: ignore[import-untyped]  # PyYAML ships no type information

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ValueError(str(e)) from e


@functools.cache
def compose_schema() -> Mapping[str, object]:
    """The Compose specification JSON schema, as check-jsonschema vendors it.

    check-jsonschema ships compose-spec.json with its Apache-2.0 licence and
    refreshes it from compose-spec/compose-spec, so every installed patchkit
    validates against a current schema; the lock pins which one.
    """
    from check_jsonschema.builtin_schemas import get_builtin_schema  # type: ignore[import-untyped]  # no type info

    schema: Mapping[str, object] = get_builtin_schema("vendor.compose-spec")
    return schema


def validate(
    text: str,
    schema: Mapping[str, object] | None,
    config: DeployConfig | None = None,
    profile: str | None = None,
) -> list[str]:
    """Problems with emitted compose text: the Compose ``schema`` (see :func:`compose_schema`; ``None``
    checks the security rules only) and the security rules. With ``config`` and ``profile``, rule
    violations name the ``deploy.toml`` line."""
    try:
        doc = load_yaml(text)
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

    out.extend(p.render() for p in security_problems(doc, public, set(), origin))
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


def _present(repo_root: Path, rel: str) -> bool:
    """Whether the pinned file ``rel`` is there to validate; a symlink is refused, not followed by the tool."""
    from patchkit.store.repo import Escape, Repo

    try:
        Repo(repo_root).check_inside(rel)
    except FileNotFoundError:
        return False
    except Escape as e:
        raise BadInput(f"{rel}: {e}; refusing to validate it", "commit the file itself in place of the link") from e
    return True


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
        if not _present(repo_root, rel):
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
            if not _present(repo_root, rel):
                raise BadInput(f"{rel}: the pinned Caddyfile is missing", "restore it; nothing was written")
            error = _run_tool([caddy, "validate", "--adapter", "caddyfile", "--config", rel], repo_root, env, rel)
            if error is not None:
                raise BadInput(f"{rel}: caddy validate: {error}", "fix the Caddyfile; nothing was written")
    return notes
