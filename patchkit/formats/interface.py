"""The one interface of every output format: a renderer turns a report into text, chosen by name.

A report kind (a check's ``CheckResult``, the ``AuditReport``) has one
``Formats`` table naming its renderers as ``--format`` names them
(``findings.FINDINGS``, ``audit.AUDIT``). A new format is a renderer function
in the module of its report kind and an entry in that table; the command's
``--format`` choice lists it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

from patchkit.errors import BadInput

T = TypeVar("T")
Renderer = Callable[[T], str]


class Formats(Generic[T]):
    """The renderings of one kind of report, by name; ``default`` when none is asked for."""

    def __init__(self, renderers: Mapping[str, Renderer[T]], default: str) -> None:
        if default not in renderers:
            raise ValueError(f"default format {default!r} is not one of {sorted(renderers)}")
        self._renderers = dict(renderers)
        self.default = default

    @property
    def names(self) -> tuple[str, ...]:
        """The format names, as ``--format`` offers them."""
        return tuple(self._renderers)

    def render(self, report: T, name: str | None = None) -> str:
        """``report`` in the format ``name`` (default: ``default``)."""
        renderer = self._renderers.get(name or self.default)
        if renderer is None:
            raise BadInput(f"--format {name}: expected one of {', '.join(self.names)}")
        return renderer(report)
