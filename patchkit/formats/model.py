"""Model reports: the local cache verified against the pinned revision, a model signature verified."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from patchkit.lockfile.model import Model
    from patchkit.model.verify import VerifyResult


def verified(result: VerifyResult, fmt: str) -> str:
    """``model verify`` and ``model fetch``: each problem, then the verdict with what was hashed or trusted."""
    if fmt == "json":
        return json.dumps(result.as_dict(), indent=2, sort_keys=True) + "\n"
    lines = [f"{p.path}: {p.message}" for p in result.problems]
    gb = (result.bytes_hashed + result.bytes_trusted) / 1e9
    trusted = (
        f" ({result.bytes_trusted / 1e9:.2f} GB unchanged since the last verification)" if result.bytes_trusted else ""
    )
    if result.ok:
        lines.append(f"model verify: ok: {result.files} files, {gb:.2f} GB{trusted} in {result.snapshot}")
    else:
        lines.append(f"model verify: FAILED: {len(result.problems)} problem(s) in {result.cache}; fix: {result.fix}")
    return "".join(f"{line}\n" for line in lines)


def signature_verified(signature: Path, snapshot: Path, pinned: Model, fmt: str) -> str:
    """``model verify-signature``: which signature verified over which revision."""
    if fmt == "json":
        return json.dumps({"ok": True, "signature": str(signature), "snapshot": str(snapshot)}, sort_keys=True) + "\n"
    return f"{signature}: verified over {pinned.repo}@{pinned.revision.short}\n"
