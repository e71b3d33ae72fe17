"""Writing the lockfile in its canonical form.

``dumps`` writes fixed key order and fixed formatting, so the same content always
gives the same bytes and a re-lock without change is a no-op.
"""

from __future__ import annotations

from typing import Any

from patchkit.lockfile.model import HEADER, GitUpstream, Lockfile, Signing, inferred_source
from patchkit.series.model import dump as dump_series
from patchkit.values import (
    ContainerPath,
    Digest,
    RepoPath,
    Revision,
    Sha256,
    UpstreamPath,
)

# --------------------------------------------------------------------------- saving


def dumps(lock: Lockfile) -> str:  # noqa: C901 (over the ceiling already)
    """The canonical text of a lockfile: same content, same bytes.

    Tables and keys come in a fixed order, unset optional fields are left out,
    arrays of references are written one per line so a pull request shows
    each added or dropped reference on its own line.
    """
    import tomli_w

    doc: dict[str, Any] = {"schema": lock.schema}
    if lock.name is not None:
        doc["deployment"] = {"name": lock.name}
    if lock.images:
        doc["images"] = {
            img.name: _table(
                repository=img.repository,
                digest=img.digest,
                tag=img.tag,
                resolved_at=img.resolved_at,
                platform=img.platform,
                platform_digest=img.platform_digest,
                version=img.version,
                note=img.note,
            )
            for img in sorted(lock.images, key=lambda i: i.name)
        }
    if lock.model is not None:
        m = lock.model
        model = _table(repo=m.repo, revision=m.revision, ref=m.ref, resolved_at=m.resolved_at)
        if m.manifest is not None:
            model["manifest"] = _table(file=m.manifest.file, sha256=m.manifest.sha256)
        if m.files:
            model["files"] = [
                _table(path=f.path, size=f.size, sha256=f.sha256, blob=f.blob)
                for f in sorted(m.files, key=lambda f: f.path.path)
            ]
        doc["model"] = model
    if lock.upstreams:
        doc["upstreams"] = {
            u.name: _table(
                # Written except for a plain git upstream, and always when the
                # fields present would make the loader infer another source.
                source=None if u.source == inferred_source(u) == GitUpstream.source else u.source,
                git=u.git,
                commit=u.commit,
                wheel=u.wheel,
                wheel_sha256=u.wheel_sha256,
                wheel_file=u.wheel_file,
                dir=u.dir,
                dir_sha256=u.dir_sha256,
                image=u.image,
                image_digest=u.image_digest,
                image_tag=u.image_tag,
                prefix=u.prefix,
                platform=u.platform,
                version=u.version,
                note=u.note,
            )
            for u in sorted(lock.upstreams, key=lambda u: u.name)
        }
    if lock.patches:
        patches = []
        for p in lock.patches:
            t = _table(
                name=p.name,
                kind=p.kind.value,
                file=p.file,
                sha256=p.sha256,
                target=p.target,
                reason=p.reason,
                refs=[str(x) for x in p.refs] or None,
                drop_when=p.drop_when,
            )
            if p.base is not None:
                t["base"] = _table(
                    upstream=p.base.upstream,
                    commit=p.base.commit,
                    version=p.base.version,
                    path=p.base.path,
                    sha256=p.base.sha256,
                )
            if p.diff is not None:
                t["diff"] = _table(file=p.diff.file, sha256=p.diff.sha256)
            if p.origin is not None:
                o = p.origin
                t["origin"] = _table(
                    repository=o.repository, commit=o.commit, path=o.path, stated_in=list(o.stated_in) or None
                )
            patches.append(t)
        doc["patches"] = patches
    if lock.series:
        doc["series"] = dump_series(lock.series, _table)
    for key, items in (("tuning", lock.tuning), ("artifacts", lock.artifacts)):
        if items:
            doc[key] = [_table(name=a.name, file=a.file, sha256=a.sha256, target=a.target, note=a.note) for a in items]
    if lock.diffs:
        doc["diffs"] = [
            _table(
                file=d.file,
                sha256=d.sha256,
                patches=list(d.patches),
                against=None if d.against == "upstream" else d.against,
            )
            for d in lock.diffs
        ]
    if lock.refs:
        doc["refs"] = {
            s.ref.text: _table(
                state=s.state,
                kind=s.kind,
                title=s.title,
                checked_at=s.checked_at,
                merged_at=s.merged_at,
                merge_commit=s.merge_commit,
                head_commit=s.head_commit,
                etag=s.etag,
            )
            for s in sorted(lock.refs, key=lambda s: s.ref.text)
        }
    if lock.signing is not None:
        sg = lock.signing
        doc["signing"] = _table(
            allowed_signers=sg.allowed_signers,
            identity=sg.identity,
            files=None if sg.files == Signing.files else [str(f) for f in sg.files],
        )
    if lock.derived:
        doc["derived"] = {
            d.name: _table(
                base=d.base,
                repository=d.repository,
                tag=d.tag,
                digest=d.digest,
                base_digest=d.base_digest,
                layer_digest=d.layer_digest,
                diff_id=d.diff_id,
                created=d.created,
            )
            for d in sorted(lock.derived, key=lambda d: d.name)
        }
    return HEADER + "\n" + tomli_w.dumps(doc)


_VALUE_TYPES = (Digest, Revision, Sha256, ContainerPath, RepoPath, UpstreamPath)


def _table(**values: Any) -> dict[str, Any]:
    """A TOML table of the set values, in the order given; typed values as their text."""
    return {k: str(v) if isinstance(v, _VALUE_TYPES) else v for k, v in values.items() if v is not None}
