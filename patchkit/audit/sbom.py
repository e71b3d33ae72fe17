"""The deployment as a CycloneDX 1.6 SBOM: images, model, upstreams, and every patch with its pedigree.

Compliance tools (Dependency-Track, the CycloneDX CLI, scanners) read
CycloneDX; what they cannot read from an image alone is what patchkit knows:
which upstream files the deployment replaces, against which base, with which
diff, and which upstream issues and pull requests each patch answers. Those
go in each patched component's ``pedigree`` as CycloneDX means it:
``ancestors`` is the upstream file (its package's purl with the file as
subpath, and the base's sha256), ``patches`` the diff and the references it
resolves.

The document is built with cyclonedx-python-lib's model and serializer and
checked by its strict JSON-schema validator before anyone sees it, so a
document patchkit writes is one the schema accepts. Nothing is fetched:
every value comes from the lockfile and the files it pins.

Mapping, for the reader of a BOM:

- ``[images.*]`` and ``[[derived]]``: ``container`` components, purl
  ``pkg:oci/NAME@sha256:…?repository_url=REGISTRY/PATH&tag=TAG``.
- ``[model]``: a ``machine-learning-model`` component,
  ``pkg:huggingface/ORG/NAME@REVISION``.
- ``[upstreams.*]``: ``pkg:pypi/PROJECT@VERSION`` (wheels, with the wheel's
  sha256), ``pkg:github/OWNER/REPO@COMMIT`` (other git hosts:
  ``pkg:generic`` with ``vcs_url``), ``pkg:oci`` (images).
- ``[[patches]]``: ``file`` components named by their target path. The patch
  type is ``backport`` when a reference is a pull request the recorded
  states (``patchkit refs --refresh``) say is merged, ``monkey`` for a
  transformer (it rewrites upstream code as the container starts), and
  ``unofficial`` otherwise. A module has no ancestor: upstream has no such
  file. Every reference is listed as a resolved issue of type ``defect``:
  the lockfile does not say whether an issue is a defect or an enhancement,
  and ``defect`` is the reading that asks a reviewer to look.
- Recorded audits (``audits.toml``): each patch's status per required
  criterion as a property ``patchkit:review:CRITERION`` (a series patch's:
  ``patchkit:review:PATCH:CRITERION`` on its series), e.g. ``audited
  (alice@example.com 2026-12-03)``.
- Series: one component per series (the upstream as the series patches it),
  each patch with its diff and references; CycloneDX keeps patches as a
  set, so the order they apply in is said in the pedigree's ``notes``.
- ``[[tuning]]`` and ``[[artifacts]]``: ``data`` and ``file`` components with
  their sha256 and target.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING

from patchkit.lockfile.model import (
    Artifact,
    Base,
    GitUpstream,
    Image,
    ImageUpstream,
    Lockfile,
    Model,
    Patch,
    PatchKind,
    Upstream,
    WheelUpstream,
)
from patchkit.lockfile.series import Series
from patchkit.oci.ref import ImageRef
from patchkit.store.repo import Repo

if TYPE_CHECKING:
    from cyclonedx.model import HashType
    from cyclonedx.model.bom import Bom
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.model.component import Patch as CdxPatch
    from cyclonedx.model.issue import IssueType
    from packageurl import PackageURL

#: The CycloneDX version written (the schema `render` validates against).
SPEC_VERSION = "1.6"

#: A lockfile's references read as GitHub issues and pull requests (``owner/repo#N``).
_GITHUB = "https://github.com"


def build(repo: Repo, lock: Lockfile, lock_bytes: bytes, now: dt.datetime) -> Bom:
    """The SBOM of ``repo``'s deployment as pinned in ``lock`` (whose bytes are ``lock_bytes``), dated ``now``.

    Raises ``BadInput`` naming the file when a pinned diff cannot be read
    (a link, a missing file): the SBOM would otherwise claim a diff it lacks.
    """
    from cyclonedx.model import HashAlgorithm, HashType, Property
    from cyclonedx.model.bom import Bom, BomMetaData
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.model.dependency import Dependency
    from cyclonedx.model.tool import ToolRepository

    from patchkit import __version__

    lock_sha256 = hashlib.sha256(lock_bytes).hexdigest()
    root = Component(
        type=ComponentType.APPLICATION,
        name=lock.name or repo.root.name,
        bom_ref="deployment",
        hashes=[HashType(alg=HashAlgorithm.SHA_256, content=lock_sha256)],
        properties=[Property(name="patchkit:lockfile", value="lockfile.toml")],
    )
    upstreams = {u.name: _upstream(u) for u in lock.upstreams}
    merged = _merged_prs(lock)
    components: list[Component] = [_image(i) for i in lock.images]
    components += [_derived(d.name, d.repository, str(d.digest), d.tag) for d in lock.derived]
    if lock.model is not None:
        components.append(_model(lock.model))
    components += upstreams.values()
    components += [_patch(repo, lock, p, upstreams, merged) for p in lock.patches]
    components += [_series(repo, s, upstreams, merged) for s in lock.series]
    components += [_artifact(a, ComponentType.DATA) for a in lock.tuning]
    components += [_artifact(a, ComponentType.FILE) for a in lock.artifacts]
    _add_reviews(repo, lock, {c.bom_ref.value: c for c in components if c.bom_ref.value}, now)
    tools = ToolRepository(components=[Component(type=ComponentType.APPLICATION, name="patchkit", version=__version__)])
    bom = Bom(
        serial_number=uuid.uuid5(uuid.NAMESPACE_URL, f"urn:patchkit:lockfile:{lock_sha256}"),
        metadata=BomMetaData(component=root, timestamp=now, tools=tools),
        components=components,
    )
    bom.dependencies.add(Dependency(ref=root.bom_ref, dependencies=[Dependency(ref=c.bom_ref) for c in components]))
    return bom


def _add_reviews(repo: Repo, lock: Lockfile, by_ref: dict[str, Component], now: dt.datetime) -> None:
    """Each patch's recorded reviews (audits.toml) as properties of its component: ``patchkit:review:CRITERION``.

    A series patch's go on its series' component, named
    ``patchkit:review:PATCH:CRITERION``. The value says the status and who
    reviewed when, as ``patchkit audit status`` does.
    """
    from cyclonedx.model import Property

    from patchkit.signing import certify

    audits = certify.load(repo)
    if audits is None:
        return
    found, _ = certify.statuses(repo, lock, audits, now)
    for s in found:
        series, _, patch = s.patch.rpartition("/")
        component = by_ref.get(f"series:{series}" if series else f"patch:{s.patch}")
        if component is None:
            continue
        who = "; ".join(f"{a.who} {a.date}{' (delta)' if a.delta_from else ''}" for a in s.audits)
        name = f"patchkit:review:{patch}:{s.criterion}" if series else f"patchkit:review:{s.criterion}"
        component.properties.add(Property(name=name, value=f"{s.coverage.value}{f' ({who})' if who else ''}"))


def render(bom: Bom) -> str:
    """``bom`` as CycloneDX 1.6 JSON, checked by cyclonedx-python-lib's strict schema validator."""
    from cyclonedx.output.json import JsonV1Dot6
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    text = JsonV1Dot6(bom).output_as_string(indent=2) + "\n"
    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text)
    if error is not None:
        raise AssertionError(f"patchkit wrote a CycloneDX document its schema refuses: {error}")
    return text


def _sha256(hex_digest: str) -> list[HashType]:
    from cyclonedx.model import HashAlgorithm, HashType

    return [HashType(alg=HashAlgorithm.SHA_256, content=hex_digest)]


def _oci_purl(repository: str, digest: str, tag: str | None) -> PackageURL:
    """``pkg:oci`` as the purl spec writes it: the last path segment as name, the registry path as repository_url."""
    from packageurl import PackageURL

    ref = ImageRef.parse(repository)
    host = "docker.io" if ref.registry == "registry-1.docker.io" else ref.registry
    qualifiers = {"repository_url": f"{host}/{ref.repository}"}
    if tag:
        qualifiers["tag"] = tag
    return PackageURL(type="oci", name=ref.repository.rsplit("/", 1)[-1].lower(), version=digest, qualifiers=qualifiers)


def _image(i: Image) -> Component:
    from cyclonedx.model import Property

    c = _derived(i.name, i.repository, str(i.digest), i.tag)
    if i.version:
        c.properties.add(Property(name="patchkit:runtime-version", value=i.version))
    return c


def _derived(name: str, repository: str, digest: str, tag: str | None) -> Component:
    from cyclonedx.model.component import Component, ComponentType

    return Component(
        type=ComponentType.CONTAINER,
        name=repository,
        version=digest,
        bom_ref=f"image:{name}",
        hashes=_sha256(digest.removeprefix("sha256:")),
        purl=_oci_purl(repository, digest, tag),
    )


def _model(m: Model) -> Component:
    from cyclonedx.model.component import Component, ComponentType
    from packageurl import PackageURL

    org, _, name = m.repo.rpartition("/")
    revision = str(m.revision)
    return Component(
        type=ComponentType.MACHINE_LEARNING_MODEL,
        group=org or None,
        name=name,
        version=revision,
        bom_ref="model",
        purl=PackageURL(type="huggingface", namespace=org or None, name=name, version=revision.lower()),
    )


def _upstream(u: Upstream) -> Component:
    from cyclonedx.model.component import Component, ComponentType
    from packageurl import PackageURL

    ref = f"upstream:{u.name}"
    if isinstance(u, WheelUpstream) and u.wheel_project and u.wheel_version:
        purl = PackageURL(
            type="pypi",
            name=u.wheel_project.lower().replace("_", "-"),
            version=u.wheel_version,
            qualifiers={"file_name": u.wheel_file} if u.wheel_file else None,
        )
        hashes = _sha256(str(u.wheel_sha256)) if u.wheel_sha256 else []
        return Component(
            type=ComponentType.LIBRARY,
            name=u.wheel_project,
            version=u.wheel_version,
            bom_ref=ref,
            purl=purl,
            hashes=hashes,
        )
    if isinstance(u, ImageUpstream) and u.image and u.image_digest:
        digest = str(u.image_digest)
        return Component(
            type=ComponentType.CONTAINER,
            name=u.image,
            version=digest,
            bom_ref=ref,
            purl=_oci_purl(u.image, digest, u.image_tag),
        )
    if isinstance(u, GitUpstream) and u.git:
        return _git_upstream(u, ref)
    return Component(type=ComponentType.LIBRARY, name=u.name, version=u.version, bom_ref=ref, description=u.note)


def _git_upstream(u: GitUpstream, ref: str) -> Component:
    from cyclonedx.model.component import Component, ComponentType
    from packageurl import PackageURL

    from patchkit.audit.report import github_repo

    commit = str(u.commit) if u.commit else None
    owner_repo = github_repo(u.git)
    if owner_repo:
        owner, name = owner_repo.split("/", 1)
        purl = PackageURL(type="github", namespace=owner, name=name, version=commit)
    else:
        name = (u.git or u.name).rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")
        vcs = f"git+{u.git}@{commit}" if commit else f"git+{u.git}"
        purl = PackageURL(type="generic", name=name, version=commit, qualifiers={"vcs_url": vcs})
    return Component(type=ComponentType.LIBRARY, name=name, version=commit or u.version, bom_ref=ref, purl=purl)


def _merged_prs(lock: Lockfile) -> set[str]:
    """The references the recorded states call merged pull requests."""
    return {str(s.ref) for s in lock.refs if s.state == "merged"}


def _issues(refs: Iterable[object]) -> list[IssueType]:
    from cyclonedx.model import XsUri
    from cyclonedx.model.issue import IssueClassification, IssueType, IssueTypeSource

    out = []
    for r in refs:
        text = str(r)
        if text.startswith("http"):
            url = text
            source = IssueTypeSource(name="GitHub", url=XsUri(_GITHUB))
        else:
            owner_repo, _, number = text.partition("#")
            url = f"{_GITHUB}/{owner_repo}/issues/{number}"  # GitHub redirects an issue URL of a PR to the PR
            source = IssueTypeSource(name="GitHub", url=XsUri(f"{_GITHUB}/{owner_repo}"))
        out.append(IssueType(type=IssueClassification.DEFECT, id=text, source=source, references=[XsUri(url)]))
    return out


def _cdx_patch(kind: PatchKind | None, diff: bytes | None, refs: tuple[object, ...], merged: set[str]) -> CdxPatch:
    from cyclonedx.model import AttachedText
    from cyclonedx.model.component import Diff, PatchClassification
    from cyclonedx.model.component import Patch as CdxPatchType

    if kind is PatchKind.TRANSFORMER:
        classification = PatchClassification.MONKEY
    elif any(str(r) in merged for r in refs):
        classification = PatchClassification.BACKPORT
    else:
        classification = PatchClassification.UNOFFICIAL
    text = None
    if diff is not None:
        text = Diff(text=AttachedText(content=diff.decode("utf-8", "replace"), content_type="text/x-diff"))
    return CdxPatchType(type=classification, diff=text, resolves=_issues(refs))


def _patch(repo: Repo, lock: Lockfile, p: Patch, upstreams: dict[str, Component], merged: set[str]) -> Component:
    from cyclonedx.model.component import Component, ComponentType, Pedigree

    diff = repo.read_pinned(p.diff.file, f"the diff of patch '{p.name}'") if p.diff is not None else None
    ancestors = [_ancestor(p.name, p.base, upstreams)] if p.base is not None else []
    notes = {
        PatchKind.MODULE: "a new module: upstream has no such file",
        PatchKind.TRANSFORMER: "a transformer: rewrites upstream files as the container starts",
    }.get(p.kind)
    return Component(
        type=ComponentType.FILE,
        name=str(p.target),
        bom_ref=f"patch:{p.name}",
        description=p.reason,
        hashes=_sha256(str(p.sha256)),
        pedigree=Pedigree(
            ancestors=ancestors,
            patches=[_cdx_patch(p.kind, diff, p.refs, merged)] if p.kind is not PatchKind.MODULE or p.refs else [],
            notes=notes,
        ),
    )


def _ancestor(name: str, b: Base, upstreams: dict[str, Component]) -> Component:
    """The upstream file patch ``name`` replaces: its path, sha256, and its package's purl with the path as subpath."""
    from cyclonedx.model.component import Component, ComponentType
    from packageurl import PackageURL

    package = upstreams.get(b.upstream)
    purl = None
    if package is not None and package.purl is not None:
        pu = package.purl
        version = str(b.commit) if b.commit else (b.version or pu.version)
        purl = PackageURL(
            type=pu.type,
            namespace=pu.namespace,
            name=pu.name,
            version=version,
            qualifiers=pu.qualifiers,
            subpath=str(b.path),
        )
    return Component(
        type=ComponentType.FILE,
        name=str(b.path),
        version=str(b.commit) if b.commit else b.version,
        bom_ref=f"base:{name}",
        hashes=_sha256(str(b.sha256)),
        purl=purl,
    )


def _series(repo: Repo, s: Series, upstreams: dict[str, Component], merged: set[str]) -> Component:
    from cyclonedx.model.component import Component, ComponentType, Pedigree

    base = upstreams.get(s.upstream)
    patches = [
        _cdx_patch(None, repo.read_pinned(sp.file, f"patch '{sp.name}' of series '{s.name}'"), sp.refs, merged)
        for sp in s.patches
    ]
    name = base.name if base is not None else s.upstream
    return Component(
        type=ComponentType.LIBRARY,
        name=name,
        version=str(s.commit) if s.commit else s.version,
        bom_ref=f"series:{s.name}",
        description=f"{s.upstream} with the {len(s.patches)} patches of series '{s.name}'",
        pedigree=Pedigree(ancestors=[_copy_of(base)] if base is not None else [], patches=patches, notes=_order(s)),
    )


def _order(s: Series) -> str:
    """The order the series applies in, said in words: CycloneDX keeps a component's patches as an unordered set."""
    steps = "; ".join(f"{i}. {sp.name} ({sp.file})" for i, sp in enumerate(s.patches, 1))
    return f"applies in this order: {steps}"


def _copy_of(c: Component) -> Component:
    """A component as an ancestor: the same identity under its own bom-ref (a bom-ref is unique in a document)."""
    from cyclonedx.model.component import Component

    return Component(type=c.type, name=c.name, version=c.version, purl=c.purl, bom_ref=f"{c.bom_ref}:ancestor")


def _artifact(a: Artifact, kind: ComponentType) -> Component:
    from cyclonedx.model import Property
    from cyclonedx.model.component import Component

    props = [Property(name="patchkit:target", value=str(a.target))] if a.target else []
    return Component(
        type=kind,
        name=str(a.file),
        bom_ref=f"file:{a.name}",
        hashes=_sha256(str(a.sha256)),
        description=a.note,
        properties=props,
    )
