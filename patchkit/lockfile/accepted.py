"""What a rebase committed broken (``--accept-broken``): the record an overlay and a series patch share.

``[patches.accepted]`` and ``[series.NAME.patches.accepted]`` hold the
reason given and each blocking problem as ``"<kind> <name>"``; ``check``
notes those that still hold (``patchkit.check.accepted``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from patchkit.lockfile.fields import Record, strings, text


@dataclass(frozen=True)
class Accepted:
    """A broken merge committed all the same (``rebase --accept-broken``): the reason, and what was broken.

    ``problems`` are ``"<kind> <name>"`` as the rebase's checks found them
    (``undefined-name logging``, ``unresolved-import vllm.utils.cdiv``,
    ``syntax``); ``check`` notes those that still hold in the file.
    """

    reason: str
    problems: tuple[str, ...] = ()


def _accepted_problem(problem: str) -> str:
    kind, _, name = problem.partition(" ")
    if not re.fullmatch(r"[a-z][a-z-]*", kind) or (name and not re.fullmatch(r"[\w.]+", name)):
        raise ValueError(f"'{problem}' is not '<kind> <name>' (undefined-name logging)")
    return problem


ACCEPTED = Record(
    Accepted,
    (
        text("reason", required=True),
        strings("problems", _accepted_problem, "must be an array of strings, got {got}"),
    ),
)
