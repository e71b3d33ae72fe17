"""Registry credentials: the Docker config's ``auths``, credential helpers and store, and auth challenges.

``DockerCredentials`` reads the Docker config (``$DOCKER_CONFIG/config.json``
or ``~/.docker/config.json``) once: inline ``auths`` entries are decoded
here, a ``credHelpers`` entry or the ``credsStore`` is run through docker's
own credential code (``docker.credentials``), once per registry.
``parse_challenge`` reads a ``WWW-Authenticate`` header (pure).
"""

from __future__ import annotations

import base64
import binascii
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from patchkit.errors import BadInput
from patchkit.oci.manifest import json_object
from patchkit.oci.ref import DOCKER_HUB, HUB_ALIASES, ImageRef


@dataclass(frozen=True)
class Challenge:
    """A ``WWW-Authenticate`` challenge: the scheme (lowercase) and its parameters."""

    scheme: str
    params: Mapping[str, str]


_CHALLENGE = re.compile(r"\s*([A-Za-z][\w-]*)\s*(.*)", re.DOTALL)


_PARAM = re.compile(r'([\w-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))')


def parse_challenge(header: str) -> Challenge | None:
    """Parse ``Bearer realm="…",service="…",scope="…"`` or ``Basic realm="…"`` (pure); ``None`` if empty."""
    m = _CHALLENGE.match(header or "")
    if not m:
        return None
    params = {
        k.lower(): (re.sub(r"\\(.)", r"\1", quoted) if quoted or not bare else bare)
        for k, quoted, bare in _PARAM.findall(m.group(2))
    }
    return Challenge(m.group(1).lower(), params)


def default_docker_config(environ: Mapping[str, str]) -> Path:
    """The Docker config ``environ`` names, as for the docker CLI: ``$DOCKER_CONFIG/config.json``, else ~/.docker."""
    base = environ.get("DOCKER_CONFIG")
    return Path(base) / "config.json" if base else Path.home() / ".docker" / "config.json"


@dataclass(frozen=True)
class Helper:
    """A Docker config's ``credHelpers`` entry or ``credsStore``: the program that holds a registry's credentials."""

    kind: str  # "credential helper" or "credential store"
    name: str  # docker-credential-NAME

    def __str__(self) -> str:
        return f"the {self.kind} {self.name!r}"


def run_helper(registry: str, helper: Helper) -> tuple[str, str] | str:
    """Run ``docker-credential-NAME get`` for ``registry`` with docker's own credential code.

    Returns (user, secret), or a note saying why there are none: no entry, the
    helper is not installed, it failed, or it gave an identity token (an OAuth
    refresh token, which the distribution token flow patchkit speaks does not take).
    """
    from docker import credentials  # type: ignore[import-untyped]  # docker-py ships no type information

    program = f"docker-credential-{helper.name}"
    if shutil.which(program) is None:  # checked first: docker's Store only warns, then fails at run
        return f"{program} is not installed or not on PATH"
    server = "https://index.docker.io/v1/" if registry == DOCKER_HUB else registry
    try:
        data = credentials.Store(helper.name).get(server)
    except credentials.CredentialsNotFound:
        return f"no entry for {server}"
    except credentials.StoreError as e:
        return str(e).strip() or type(e).__name__
    user, secret = data.get("Username"), data.get("Secret")
    if user == "<token>":
        return "an identity token, which patchkit cannot use; store a user name and password or token instead"
    if not isinstance(user, str) or not isinstance(secret, str):
        return "an answer without Username and Secret"
    return user, secret


def auth_host(key: str) -> str:
    """The registry an ``auths`` key names: ``https://index.docker.io/v1/`` is Docker Hub."""
    host = key.split("://", 1)[-1].split("/", 1)[0].strip().lower()
    return DOCKER_HUB if host in HUB_ALIASES else host


def basic(creds: tuple[str, str]) -> str:
    return "Basic " + base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode("ascii")


def decode_auth(entry: object) -> tuple[str, str] | None:
    """``{"auth": base64("user:password")}`` (or ``username``/``password``) -> (user, password)."""
    if not isinstance(entry, dict):
        return None
    auth = entry.get("auth")
    if isinstance(auth, str) and auth:
        try:
            name, sep, secret = base64.b64decode(auth, validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        return (name, secret) if sep and name else None
    user, password = entry.get("username"), entry.get("password")
    if isinstance(user, str) and user and isinstance(password, str):
        return (user, password)
    return None


class DockerCredentials:
    """The credentials the Docker config at ``path`` holds, read on first use and asked once per registry.

    A config that is missing holds none; one that cannot be read or is not
    JSON is ``BadInput`` (the user's file to fix).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._doc: dict[str, object] | None = None
        self._helped: dict[str, tuple[str, str] | str] = {}

    def get(self, registry: str) -> tuple[str, str] | None:
        """(user, password) for ``registry``: inline ``auths``, else its credential helper or store."""
        entry = self.entries().get(registry)
        found = self._from_helper(registry, entry) if isinstance(entry, Helper) else entry
        return found if isinstance(found, tuple) else None

    def entries(self) -> dict[str, tuple[str, str] | Helper]:
        """Registry -> (user, password) from the config's ``auths``, or the helper that holds them."""
        doc = self._load()
        found: dict[str, tuple[str, str] | Helper] = {}
        helpers = doc.get("credHelpers")
        store = doc.get("credsStore")
        if isinstance(helpers, dict):
            for key, helper in helpers.items():
                found[auth_host(str(key))] = Helper("credential helper", str(helper))
        auths = doc.get("auths")
        for key, entry in (auths if isinstance(auths, dict) else {}).items():
            host = auth_host(str(key))
            creds = decode_auth(entry)
            if creds is not None:
                found[host] = creds
            elif host not in found and isinstance(store, str):
                found[host] = Helper("credential store", store)
        return found

    def refused(self, image: ImageRef) -> str:
        """Why a registry answered 401 as far as the credentials go: which were sent and refused, or why none."""
        entry = self.entries().get(image.registry)
        if isinstance(entry, tuple):
            return f"the credentials for {image.display_registry} in {self.path} were refused"
        if not isinstance(entry, Helper):
            return f"no credentials for {image.display_registry} in {self.path}"
        helped = self._from_helper(image.registry, entry)
        if isinstance(helped, tuple):
            return f"the credentials {entry} gave for {image.display_registry} were refused"
        return f"{entry} gave none: {helped}"

    def _from_helper(self, registry: str, helper: Helper) -> tuple[str, str] | str:
        """Ask ``docker-credential-NAME`` through docker's own credential code; a note on why not, otherwise."""
        if registry not in self._helped:
            self._helped[registry] = run_helper(registry, helper)
        return self._helped[registry]

    def _load(self) -> dict[str, object]:
        if self._doc is None:
            try:
                raw = self.path.read_bytes()
            except FileNotFoundError:
                raw = b"{}"
            except OSError as e:
                raise BadInput(f"{self.path}: cannot read the Docker config ({e.strerror})") from e
            try:
                self._doc = json_object(raw, str(self.path))
            except ValueError as e:
                raise BadInput(f"{self.path}: {e}", "fix or remove the Docker config file") from e
        return self._doc
