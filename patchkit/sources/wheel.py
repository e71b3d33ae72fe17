"""Wheel upstreams: one released wheel of a Python project, downloaded by pip and read as a zip.

``WheelSource(project, cache_dir, pip_args)`` downloads ``project==version``
with the real pip (so the user's index, proxy and credentials configuration
apply; ``pip_args`` adds to them, e.g. ``--index-url``, ``--python-version``
and ``--platform`` to choose the image's wheel rather than this machine's).
A verified wheel is kept content-addressed at
``cache_dir/wheels/<sha256>/<filename>``; a snapshot pinned by sha256 whose
wheel is in the cache needs no network. Files are read from the zip without
extracting it; member names are the upstream paths (``vllm/envs.py``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from patchkit.core.hashing import sha256_file
from patchkit.core.values import Sha256
from patchkit.errors import BadInput, SourceError, WriteFailed
from patchkit.sources.interface import Pin, Snapshot, UpstreamSource, check_path

_PROJECT = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+!_-]*")
_WHEEL_NAME = re.compile(
    r"(?P<name>[^-]+)-(?P<version>[^-]+)(-(?P<build>[0-9][^-]*))?-[^-]+-[^-]+-[^-]+\.whl",
)
_DIST_INFO_WHEEL = re.compile(r"([^/]+)\.dist-info/WHEEL")


def normalize(project: str) -> str:
    """A project name as indexes compare them (PEP 503): lowercase, runs of '-_.' as one '-'."""
    return re.sub(r"[-_.]+", "-", project).lower()


@dataclass(frozen=True)
class WheelName:
    """The parts of a wheel file name that identify the release (PEP 427)."""

    project: str
    version: str

    @classmethod
    def parse(cls, filename: str) -> WheelName | None:
        m = _WHEEL_NAME.fullmatch(filename)
        return cls(m.group("name"), m.group("version")) if m else None


class WheelSource(UpstreamSource):
    """An upstream that is a project's released wheel, fetched with pip into the user cache."""

    kind = "wheel"

    def __init__(
        self, project: str, cache_dir: Path, pip_args: Sequence[str] = (), *, shows_progress: bool = False
    ) -> None:
        if not _PROJECT.fullmatch(project):
            raise BadInput(f"{project!r} is not a Python project name", "give the name as on the index, e.g. vllm")
        self.project = project
        self.pip_args = tuple(pip_args)
        self._shows_progress = shows_progress  # pip's own bar, when the command shows progress
        #: Verified wheels, by sha256: ``wheels/<sha256>/<filename>``.
        self.wheels = cache_dir / "wheels"

    def __repr__(self) -> str:
        return f"WheelSource({self.project!r}, cache={self.wheels})"

    def snapshot(self, ref: str, *, sha256: str | None = None) -> WheelSnapshot:
        """The wheel of version ``ref``; with ``sha256`` (the pin), exactly that file.

        A pinned wheel already in the cache is used without running pip. A
        version alone always asks the index (which file it serves depends on
        the index and the platform); the snapshot's pin then records the file.
        Raises ``BadInput`` for a malformed version or sha256, when the
        downloaded wheel does not match ``sha256`` (nothing is cached then) and
        when the pinned wheel's file name spells another version than ``ref``;
        ``SourceError`` when pip fails (no such version, no network).
        """
        if not _VERSION.fullmatch(ref):
            raise BadInput(f"{ref!r} is not a version of {self.project}", "give an exact version, e.g. 0.26.1")
        pinned: str | None = None
        if sha256 is not None:
            try:
                pinned = Sha256(sha256).hex
            except ValueError as e:
                raise BadInput(f"wheel pin for {self.project}=={ref}: {e}") from e
            if cached := self._cached(pinned):
                snap = WheelSnapshot(cached, pinned)
                if snap.version.lower() != ref.lower():
                    raise BadInput(
                        f"the pinned sha256 {pinned} is {snap.filename}, not version {ref} of {self.project}",
                        "the lockfile's version and sha256 of this wheel disagree: re-pin it",
                    )
                return snap
        path, digest = self._download(ref, pinned)
        return WheelSnapshot(path, digest)

    def _cached(self, pinned: str) -> Path | None:
        """The cached wheel of this project with sha256 ``pinned``, re-hashed; a corrupt copy is removed."""
        directory = self.wheels / pinned
        try:
            candidates = sorted(directory.glob("*.whl"))
        except OSError:
            return None
        for path in candidates:
            name = WheelName.parse(path.name)
            if name is None or normalize(name.project) != normalize(self.project):
                continue
            try:
                if sha256_file(path) == pinned:
                    return path
                path.unlink()
            except OSError:
                continue
        return None

    def _download(self, version: str, pinned: str | None) -> tuple[Path, str]:
        """pip-download into a temporary directory beside the cache, verify, then rename into place."""
        try:
            self.wheels.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=".download-", dir=self.wheels))
        except OSError as e:
            raise WriteFailed(
                f"{self.wheels}: cannot create the wheel cache ({e.strerror})",
                "make the cache writable or point PATCHKIT_CACHE at a writable directory",
            ) from e
        requirement = f"{self.project}=={version}"
        try:
            self._pip_download(requirement, tmp)
            found = sorted(p for p in tmp.iterdir() if p.name.endswith(".whl"))
            if len(found) != 1:
                raise SourceError(f"pip download {requirement} gave {len(found)} wheels, expected one")
            downloaded = found[0]
            name = WheelName.parse(downloaded.name)
            if name is None or normalize(name.project) != normalize(self.project):
                raise SourceError(f"pip download {requirement} gave {downloaded.name}, not a wheel of {self.project}")
            digest = sha256_file(downloaded)
            if pinned is not None and digest != pinned:
                raise BadInput(
                    f"{downloaded.name}: sha256 mismatch: the lockfile pins {pinned}, "
                    f"the index served {digest}; nothing was cached",
                    "if the new file is legitimate, re-pin the wheel; otherwise check the index you download from",
                )
            _check_wheel(downloaded)
            try:
                return self._store(downloaded, digest), digest
            except OSError as e:
                raise WriteFailed(f"{self.wheels}: cannot store {downloaded.name} ({e.strerror})") from e
        except OSError as e:
            raise SourceError(f"pip download {requirement}: {e.filename}: {e.strerror}") from e
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _pip_download(self, requirement: str, directory: Path) -> None:
        """Run pip; on a terminal (and without --quiet) its progress goes to our stderr, otherwise it is quiet."""
        command = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
            "--disable-pip-version-check", "--no-input",
            requirement, "-d", str(directory), *self.pip_args,
        ]  # fmt: skip
        stdout: int = subprocess.PIPE
        if self._shows_progress:
            sys.stderr.flush()
            stdout = sys.stderr.fileno()  # pip draws its progress bar on stdout: show it on stderr
        try:
            result = subprocess.run(
                command, stdin=subprocess.DEVNULL, stdout=stdout, stderr=subprocess.PIPE, check=False
            )
        except OSError as e:
            raise SourceError(f"cannot run pip: {e.strerror}", "install pip for this Python") from e
        if result.returncode != 0:
            text = result.stderr.decode("utf-8", "replace")
            if isinstance(result.stdout, bytes):
                text = result.stdout.decode("utf-8", "replace") + "\n" + text
            reason, available = _pip_reason(text)
            raise SourceError(
                f"pip download {requirement} failed: {reason or f'exit status {result.returncode}'}",
                f"the index has these versions: {available}" if available else "check the version and the index",
            )

    def _store(self, downloaded: Path, digest: str) -> Path:
        """Move a verified wheel into ``wheels/<sha256>/`` atomically (same file system: a rename)."""
        from patchkit.store.repo import move_into

        directory = self.wheels / digest
        directory.mkdir(exist_ok=True)
        dest = directory / downloaded.name
        move_into(downloaded, dest)
        return dest


class WheelSnapshot(Snapshot):
    """One wheel file; its members are the upstream's files."""

    def __init__(self, path: Path, sha256: str) -> None:
        name = WheelName.parse(path.name)
        if name is None:
            raise BadInput(f"{path.name} is not a wheel file name (project-version-python-abi-platform.whl)")
        #: The wheel file (in the cache).
        self.path = path
        self.sha256 = sha256
        self.filename = path.name
        #: The version as the wheel's file name spells it.
        self.version = name.version

    def __repr__(self) -> str:
        return f"WheelSnapshot({self.filename!r})"

    @property
    def pin(self) -> Pin:
        return Pin(kind="wheel", version=self.version, sha256=self.sha256, filename=self.filename)

    def read(self, paths: Iterable[str]) -> dict[str, bytes | None]:
        """Each member's bytes, read from the zip without extracting it; None where there is no such file.

        A path missing at the top of the wheel is also looked up in its
        ``.data/purelib/`` and ``.data/platlib/`` directories, which install
        to the same place. A path that is not a clean relative path raises
        ``BadInput``.
        """
        wanted = list(dict.fromkeys(paths))
        for p in wanted:
            check_path(p)
        out: dict[str, bytes | None] = {}
        try:
            with zipfile.ZipFile(self.path) as zf:
                members = {info.filename: info for info in zf.infolist() if not info.is_dir()}
                data_dirs = [
                    f"{m.group(1)}.data/{scheme}/"
                    for m in map(_DIST_INFO_WHEEL.fullmatch, members)
                    if m
                    for scheme in ("purelib", "platlib")
                ]
                for p in wanted:
                    info = members.get(p)
                    if info is None:
                        info = next((members[d + p] for d in data_dirs if d + p in members), None)
                    out[p] = zf.read(info) if info is not None else None
        except (OSError, zipfile.BadZipFile, zlib.error, NotImplementedError) as e:
            raise SourceError(
                f"{self.path}: cannot read the wheel ({e})",
                f"remove it from the cache ({self.path.parent}) and snapshot again",
            ) from e
        return out


def _check_wheel(path: Path) -> None:
    """A wheel is a readable zip with a ``*.dist-info/WHEEL`` at its top."""
    try:
        with zipfile.ZipFile(path) as zf:
            if not any(_DIST_INFO_WHEEL.fullmatch(n) for n in zf.namelist()):
                raise SourceError(f"{path.name}: not a wheel (no .dist-info/WHEEL inside)")
    except zipfile.BadZipFile as e:
        raise SourceError(f"{path.name}: not a wheel ({e})") from e


def _pip_reason(output: str) -> tuple[str, str | None]:
    """pip's last ``ERROR:`` line (else its last line), and the versions it says the index has."""
    lines = [line.strip() for line in output.splitlines() if line.strip() and not line.startswith("[notice]")]
    errors = [line.removeprefix("ERROR:").strip() for line in lines if line.startswith("ERROR:")]
    reason = errors[-1] if errors else (lines[-1] if lines else "")
    available = None
    for line in errors:
        if m := re.search(r"\(from versions: ([^)]*)\)", line):
            available = m.group(1)
    return reason, available
