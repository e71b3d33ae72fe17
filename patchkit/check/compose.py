"""Rules about what is deployed: emitted compose files and Kubernetes manifests are exactly what ``patchkit emit``
writes, hand-kept compose files mount pins and serve the pinned model, derived images are built on the pinned base."""

from __future__ import annotations

from typing import TYPE_CHECKING

from patchkit.check.state import DEPLOY_CONFIG, State
from patchkit.core.findings import Finding
from patchkit.errors import BadInput
from patchkit.lockfile.model import GENERATED

if TYPE_CHECKING:
    from collections.abc import Sequence

    from patchkit.emit.config import DeployConfig
    from patchkit.importing import compose


def emitted(state: State) -> list[Finding]:
    """With a deploy.toml, every compose file must be exactly what ``patchkit emit`` writes."""
    if not state.has_deploy_config:
        return []
    from patchkit.emit.files import compose_texts, drifted

    try:
        if _builds_only(state):
            return []  # no [profiles]: no compose file to write
        files = compose_texts(state.lock, _config(state), validate_output=False)
    except BadInput as e:
        return [Finding("compose-unchecked", DEPLOY_CONFIG, None, f"cannot emit the compose files: {e}", e.hint)]
    return [
        Finding(
            "compose-drift",
            rel,
            None,
            "differs from what patchkit emit writes from lockfile.toml and deploy.toml "
            "(edited by hand, or the pins moved)",
            "regenerate it: patchkit emit (edit deploy.toml for service settings)",
        )
        for rel in drifted(files, state.view.read)
    ]


def kubernetes(state: State) -> list[Finding]:
    """With a [kubernetes] table in deploy.toml, the manifests must be exactly what emit writes."""
    if not state.has_deploy_config:
        return []
    from patchkit.emit.files import drifted
    from patchkit.emit.kubernetes import manifest_texts

    try:
        config = _config(state)
    except BadInput:
        return []  # emitted() reports a deploy.toml that cannot be read
    if config.kubernetes is None:
        return []
    try:
        files = manifest_texts(state.lock, config, validate_output=False)
    except BadInput as e:
        return [
            Finding("kubernetes-unchecked", DEPLOY_CONFIG, None, f"cannot emit the Kubernetes manifests: {e}", e.hint)
        ]
    return [
        Finding(
            "kubernetes-drift",
            rel,
            None,
            "differs from what patchkit emit --target kubernetes writes from lockfile.toml and deploy.toml "
            "(edited by hand, or the pins moved)",
            "regenerate it: patchkit emit --target kubernetes",
        )
        for rel in drifted(files, state.view.read)
    ]


def derived_stale(state: State) -> list[Finding]:
    """Each derived image must be built on the base digest the lockfile pins now (offline)."""
    if not state.lock.derived:
        return []
    from patchkit.ship.verify import stale_findings

    return stale_findings(state.lock, state.index.line_of)


def _builds_only(state: State) -> bool:
    """Whether deploy.toml has no ``[profiles]`` (only what ``image build`` reads); ``BadInput`` if that is wrong."""
    from patchkit.emit.config import loads_build_config

    return loads_build_config(_text(state), DEPLOY_CONFIG).deploy is None


def _emits(state: State) -> bool:
    """Whether deploy.toml writes the compose files (it has [profiles]; a broken one is taken to)."""
    if not state.has_deploy_config:
        return False
    try:
        return not _builds_only(state)
    except BadInput:
        return True  # emitted() reports it


def _config(state: State) -> DeployConfig:
    """deploy.toml, read strictly; ``BadInput`` when it cannot be read or is wrong."""
    from patchkit.emit.config import loads_config

    return loads_config(_text(state), DEPLOY_CONFIG)


def _text(state: State) -> str:
    """deploy.toml's text; ``BadInput`` when it is not a readable UTF-8 file of the repository."""
    data = state.view.read(DEPLOY_CONFIG)
    if data is None:
        raise BadInput(f"{DEPLOY_CONFIG}: cannot read (not a regular file inside the repository)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadInput(f"{DEPLOY_CONFIG}: cannot read ({e})", f"fix {DEPLOY_CONFIG}'s encoding (UTF-8)") from e
    return text


def mounts(state: State) -> list[Finding]:
    """Hand-kept compose files (no deploy.toml that emits them): every mount's source exists and is pinned there."""
    if _emits(state) or not state.lock.artifacts:
        return []  # (a compose file is pinned as an artifact; no artifact: no YAML parser to import)
    from patchkit.importing import compose

    lock = state.lock
    compose_files = [a for a in lock.artifacts if compose.COMPOSE_NAMES.fullmatch(a.file.pure.name)]
    if not compose_files:
        return []
    pinned: dict[str, str | None] = {str(p.file): str(p.target) for p in lock.patches if p.file}
    for a in (*lock.tuning, *lock.artifacts):
        pinned[str(a.file)] = str(a.target) if a.target else None
    out: list[Finding] = []
    for art in compose_files:
        rel = str(art.file)
        data = state.view.read(rel)
        try:
            if data is None:
                continue  # reported by the file checks
            parsed = compose.read(rel, data.decode("utf-8"))
        except UnicodeDecodeError:
            continue  # reported by the file checks
        except BadInput as e:
            out.append(Finding("compose-invalid", rel, None, e.message, e.hint))
            continue
        for m in parsed.mounts:
            out += _one_mount(state, rel, m, _placed_too(parsed.mounts, m, pinned))
    return out


def _placed_too(
    mounts: Sequence[compose.Mount], m: compose.Mount, pinned: dict[str, str | None]
) -> dict[str, str | None]:
    """The pins, less the target of each file ``m`` puts elsewhere while its service also mounts it at its pinned
    target (a script mounted alone and in its directory): the container has it at both, as import pinned it."""
    from patchkit.importing import compose

    out = dict(pinned)
    for file, target in pinned.items():
        at = m.places(file)
        if target is not None and at not in (None, target) and compose.also_placed(mounts, m, file, target):
            out[file] = None
    return out


def _one_mount(state: State, rel: str, m: compose.Mount, pinned: dict[str, str | None]) -> list[Finding]:
    """Everything wrong with one mount: through a link (only that: nothing is pinned through one), else its file or
    directory against the pins."""
    linked = _through_links(state, rel, m)
    if linked:
        return linked
    found = _mount(state, rel, m, pinned)
    return ([found] if found is not None else []) + _directory_targets(state, rel, m, pinned)


def _through_links(state: State, rel: str, m: compose.Mount) -> list[Finding]:
    """A mount whose source goes through a symlink (a directory on the way, or one inside a mounted directory).

    As import reports it (``mount-symlink``): nothing is pinned through a link,
    so what the container gets there is unchecked. A source that is itself a
    symlink is ``mount-missing``, as import says.
    """
    src = m.repo_source
    if src is None or m.outside:
        return []
    parts = src.split("/")
    on_the_way = next((p for k in range(1, len(parts)) if state.view.kind(p := "/".join(parts[:k])) == "symlink"), None)
    links = [on_the_way] if on_the_way is not None else _links_below(state, src)
    return [_linked(state, rel, m, link) for link in links]


def _links_below(state: State, src: str) -> list[str]:
    """The symlinks below a mounted directory of the repository, in walk order (import's order)."""
    from patchkit.check.state import RepoView

    if state.view.kind(src) != "dir" or not isinstance(state.view, RepoView):
        return []
    return state.view.links_below(src)


def _linked(state: State, rel: str, m: compose.Mount, link: str) -> Finding:
    from patchkit.check.state import RepoView

    to, inside = state.view.link_to(link) if isinstance(state.view, RepoView) else ("?", False)
    return Finding(
        "mount-symlink",
        rel,
        m.line,
        f"mount source {m.source} goes through the symlink {link} (to {to}, {'inside' if inside else 'outside'} "
        "the repository); nothing is pinned through a link",
        "commit the files themselves in place of the link, or remove the mount",
    )


def _directory_targets(state: State, rel: str, m: compose.Mount, pinned: dict[str, str | None]) -> list[Finding]:
    """A mounted directory puts each pinned file below it at its pinned target (as a file mount, ``mount-target``),
    and no file below it where the lockfile pins another (``mount-unpinned``).

    Import pins a directory's files at the targets its first mount gives
    them (import's ``mount-conflict`` otherwise): another profile mounting the
    directory elsewhere mounts each of them somewhere else than pinned, and
    one mounting another directory at the same place puts unpinned files
    where the pinned ones should be.
    """
    src = m.repo_source
    if src is None or m.outside or state.view.kind(src) != "dir":
        return []
    prefix, into = src.rstrip("/") + "/", m.target.rstrip("/") + "/"
    out = []
    for file, target in pinned.items():
        want = into + file[len(prefix) :]
        if file.startswith(prefix) and target is not None and target != want:
            out.append(
                Finding(
                    "mount-target",
                    rel,
                    m.line,
                    f"mounts {file} at {want} (in {m.source}), but the lockfile pins it for {target}",
                    "make the compose mount and the lockfile target agree",
                )
            )
    return out + _taken_targets(state, rel, m, pinned)


def _taken_targets(state: State, rel: str, m: compose.Mount, pinned: dict[str, str | None]) -> list[Finding]:
    """Each unpinned file below a mounted directory that lands where the lockfile pins another file."""
    from patchkit.check.state import RepoView

    if not isinstance(state.view, RepoView):
        return []
    src = str(m.repo_source).rstrip("/")
    owner = {target: file for file, target in pinned.items() if target is not None}
    out = []
    for file in state.view.files_below(src):
        want = m.target.rstrip("/") + "/" + file[len(src) + 1 :]
        if file not in pinned and want in owner:
            out.append(
                Finding(
                    "mount-unpinned",
                    rel,
                    m.line,
                    f"mounts {file} (in {m.source}) at {want}, where the lockfile pins {owner[want]}: "
                    "only one file can be there",
                    "give each profile the same file, or separate targets",
                )
            )
    return out


def _mount(state: State, rel: str, m: compose.Mount, pinned: dict[str, str | None]) -> Finding | None:
    """What is wrong with one mount of a hand-kept compose file, if anything."""
    src = m.repo_source
    if src is None:
        return None
    if m.outside:
        return Finding(
            "mount-outside",
            rel,
            m.line,
            f"mounts {m.source}, which is outside the repository: nothing pins it",
            "move the file into the repository and pin it, or mount it from an absolute host path",
        )
    kind = state.view.kind(src)
    if src in GENERATED and kind == "file":
        return None  # SHA256SUMS, which patchkit writes from the lockfile: mounting it is fine, pinning it impossible
    if kind == "missing" and (rule := state.view.ignored_by(src)):
        return Finding(
            "mount-ignored",
            rel,
            m.line,
            f"mounts {m.source} at {m.target}; {src} does not exist and {rule} ignores it: "
            "it is meant to be absent from the repository (created at run time or on the host)",
            severity="note",
        )
    if kind in ("missing", "symlink"):
        return Finding(
            "mount-missing",
            rel,
            m.line,
            f"mounts {m.source} at {m.target}, but {src} does not exist",
            f"restore the file (git log -- {src}) or remove the mount",
        )
    if kind == "file" and src not in pinned:
        return Finding(
            "mount-unpinned",
            rel,
            m.line,
            f"mounts {src}, which the lockfile does not pin (so SHA256SUMS does not list it)",
            f"pin it: patchkit add {src} --target {m.target}",
        )
    if kind == "file" and pinned[src] not in (None, m.target):
        return Finding(
            "mount-target",
            rel,
            m.line,
            f"mounts {src} at {m.target}, but the lockfile pins it for {pinned[src]}",
            "make the compose mount and the lockfile target agree",
        )
    return None


def models(state: State) -> list[Finding]:
    """Each model a hand-kept compose file of an imported repository serves: at a full commit, the pinned one.

    ``model-unpinned`` (a path without a full commit) and ``model-conflict``
    (another model than the lockfile's ``[model]``) as import reports them,
    read from the same files while they hold.
    """
    from patchkit.check.build_steps import imported
    from patchkit.core.values import Revision

    if not imported(state.lock):
        return []
    pinned = state.lock.model
    out = []
    for use in (u for cf in state.hand_composes for u in cf.models):
        try:
            revision = Revision(use.revision)
        except ValueError as e:
            out.append(Finding("model-unpinned", use.compose, use.line, f"model {use.repo}: {e}"))
            continue
        if pinned is not None and (use.repo, revision) != (pinned.repo, pinned.revision):
            out.append(
                Finding(
                    "model-conflict",
                    use.compose,
                    use.line,
                    f"uses {use.repo}@{revision.short}, but the lockfile pins {pinned.repo}@{pinned.revision.short}",
                    "serve the pinned model, or pin this one (edit [model], then patchkit lock)",
                )
            )
    return out
