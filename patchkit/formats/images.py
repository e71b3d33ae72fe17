"""Image reports: a resolved reference, a derived image built and pushed, a bundle pushed as an OCI artifact."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from patchkit.core.outcome import Outcome
    from patchkit.ship.artifact import Pushed
    from patchkit.ship.build import Built
    from patchkit.ship.operations import Resolution


def _json(doc: object) -> str:
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def resolved(found: Resolution, fmt: str) -> str:
    """``image resolve``: the reference's digest, and the platform's manifest digest when it differs."""
    if fmt == "json":
        return _json(found)
    out = f"{found['repository']}@{found['digest']}\n"
    if found["platform_digest"] != found["digest"]:
        out += f"  {found['platform']}: {found['platform_digest']}\n"
    return out


def pushed(p: Pushed, fmt: str) -> str:
    """``push``: the artifact's reference, its signature and attestation, and how referrers are found."""
    if fmt == "json":
        return _json(
            {
                "reference": p.reference,
                "digest": p.digest.text,
                "signature": p.signature.text,
                "attestation": p.attestation.text if p.attestation else None,
                "referrers_api": p.referrers_api,
            }
        )
    lines = [p.reference, f"  signature   {p.signature}"]
    if p.attestation is not None:
        lines.append(f"  attestation {p.attestation}")
    lines.append("  referrers: " + ("the registry's referrers API" if p.referrers_api else "the referrers tag"))
    return "".join(f"{line}\n" for line in lines)


def built(b: Built, outcome: Outcome, fmt: str) -> str:
    """``image build``: the derived image's digest, its layer and platforms, the upload, and what the lockfile got."""
    from patchkit.formats import changes

    if fmt == "json":
        return _json(
            {
                "digest": b.digest.text,
                "repository": b.repository,
                "tag": b.tag,
                "base_digest": b.base_digest.text,
                "layer_digest": b.layer.digest.text,
                "diff_id": b.layer.diff_id.text,
                "created": b.created,
                "platforms": {p: d.text for p, d in b.platforms},
                "uploaded": list(b.upload.uploaded),
                "mounted": list(b.upload.mounted),
                "present": list(b.upload.present),
                "bytes_uploaded": b.upload.bytes_sent,
                "written": outcome.written,
            }
        )
    up = b.upload
    lines = [
        f"{b.repository}@{b.digest}",
        f"  layer {b.layer.digest} ({b.layer.files} files, {b.layer.size} bytes)",
        *(f"  {p}: {d}" for p, d in b.platforms),
        f"  uploaded {len(up.uploaded)} blobs ({up.bytes_sent} bytes), "
        f"mounted {len(up.mounted)}, already there {len(up.present)}",
    ]
    return "".join(f"{line}\n" for line in lines) + changes.render(outcome, fmt, "derived image unchanged")
