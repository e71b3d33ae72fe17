"""``patchkit emit``: every profile's compose file, validated, written as one transaction."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from patchkit.emit import manifest as guard_manifest
from patchkit.emit.compose import emit
from patchkit.emit.config import CONFIG_NAME, DeployConfig, load_config
from patchkit.emit.validate import compose_schema, validate, validate_bundle_files
from patchkit.errors import BadInput
from patchkit.lockfile.model import Lockfile

if TYPE_CHECKING:
    from patchkit.core.outcome import Outcome as WriteOutcome
    from patchkit.store.repo import Repo


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
    skipped (caddy not installed), and when ``guard.json`` goes without its
    runtime check (the inference image records no ``version``).
    ``validate_output=False`` (for ``patchkit check``'s drift comparison)
    skips the schema and the external tools: a file equal to what emit writes
    was validated when emit wrote it, and ``emit`` itself still enforces the
    security rules.
    """
    from patchkit.core.outcome import Outcome as WriteOutcome
    from patchkit.store.repo import write_all

    config = load_config(repo.root / CONFIG_NAME)
    files = compose_texts(lock, config, profiles, validate_output=validate_output)
    skipped = validate_bundle_files(repo.root, lock, config) if validate_output else []
    if notes is not None:
        notes.extend(skipped)
        unchecked = guard_manifest.runtime_unchecked(lock, config)
        if unchecked is not None:
            notes.append("{} {}; fix: {}".format(*unchecked))
    drift = drifted(files, lambda rel: _current(repo, rel))
    if check_only:
        return WriteOutcome(), drift
    return WriteOutcome(written=write_all(repo.root, {k: v.encode() for k, v in files.items()})), drift


def _current(repo: Repo, rel: str) -> bytes | None:
    """The file emit would replace, as it is; None when absent or a link (never read through: emit refuses to
    write over it)."""
    from patchkit.store.repo import Escape

    try:
        return repo.read(rel)
    except (FileNotFoundError, Escape):
        return None


def compose_texts(
    lock: Lockfile, config: DeployConfig, profiles: Iterable[str] = (), *, validate_output: bool = True
) -> dict[str, str]:
    """Every (or the named) profile's compose text by file name, checked (schema too with ``validate_output``),
    and ``guard.json`` with a ``[guard]`` table.

    Pure: raises ``BadInput`` for an unknown profile or the first problem of a file.
    """
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
    return files


def drifted(files: dict[str, str], current: Callable[[str], bytes | None]) -> list[str]:
    """The files whose bytes now (``current``; None: missing) differ from the emitted text."""
    return [rel for rel, text in files.items() if current(rel) != text.encode()]
