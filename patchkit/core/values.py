"""Typed values of the domain: each refuses anything but its exact form.

These are the vocabulary of the lockfile. Constructing one from a bad string
raises ``ValueError`` with a message that says what the right form is; the
lockfile loader turns that into a located error.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import PurePosixPath

# The lockfile's file name at the top of a deployment: every layer names it.
LOCKFILE_NAME = "lockfile.toml"

_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX40 = re.compile(r"[0-9a-f]{40}")
_REF_ISSUE = re.compile(r"(?P<owner>[A-Za-z0-9_.-]+)/(?P<repo>[A-Za-z0-9_.-]+)#(?P<number>[1-9][0-9]*)")
_REF_COMMIT = re.compile(
    r"https://github\.com/(?P<owner>[A-Za-z0-9_.-]+)/(?P<repo>[A-Za-z0-9_.-]+)/commit/(?P<sha>[0-9a-f]{40})"
)
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Paths every check below accepts, recognised by one match (a path that fails it takes the checks, and their
# message): '/'-separated parts, none empty, '.' or '..', without a backslash or the characters each refuses.
_PART = r"(?!\.\.?(?:/|\Z))[^/\\{}]+"
_PLAIN_REPO = re.compile(r"{0}(?:/{0})*".format(_PART.format(r"\x00-\x1f\x7f\ud800-\udfff")))
_PLAIN_UPSTREAM = re.compile(r"{0}(?:/{0})*".format(_PART.format(r"\x00\n\r")))
_PLAIN_CONTAINER = re.compile(r"(?:/{})+".format(_PART.format(r"\x00\n\r")))


def _describe(text: str) -> str:
    return repr(text) if len(text) <= 80 else repr(text[:77] + "...")


@dataclass(frozen=True, order=True)
class Sha256:
    """A SHA-256 file hash: exactly 64 lowercase hex digits."""

    hex: str

    def __post_init__(self) -> None:
        if not isinstance(self.hex, str) or not _HEX64.fullmatch(self.hex):
            n = len(self.hex) if isinstance(self.hex, str) else 0
            raise ValueError(
                f"{_describe(str(self.hex))} is not a sha256 (need 64 lowercase hex digits, got {n} characters)"
            )

    def __str__(self) -> str:
        return self.hex

    @property
    def short(self) -> str:
        return self.hex[:12]


@dataclass(frozen=True, order=True)
class Digest:
    """A content digest as registries write it: ``sha256:`` and 64 lowercase hex digits."""

    text: str

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or not self.text.startswith("sha256:"):
            raise ValueError(f"{_describe(str(self.text))} is not a digest (need 'sha256:' + 64 lowercase hex)")
        hexpart = self.text[len("sha256:") :]
        if not _HEX64.fullmatch(hexpart):
            raise ValueError(
                f"{_describe(self.text)} is not a digest: need 64 lowercase hex digits "
                f"after 'sha256:', got {len(hexpart)}" + (" with uppercase" if hexpart.lower() != hexpart else "")
            )

    def __str__(self) -> str:
        return self.text

    @property
    def hex(self) -> str:
        return self.text[len("sha256:") :]


@dataclass(frozen=True, order=True)
class Revision:
    """A full 40-hex git commit id; branch names, tags and short ids are refused."""

    sha: str

    def __post_init__(self) -> None:
        if not isinstance(self.sha, str) or not _HEX40.fullmatch(self.sha):
            raise ValueError(
                f"{_describe(str(self.sha))} is not a full commit id "
                "(need 40 lowercase hex digits; a branch, tag or short id can move or collide)"
            )

    def __str__(self) -> str:
        return self.sha

    @property
    def short(self) -> str:
        return self.sha[:12]


@dataclass(frozen=True, order=True)
class ContainerPath:
    """An absolute, normalised POSIX path inside the container."""

    path: str

    def __post_init__(self) -> None:
        p = self.path
        if p.__class__ is str and _PLAIN_CONTAINER.fullmatch(p):
            return
        if not isinstance(p, str) or not p.startswith("/"):
            raise ValueError(f"{_describe(str(p))} is not an absolute container path (must start with '/')")
        if any(c in p for c in "\x00\n\r\\"):
            raise ValueError(f"{_describe(p)} contains a control character or a backslash")
        parts = p.split("/")[1:]
        if p == "/":
            raise ValueError("'/' is not a file path")
        if any(part in ("", ".", "..") for part in parts):
            raise ValueError(f"{_describe(p)} is not normalised (no '.', '..', '//' or trailing '/')")

    def __str__(self) -> str:
        return self.path


@dataclass(frozen=True, order=True)
class RepoPath:
    """A relative POSIX path that stays inside the repository (no '..', not absolute)."""

    path: str

    def __post_init__(self) -> None:
        p = self.path
        if p.__class__ is str and _PLAIN_REPO.fullmatch(p):
            return
        if not isinstance(p, str) or not p:
            raise ValueError("empty path")
        if p.startswith("/"):
            raise ValueError(f"{_describe(p)} is absolute; paths in the lockfile are relative to the repository")
        if "\\" in p:
            raise ValueError(f"{_describe(p)} uses '\\'; write repository paths with '/'")
        if _CONTROL.search(p):
            raise ValueError(f"{_describe(p)} contains a control character; rename the file")
        try:
            p.encode("utf-8")
        except UnicodeEncodeError:
            shown = p.encode("utf-8", "surrogateescape").decode("ascii", "backslashreplace")
            raise ValueError(
                f"{shown}: the name is not UTF-8; lockfile paths are UTF-8 text, rename the file"
            ) from None
        parts = p.split("/")
        if ".." in parts:
            raise ValueError(f"{_describe(p)} leaves the repository ('..' is not allowed)")
        if any(part in ("", ".") for part in parts):
            raise ValueError(f"{_describe(p)} is not normalised (no '.', '//' or trailing '/')")

    def __str__(self) -> str:
        return self.path

    @property
    def pure(self) -> PurePosixPath:
        return PurePosixPath(self.path)


@dataclass(frozen=True, order=True)
class UpstreamPath:
    """A path inside an upstream source tree: relative, normalised, no '..'."""

    path: str

    def __post_init__(self) -> None:
        p = self.path
        if p.__class__ is str and _PLAIN_UPSTREAM.fullmatch(p):
            return
        if not isinstance(p, str) or not p:
            raise ValueError("empty upstream path")
        parts = p.split("/")
        if p.startswith("/") or ".." in parts or any(part in ("", ".") for part in parts) or "\\" in p:
            raise ValueError(
                f"{_describe(p)} is not a path inside the upstream tree "
                "(relative, '/'-separated, no '.', '..' or empty parts)"
            )
        if any(c in p for c in "\x00\n\r"):
            raise ValueError(f"{_describe(p)} contains a control character")

    def __str__(self) -> str:
        return self.path


@dataclass(frozen=True, order=True)
class Reference:
    """An upstream reference: ``owner/repo#N`` (issue or PR) or a GitHub commit URL."""

    text: str

    def __post_init__(self) -> None:
        if not (_REF_ISSUE.fullmatch(self.text) or _REF_COMMIT.fullmatch(self.text)):
            raise ValueError(
                f"{_describe(self.text)} is not a reference "
                "(write 'owner/repo#123' or 'https://github.com/owner/repo/commit/<40 hex>')"
            )

    def __str__(self) -> str:
        return self.text

    @property
    def is_commit(self) -> bool:
        return _REF_COMMIT.fullmatch(self.text) is not None


def check_name(name: str, what: str = "name") -> str:
    """Validate an entry name: lowercase letters, digits, '.', '_' and '-'."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(
            f"{_describe(str(name))} is not a valid {what} "
            "(lowercase letters, digits, '.', '_', '-'; starting with a letter or digit)"
        )
    return name


def host_only(address: str) -> str:
    """``host`` of ``host[:port]``, ``[v6]`` or ``[v6]:port`` (a bare IPv6 address is kept whole)."""
    if address.startswith("["):
        return address[1 : address.find("]")] if "]" in address else address
    return address.rsplit(":", 1)[0] if address.count(":") == 1 else address


def is_loopback(address: str) -> bool:
    """Whether ``address`` (``host[:port]``, IPv6 in brackets or bare) is this machine.

    The one rule patchkit uses, for registries spoken to over plain HTTP and for
    what emit may publish: ``localhost`` and any name below it (RFC 6761 reserves
    ``*.localhost`` for loopback), ``127.0.0.0/8`` and ``::1``; case does not matter.
    """
    host = host_only(address).lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
