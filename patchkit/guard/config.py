"""``deploy.toml``'s ``[guard]`` table: which pinned entry is the guard script, where its manifest goes.

Read by ``emit.config`` with the same located-problem reader as the rest of
``deploy.toml``; ``guard/manifest.py`` describes the fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from patchkit.core.values import ContainerPath

if TYPE_CHECKING:
    from collections.abc import Mapping

    from patchkit.lockfile.tomlpos import FieldReader

DEFAULT_TARGET = ContainerPath("/opt/patchkit/guard.json")
DEFAULT_PACKAGE = "vllm"


@dataclass(frozen=True)
class GuardConfig:
    """``deploy.toml``'s ``[guard]``: the pinned entry that is the guard script, where the manifest goes."""

    script: str
    manifest_target: ContainerPath = DEFAULT_TARGET
    runtime_package: str = DEFAULT_PACKAGE


def read_config(r: FieldReader, raw: Mapping[str, object]) -> GuardConfig | None:
    """The ``[guard]`` table of ``deploy.toml`` (None when absent or broken; problems go to ``r``)."""
    t = r.table(raw, (), "guard")
    if t is None:
        return None
    p = ("guard",)
    r.known(t, p, ("script", "manifest_target", "runtime_package"))
    script = r.string(t, p, "script", required=True)
    target = r.typed(t, p, "manifest_target", ContainerPath)
    package = r.string(t, p, "runtime_package")
    if package is not None and not package.isidentifier():
        r.problem((*p, "runtime_package"), f"'{package}' is not an importable top-level package name")
        return None
    if script is None:
        return None
    return GuardConfig(script, target or DEFAULT_TARGET, package or DEFAULT_PACKAGE)
