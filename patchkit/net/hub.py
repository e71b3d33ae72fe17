"""The model hub boundary: what patchkit asks a Hugging Face Hub, and the adapter that asks it.

The core (patchkit.model) receives a ``Hub``; ``HfHub`` implements it with
huggingface_hub, reading ``HF_ENDPOINT``, ``HF_TOKEN`` and ``HF_HUB_OFFLINE``
when it is made (not when huggingface_hub was imported), and turns every
foreign exception into a patchkit error with a hint. Tests hand the core an
``HfHub`` pointed at a local stand-in that answers like the Hub.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from patchkit.errors import BadInput, ExternalFailure, PatchkitError

DEFAULT_ENDPOINT = "https://huggingface.co"
# Seconds to wait for one answer of the Hub's API before giving up.
API_TIMEOUT = 30.0


@dataclass(frozen=True)
class RemoteFile:
    """One file of a repository revision as the Hub lists it.

    ``blob_id`` is the git object id (for an LFS file, of its pointer);
    ``lfs_sha256`` is the SHA-256 of an LFS file's content, None for small files.
    """

    path: str
    size: int
    blob_id: str
    lfs_sha256: str | None = None


class Hub(Protocol):
    """What patchkit needs from a model hub."""

    def resolve(self, repo: str, revision: str) -> str:
        """The full commit ``revision`` (a branch, tag or commit) names now."""
        ...

    def list_files(self, repo: str, commit: str) -> list[RemoteFile]:
        """Every file of ``repo`` at ``commit``, recursively."""
        ...

    def revision_exists(self, repo: str, commit: str) -> bool:
        """Whether ``commit`` still exists in ``repo`` (False only for a definite 404)."""
        ...

    def download(self, repo: str, commit: str, cache_dir: Path, *, quiet: bool) -> Path:
        """Download ``repo`` at ``commit`` into the cache; the snapshot directory."""
        ...


def _is_true(value: str | None) -> bool:
    # The values huggingface_hub itself reads as true.
    return value is not None and value.strip().upper() in {"1", "ON", "YES", "TRUE"}


def default_cache_dir(environ: Mapping[str, str]) -> Path:
    """The Hugging Face cache, as huggingface_hub finds it in ``environ``: HF_HUB_CACHE, else $HF_HOME/hub."""
    given = environ.get("HF_HUB_CACHE") or environ.get("HUGGINGFACE_HUB_CACHE")
    if given:
        return Path(given).expanduser()
    home = environ.get("HF_HOME") or os.path.join(environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def repo_folder(repo: str) -> str:
    """The cache folder name of a model repository: ``models--org--name``."""
    return "models--" + repo.replace("/", "--")


class HfHub:
    """The Hub through huggingface_hub: its endpoint, token (None: the one `hf auth login` saved) and offline mode."""

    def __init__(self, endpoint: str | None = None, token: str | None = None, offline: bool = False) -> None:
        self.endpoint = (endpoint or DEFAULT_ENDPOINT).rstrip("/")
        self.token = token or None
        self.offline = offline

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> HfHub:
        """Configured as huggingface_hub configures itself: HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE."""
        return cls(environ.get("HF_ENDPOINT"), environ.get("HF_TOKEN"), _is_true(environ.get("HF_HUB_OFFLINE")))

    def _api(self, what: str):  # type: ignore[no-untyped-def]  # HfApi is imported lazily
        if self.offline:
            raise BadInput(
                f"{what}: HF_HUB_OFFLINE is set, and this needs the Hub ({self.endpoint})",
                "unset HF_HUB_OFFLINE (or run where the Hub is reachable); `patchkit model verify` works offline",
            )
        from huggingface_hub import HfApi

        return HfApi(endpoint=self.endpoint, token=self.token)

    def resolve(self, repo: str, revision: str) -> str:
        what = f"{repo}@{revision}"
        api = self._api(what)
        with self._errors(what):
            info = api.model_info(repo, revision=revision, timeout=API_TIMEOUT)
        sha = getattr(info, "sha", None)
        if not isinstance(sha, str) or len(sha) != 40:
            raise ExternalFailure(f"{what}: the Hub at {self.endpoint} answered without the revision's commit (sha)")
        return sha

    def list_files(self, repo: str, commit: str) -> list[RemoteFile]:
        from huggingface_hub.hf_api import RepoFile

        what = f"{repo}@{commit[:12]}"
        api = self._api(what)
        out: list[RemoteFile] = []
        with self._errors(what):
            for entry in api.list_repo_tree(repo, revision=commit, recursive=True):
                if isinstance(entry, RepoFile):
                    lfs = entry.lfs.sha256 if entry.lfs is not None else None
                    out.append(RemoteFile(entry.path, int(entry.size), str(entry.blob_id), lfs))
        return out

    def revision_exists(self, repo: str, commit: str) -> bool:
        from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

        what = f"{repo}@{commit[:12]}"
        api = self._api(what)
        try:
            with self._errors(what, passthrough=(RevisionNotFoundError, RepositoryNotFoundError)):
                api.model_info(repo, revision=commit, timeout=API_TIMEOUT)
        except RevisionNotFoundError:
            return False
        except RepositoryNotFoundError as e:
            if _status(e) == 404:
                return False
            raise self._translate(e, what) from e
        return True

    def download(self, repo: str, commit: str, cache_dir: Path, *, quiet: bool) -> Path:
        what = f"{repo}@{commit[:12]}"
        self._api(what)  # refuses in offline mode, before any import of the downloader
        from huggingface_hub import snapshot_download
        from huggingface_hub.utils.tqdm import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

        # HF_HUB_DISABLE_PROGRESS_BARS, when set, decides (huggingface_hub warns if overridden): then the
        # command line passes quiet=False and huggingface_hub's own setting stands.
        toggle = quiet and not are_progress_bars_disabled()
        if toggle:
            disable_progress_bars()
        try:
            with self._errors(what):
                # At the commit, never a branch: a moved branch cannot change what is fetched.
                path = snapshot_download(
                    repo, revision=commit, cache_dir=cache_dir, endpoint=self.endpoint, token=self.token
                )
        finally:
            if toggle:
                enable_progress_bars()
        return Path(path)

    @contextmanager
    def _errors(self, what: str, passthrough: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
        """Turn huggingface_hub's exceptions into patchkit errors."""
        try:
            yield
        except PatchkitError:
            raise
        except passthrough:
            raise
        except Exception as e:
            raise self._translate(e, what) from e

    def _no_repository(self, what: str, status: int | None, token_hint: str) -> PatchkitError:
        """The Hub says no such repository: with a 401 it may exist but be hidden from this token."""
        if status == 401:
            why = (
                "the token was refused"
                if self.token
                else "no token was sent; the repository is private, gated or does not exist"
            )
            return ExternalFailure(f"{what}: 401 unauthorized from {self.endpoint} ({why})", token_hint)
        return ExternalFailure(
            f"{what}: no such model repository on {self.endpoint} ({status or 404})",
            "check the repo id (org/name); if it is private, " + token_hint,
        )

    def _refused(self, what: str, status: int | None, token_hint: str) -> PatchkitError:
        """Any other HTTP error status of the Hub: 401 and 403 are about the token, the rest transient."""
        if status == 401:
            why = "the token was refused" if self.token else "no token was sent"
            return ExternalFailure(f"{what}: 401 unauthorized from {self.endpoint} ({why})", token_hint)
        if status == 403:
            return ExternalFailure(f"{what}: 403 forbidden from {self.endpoint}: the token lacks access", token_hint)
        return ExternalFailure(f"{what}: the Hub at {self.endpoint} answered {status}", "retry later")

    def _translate(self, e: BaseException, what: str) -> PatchkitError:
        from huggingface_hub import errors as hub_errors
        from huggingface_hub.errors import (
            GatedRepoError,
            HfHubHTTPError,
            LocalEntryNotFoundError,
            OfflineModeIsEnabled,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )

        token_hint = "set HF_TOKEN to a token that can read this repository (huggingface.co/settings/tokens)"  # noqa: S105
        status = _status(e)
        if isinstance(e, OfflineModeIsEnabled):
            return BadInput(f"{what}: huggingface_hub is in offline mode (HF_HUB_OFFLINE)", "unset HF_HUB_OFFLINE")
        if isinstance(e, RevisionNotFoundError):
            return ExternalFailure(
                f"{what}: the Hub has no such revision (404)",
                "check the branch, tag or commit on the model's page, then pass it with --revision",
            )
        if isinstance(e, GatedRepoError):
            return ExternalFailure(
                f"{what}: gated repository; the Hub refused access ({status})",
                "accept the model's conditions on its page, then " + token_hint,
            )
        if isinstance(e, RepositoryNotFoundError):
            return self._no_repository(what, status, token_hint)
        if isinstance(e, HfHubHTTPError):
            return self._refused(what, status, token_hint)
        if isinstance(e, LocalEntryNotFoundError):
            return ExternalFailure(f"{what}: cannot reach {self.endpoint}: {_first_line(e)}", "check the network")
        # The Hub client's own name for the base of its transport errors (refused
        # connections, timeouts): the HTTP library beneath it changed between
        # releases (httpx in 1.x, httpx2 in 2.x), this name did not.
        if isinstance(e, hub_errors.HTTPError):  # type: ignore[attr-defined]  # public, not in __all__
            return ExternalFailure(
                f"{what}: cannot reach {self.endpoint} ({type(e).__name__}: {_first_line(e)})",
                "check the network and HF_ENDPOINT",
            )
        if isinstance(e, OSError):
            return ExternalFailure(f"{what}: download failed: {_first_line(e)}")
        return ExternalFailure(f"{what}: huggingface_hub failed: {type(e).__name__}: {_first_line(e)}")


def _status(e: BaseException) -> int | None:
    response = getattr(e, "response", None)
    code = getattr(response, "status_code", None)
    return code if isinstance(code, int) else None


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
