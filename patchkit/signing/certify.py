"""Recorded audits: who reviewed which patch, at which bytes, for which criteria, signed.

An auditor's review is worth keeping only if it says exactly what was
reviewed and cannot be forged. ``audits.toml`` (at the top of the
repository, reviewed and committed like the lockfile) holds the criteria,
the policy (which criteria every patch needs) and one ``[[audit]]`` entry
per review: the patch, the sha256 of the text reviewed (an overlay's diff
to its base; a module's, transformer's or series patch's whole file), the
base and file it applied to, the criteria, the date, the signer's
principal, and an OpenSSH signature (namespace ``patchkit-audit``) over the
entry's *statement*: its fields as canonical JSON, which ``patchkit audit
statement`` prints so that stock ``ssh-keygen -Y verify`` checks it.

Each text reviewed is kept under ``audits/reviewed/<sha256>`` so that, after
a rebase, the change since the review can be shown offline: that is what a
**delta audit** (``certify --delta``) reviews, and it chains to the review
it starts from. A pure move (only the upstream context changed, the
interdiff empty) carries the audit over, and says so.

This module is the core: reading and writing the file, statements,
signatures, and each patch's status. ``patchkit check`` reports the statuses
when ``audits.toml`` exists (``findings``); the CLI is ``patchkit audit
certify|status|statement``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, NotRequired, TypedDict

from patchkit.core.findings import Finding
from patchkit.errors import BadInput, Problem
from patchkit.lockfile.model import Lockfile, PatchKind
from patchkit.lockfile.tomlpos import parse as parse_toml
from patchkit.sources.context import Context
from patchkit.store.repo import Escape, Repo

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from patchkit.signing.signers import AllowedSigner

#: The repository file that holds the criteria, the policy and the audits.
AUDITS_FILE = "audits.toml"
#: Where each reviewed text is kept, named by its sha256.
REVIEWED_DIR = "audits/reviewed"
#: Where the copies of other repositories' audits files are kept.
IMPORTED_DIR = "audits/imported"
#: The SSHSIG namespace of an audit's signature: an allowed-signers line must allow it.
NAMESPACE = "patchkit-audit"

#: The criteria a new audits.toml defines: cargo-vet's two, the first implying the second.


class Criterion(TypedDict):
    """One ``[criteria.NAME]`` table of audits.toml."""

    description: str
    implies: NotRequired[list[str]]


DEFAULT_CRITERIA: dict[str, Criterion] = {
    "safe-to-deploy": {
        "description": "reviewed in full: the patch does what its reason says, and nothing an attacker could use",
        "implies": ["safe-to-run"],
    },
    "safe-to-run": {"description": "reviewed enough to run in a test or staging deployment"},
}
_FIELDS = ("patch", "criteria", "reviewed_sha256", "delta_from", "applies_to", "who", "date", "notes")


class AuditsError(BadInput):
    """audits.toml cannot be read: one line, with the entry and field."""


@dataclass(frozen=True)
class Audit:
    """One recorded review; ``statement`` is what its signature covers."""

    index: int
    patch: str
    criteria: tuple[str, ...]
    reviewed_sha256: str
    who: str
    date: str
    signature: str
    applies_to: str = ""
    delta_from: str | None = None
    notes: str | None = None
    source: str | None = None  # the import it came from (``[imports.NAME]``); None for this repository's own

    def fields(self) -> dict[str, object]:
        """The signed fields, as written (``delta_from``/``notes`` only when set)."""
        out: dict[str, object] = {
            "patch": self.patch,
            "criteria": list(self.criteria),
            "reviewed_sha256": self.reviewed_sha256,
            "applies_to": self.applies_to,
            "who": self.who,
            "date": self.date,
        }
        if self.delta_from is not None:
            out["delta_from"] = self.delta_from
        if self.notes is not None:
            out["notes"] = self.notes
        return out

    @property
    def statement(self) -> bytes:
        return statement(self.fields())


@dataclass(frozen=True)
class Import:
    """Another repository's audits, copied in and pinned: ``[imports.NAME]``.

    ``file`` is the copy in this repository (pinned by ``sha256``), taken
    from ``source`` at ``rev``; its audits count only when signed, by a key of
    this repository's allowed signers, as a principal ``trust`` names
    (OpenSSH patterns, as allowed-signers lines use).
    """

    name: str
    source: str
    rev: str
    file: str
    sha256: str
    trust: tuple[str, ...]

    def fields(self) -> dict[str, object]:
        return {
            "source": self.source,
            "rev": self.rev,
            "file": self.file,
            "sha256": self.sha256,
            "trust": list(self.trust),
        }


@dataclass(frozen=True)
class Audits:
    """The whole of audits.toml."""

    criteria: dict[str, tuple[str, ...]]  # name -> the criteria it implies
    descriptions: dict[str, str]
    required: tuple[str, ...]
    audits: tuple[Audit, ...] = ()
    imports: tuple[Import, ...] = ()
    raw: Mapping[str, object] = field(default_factory=dict)

    def closure(self, names: Iterable[str]) -> set[str]:
        """``names`` and every criterion they imply."""
        out: set[str] = set()
        todo = list(names)
        while todo:
            name = todo.pop()
            if name not in out:
                out.add(name)
                todo += self.criteria.get(name, ())
        return out


def statement(fields: Mapping[str, object]) -> bytes:
    """The bytes an audit's signature covers: its fields as canonical JSON (sorted keys, ASCII), one line."""
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode() + b"\n"


def _fail(where: str, what: str, fix: str | None = None) -> AuditsError:
    return AuditsError(f"{AUDITS_FILE}: {where}: {what}", fix or "see docs/audit.md (Recorded audits)")


def _text(entry: Mapping[str, object], key: str, where: str, *, required: bool = True) -> str | None:
    value = entry.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value.strip()):
        raise _fail(f"{where}.{key}", "must be a non-empty string")
    return value


def _sha(entry: Mapping[str, object], key: str, where: str, *, required: bool = True) -> str | None:
    value = _text(entry, key, where, required=required)
    if value is not None and (len(value) != 64 or any(c not in "0123456789abcdef" for c in value)):
        raise _fail(f"{where}.{key}", f"'{value}' is not a sha256 (64 lowercase hex digits)")
    return value


def _names(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise _fail(where, "must be an array of criterion names")
    return tuple(value)


def _audit(i: int, entry: object, criteria: dict[str, tuple[str, ...]]) -> Audit:
    where = f"audit[{i}]"
    if not isinstance(entry, dict):
        raise _fail(where, "must be a table")
    unknown = sorted(set(entry) - {*_FIELDS, "signature"})
    if unknown:
        raise _fail(f"{where}.{unknown[0]}", "unknown field")
    names = _names(entry.get("criteria"), f"{where}.criteria")
    for name in names:
        if name not in criteria:
            raise _fail(f"{where}.criteria", f"unknown criterion '{name}'", f"define [criteria.{name}]")
    return Audit(
        index=i,
        patch=str(_text(entry, "patch", where)),
        criteria=names,
        reviewed_sha256=str(_sha(entry, "reviewed_sha256", where)),
        who=str(_text(entry, "who", where)),
        date=str(_text(entry, "date", where)),
        signature=str(_text(entry, "signature", where)),
        applies_to=_text(entry, "applies_to", where, required=False) or "",
        delta_from=_sha(entry, "delta_from", where, required=False),
        notes=_text(entry, "notes", where, required=False),
    )


def _criteria(doc: Mapping[str, object]) -> tuple[dict[str, tuple[str, ...]], dict[str, str]]:
    table = doc.get("criteria", DEFAULT_CRITERIA)
    if not isinstance(table, dict) or not table:
        raise _fail("criteria", "must be a table of criteria ([criteria.NAME] with a description)")
    implies: dict[str, tuple[str, ...]] = {}
    descriptions: dict[str, str] = {}
    for name, spec in table.items():
        if not isinstance(spec, dict):
            raise _fail(f"criteria.{name}", "must be a table")
        descriptions[name] = str(_text(spec, "description", f"criteria.{name}"))
        implies[name] = _names(spec.get("implies", []), f"criteria.{name}.implies")
    for name, implied in implies.items():
        for other in implied:
            if other not in implies:
                raise _fail(f"criteria.{name}.implies", f"unknown criterion '{other}'")
    return implies, descriptions


def parse(data: bytes) -> Audits:
    """Read audits.toml; ``AuditsError`` naming the entry and field of the first problem.

    The TOML is ``tomllib``'s, read as the lockfile is (``tomlpos.parse``): text
    it refuses in any way, an integer too long to convert included, is one
    line naming where.
    """
    try:
        doc = parse_toml(data.decode("utf-8"), AUDITS_FILE)
    except UnicodeDecodeError as e:
        raise _fail("", f"not UTF-8 ({e})", "fix the file, or restore it: git checkout -- audits.toml") from e
    if isinstance(doc, Problem):
        raise AuditsError(doc.render(), f"{doc.hint or 'fix the file'}, or restore it: git checkout -- audits.toml")
    unknown = sorted(set(doc) - {"criteria", "policy", "audit", "imports"})
    if unknown:
        raise _fail(unknown[0], "unknown table (criteria, policy, audit, imports)")
    implies, descriptions = _criteria(doc)
    policy = doc.get("policy", {})
    if not isinstance(policy, dict):
        raise _fail("policy", "must be a table")
    required = _names(policy.get("require", []), "policy.require")
    for name in required:
        if name not in implies:
            raise _fail("policy.require", f"unknown criterion '{name}'", f"define [criteria.{name}]")
    entries = doc.get("audit", [])
    if not isinstance(entries, list):
        raise _fail("audit", "must be an array of tables ([[audit]])")
    audits = tuple(_audit(i, e, implies) for i, e in enumerate(entries))
    return Audits(implies, descriptions, required, audits, _imports(doc.get("imports", {})), doc)


def _imports(table: object) -> tuple[Import, ...]:
    if not isinstance(table, dict):
        raise _fail("imports", "must be a table of [imports.NAME]")
    out = []
    for name, spec in table.items():
        where = f"imports.{name}"
        if not isinstance(spec, dict):
            raise _fail(where, "must be a table")
        unknown = sorted(set(spec) - {"source", "rev", "file", "sha256", "trust"})
        if unknown:
            raise _fail(f"{where}.{unknown[0]}", "unknown field")
        file = str(_text(spec, "file", where))
        if not file.startswith(f"{IMPORTED_DIR}/") or ".." in file.split("/"):
            raise _fail(f"{where}.file", f"'{file}' must be a file under {IMPORTED_DIR}/")
        trust = _names(spec.get("trust"), f"{where}.trust")
        if not trust:
            raise _fail(f"{where}.trust", "must name at least one principal to trust")
        out.append(
            Import(
                name,
                str(_text(spec, "source", where)),
                str(_text(spec, "rev", where)),
                file,
                str(_sha(spec, "sha256", where)),
                trust,
            )
        )
    return tuple(out)


def load(repo: Repo) -> Audits | None:
    """The repository's audits.toml, or None when it has none."""
    try:
        data = repo.read(AUDITS_FILE)
    except FileNotFoundError:
        return None
    except (OSError, Escape) as e:
        raise _fail("", f"cannot read it ({e})", "commit audits.toml itself, not a link") from e
    return parse(data)


def render(a: Audits) -> bytes:
    """audits.toml as patchkit writes it: criteria, policy, then every audit in order."""
    import tomli_w

    doc: dict[str, object] = {
        "criteria": {
            name: {"description": a.descriptions[name], **({"implies": list(imp)} if imp else {})}
            for name, imp in a.criteria.items()
        },
        "policy": {"require": list(a.required)},
        "audit": [{**x.fields(), "signature": x.signature} for x in a.audits],
    }
    if a.imports:
        doc["imports"] = {i.name: i.fields() for i in a.imports}
    head = (
        b"# Recorded audits of this deployment's patches: written by `patchkit audit certify`.\n"
        b"# Each entry is signed (ssh-keygen -Y verify -n patchkit-audit; `patchkit audit statement N` prints\n"
        b"# what was signed). Fields: docs/audit.md.\n\n"
    )
    return head + tomli_w.dumps(doc, multiline_strings=True).encode()


def new_audits(required: tuple[str, ...] = ("safe-to-deploy",)) -> Audits:
    """The audits.toml a first ``certify`` writes: the default criteria and a policy requiring ``required``."""
    implies = {k: tuple(v.get("implies", ())) for k, v in DEFAULT_CRITERIA.items()}
    descriptions = {k: str(v["description"]) for k, v in DEFAULT_CRITERIA.items()}
    return Audits(implies, descriptions, required)


@dataclass(frozen=True)
class Reviewed:
    """A patch as an auditor reviews it: the text reviewed and what it applies to."""

    name: str
    text: bytes
    applies_to: str
    is_diff: bool  # the text is a diff (an overlay's, a series patch): a pure move keeps its audit

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text).hexdigest()


def reviewed_patches(repo: Repo, lock: Lockfile) -> dict[str, Reviewed]:
    """Every patch of the lockfile and of its series (``SERIES/PATCH``), as an auditor reviews it."""
    out: dict[str, Reviewed] = {}
    for p in lock.patches:
        if p.kind is PatchKind.OVERLAY and p.diff is not None:
            base = p.base
            applies = f"{base.upstream}:{base.path} sha256:{base.sha256}" if base is not None else ""
            text = repo.read_pinned(p.diff.file, f"the diff of patch '{p.name}'")
            out[p.name] = Reviewed(p.name, text, f"{applies} -> {p.target} sha256:{p.sha256}", True)
        elif p.file is not None:
            text = repo.read_pinned(p.file, f"patch '{p.name}'")
            out[p.name] = Reviewed(p.name, text, f"{p.kind.value} at {p.target}", False)
    for s in lock.series:
        pin = f"commit {s.commit}" if s.commit else f"version {s.version}"
        for sp in s.patches:
            name = f"{s.name}/{sp.name}"
            text = repo.read_pinned(sp.file, f"patch '{sp.name}' of series '{s.name}'")
            out[name] = Reviewed(name, text, f"series {s.name} on {s.upstream} {pin}", True)
    return out


class Coverage(Enum):
    """Where one patch stands against one criterion."""

    AUDITED = "audited"
    MOVED = "carried over"  # audited before a pure move: the interdiff is empty
    NEEDS_DELTA = "needs a delta audit"
    UNAUDITED = "unaudited"


@dataclass(frozen=True)
class Status:
    """One patch against one criterion: where it stands, by which audits, and the change since."""

    patch: str
    criterion: str
    coverage: Coverage
    audits: tuple[Audit, ...] = ()
    since: str | None = None  # the reviewed sha256 the change is measured from
    change: tuple[str, ...] = ()  # the interdiff (or the file diff) from ``since`` to now


def verified(repo: Repo, lock: Lockfile, audits: Audits, now: dt.datetime) -> tuple[list[Audit], list[Finding]]:
    """The audits whose signature verifies by an allowed signer as their ``who``; a finding for every other."""
    from patchkit.signing.signatures import load_signers

    if not audits.audits and not audits.imports:
        return [], []
    if lock.signing is None:
        fix = 'add [signing] with allowed_signers = "PATH" to the lockfile (docs/signing.md)'
        return [], [Finding("audit-unverifiable", AUDITS_FILE, None, "no allowed signers to check audits with", fix)]
    allowed = load_signers(repo.root / str(lock.signing.allowed_signers), str(lock.signing.allowed_signers))
    good: list[Audit] = []
    findings: list[Finding] = []
    for a in audits.audits:
        why = _signature_problem(a, allowed, now)
        if why is None:
            good.append(a)
            continue
        findings.append(
            Finding(
                "audit-forged",
                AUDITS_FILE,
                None,
                f"audit[{a.index}] of '{a.patch}' by {a.who}: the signature does not verify ({why}); "
                "it counts for nothing",
                "remove the entry, or have its signer certify again: patchkit audit certify",
                field=f"audit[{a.index}]",
            )
        )
    for imp in audits.imports:
        found, problems = _imported(repo, imp, audits, allowed, now)
        good += found
        findings += problems
    return good, findings


def _signature_problem(a: Audit, allowed: tuple[AllowedSigner, ...], now: dt.datetime) -> str | None:
    """Why ``a``'s signature does not verify as its ``who`` (None when it does)."""
    from patchkit.signing import signers, sshsig

    try:
        sig = sshsig.verify(a.signature.encode(), a.statement, NAMESPACE)
        signers.find(allowed, sig.public_key, NAMESPACE, a.who, now)
    except sshsig.BadSignature as e:
        return str(e)
    return None


def _imported(
    repo: Repo, imp: Import, audits: Audits, allowed: tuple[AllowedSigner, ...], now: dt.datetime
) -> tuple[list[Audit], list[Finding]]:
    """The audits of import ``imp`` that count: its pinned copy intact, each entry signed by a trusted principal."""
    from patchkit.signing.signers import match_pattern_list

    where = f"imports.{imp.name}"
    try:
        data = repo.read(imp.file)
    except (OSError, Escape) as e:
        fix = f"import it again: patchkit audit import {imp.name} --from {imp.source} --rev {imp.rev}"
        return [], [Finding("audit-import-missing", imp.file, None, f"{where}: cannot read its copy ({e})", fix)]
    if hashlib.sha256(data).hexdigest() != imp.sha256:
        message = f"{where}: {imp.file} is not the copy imported (sha256 differs): its audits count for nothing"
        fix = f"import it again: patchkit audit import {imp.name} --from {imp.source} --rev {imp.rev}"
        return [], [Finding("audit-import-changed", imp.file, None, message, fix)]
    try:
        theirs = parse(data)
    except AuditsError as e:
        return [], [Finding("audit-import-unreadable", imp.file, None, f"{where}: {e}")]
    good: list[Audit] = []
    problems: list[Finding] = []
    for a in theirs.audits:
        a = dataclasses.replace(a, source=imp.name, criteria=tuple(c for c in a.criteria if c in audits.criteria))
        if not any(match_pattern_list(a.who, t) for t in imp.trust):
            problems.append(
                Finding(
                    "audit-import-untrusted",
                    imp.file,
                    None,
                    f"{where}: audit[{a.index}] of '{a.patch}' is by {a.who}, whom the import does not trust",
                    f"trust them in [imports.{imp.name}] trust, if the policy should",
                    severity="note",
                )
            )
            continue
        why = _signature_problem(a, allowed, now)
        if why is not None:
            problems.append(
                Finding(
                    "audit-forged",
                    imp.file,
                    None,
                    f"{where}: audit[{a.index}] of '{a.patch}' by {a.who}: the signature does not verify ({why})",
                    f"add {a.who}'s key to the allowed signers (namespace {NAMESPACE}), or drop the import",
                )
            )
            continue
        good.append(a)
    return good, problems


def _covered(audits: list[Audit], criterion: str, table: Audits) -> dict[str, list[Audit]]:
    """Reviewed sha256 -> the chain of audits that covers it for ``criterion`` (full audits, then deltas)."""
    relevant = [a for a in audits if criterion in table.closure(a.criteria)]
    covered = {a.reviewed_sha256: [a] for a in relevant if a.delta_from is None}
    grew = True
    while grew:
        grew = False
        for a in relevant:
            if a.delta_from in covered and a.reviewed_sha256 not in covered:
                covered[a.reviewed_sha256] = [*covered[a.delta_from], a]
                grew = True
    return covered


def _change(repo: Repo, old_sha: str, now: Reviewed) -> tuple[bool, tuple[str, ...]]:
    """(pure move, the change) from the reviewed text ``old_sha`` to ``now``; the change unknown without the copy."""
    from patchkit.core import diffs
    from patchkit.trust import interdiff

    try:
        old = repo.read(f"{REVIEWED_DIR}/{old_sha}")
    except (OSError, Escape):
        return False, (f"the reviewed copy {REVIEWED_DIR}/{old_sha} is missing: the change cannot be shown",)
    if now.is_diff:
        found = interdiff.compare(old, now.text)
        if found is not None:
            return found.empty, tuple(found.lines())
    made = diffs.make(old, now.text, f"reviewed/{old_sha[:12]}", f"now/{now.name}")
    return False, tuple(made.decode("utf-8", "replace").splitlines())


def _candidates(good: list[Audit], patch: Reviewed) -> list[Audit]:
    """The audits that may cover ``patch``: its own, and every imported one (they match by the reviewed bytes)."""
    return [a for a in good if a.patch == patch.name or a.source is not None]


def status(repo: Repo, audits: Audits, good: list[Audit], patch: Reviewed, criterion: str) -> Status:
    """Where ``patch`` stands against ``criterion``, from the verified audits ``good``."""
    covered = _covered(_candidates(good, patch), criterion, audits)
    if patch.sha256 in covered:
        return Status(patch.name, criterion, Coverage.AUDITED, tuple(covered[patch.sha256]))
    covered = {sha: chain for sha, chain in covered.items() if chain[-1].patch == patch.name}
    if not covered:
        return Status(patch.name, criterion, Coverage.UNAUDITED)
    latest = max(covered, key=lambda sha: (covered[sha][-1].date, covered[sha][-1].index))
    moved, change = _change(repo, latest, patch)
    coverage = Coverage.MOVED if moved else Coverage.NEEDS_DELTA
    return Status(patch.name, criterion, coverage, tuple(covered[latest]), latest, change)


def statuses(repo: Repo, lock: Lockfile, audits: Audits, now: dt.datetime) -> tuple[list[Status], list[Finding]]:
    """Every patch against every required criterion, and the findings about the audits themselves."""
    good, findings = verified(repo, lock, audits, now)
    patches = reviewed_patches(repo, lock)
    names = {a.patch for a in audits.audits} - set(patches)
    findings += [
        Finding(
            "audit-unknown-patch",
            AUDITS_FILE,
            None,
            f"audits name '{name}', which is no patch of the lockfile (dropped or renamed?)",
            "remove its entries, or keep them as history: they cover nothing",
            severity="note",
        )
        for name in sorted(names)
    ]
    found = [status(repo, audits, good, p, c) for p in patches.values() for c in audits.required]
    return found, findings


def findings(repo: Repo, lock: Lockfile, now: dt.datetime) -> list[Finding]:
    """What ``check`` reports from audits.toml: each patch the policy's criteria do not cover, and bad entries."""
    audits = load(repo)
    if audits is None:
        return []
    found, out = statuses(repo, lock, audits, now)
    for s in found:
        if s.coverage is Coverage.AUDITED:
            continue
        if s.coverage is Coverage.MOVED:
            message = f"'{s.patch}' ({s.criterion}): audit carried over: only the upstream context moved since review"
            out.append(Finding("audit-carried-over", AUDITS_FILE, None, message, severity="note"))
            continue
        out.append(_missing(s))
    return out


def _missing(s: Status) -> Finding:
    if s.coverage is Coverage.NEEDS_DELTA:
        shown = "\n".join(f"    {line}" for line in s.change[:80])
        more = f"\n    … {len(s.change) - 80} more lines" if len(s.change) > 80 else ""
        return Finding(
            "audit-needs-delta",
            AUDITS_FILE,
            None,
            f"'{s.patch}' changed since it was audited for {s.criterion} "
            f"(reviewed {str(s.since)[:12]}): needs a delta audit of:\n{shown}{more}",
            f"review the change, then: patchkit audit certify {s.patch} --delta --criteria {s.criterion}",
        )
    return Finding(
        "audit-missing",
        AUDITS_FILE,
        None,
        f"'{s.patch}' has no audit for {s.criterion}, which the policy requires",
        f"review it, then: patchkit audit certify {s.patch} --criteria {s.criterion}",
    )


def _principal(repo: Repo, lock: Lockfile, key_wire: bytes, identity: str | None, now: dt.datetime) -> str:
    """Who signs: ``identity``, or the one principal of the allowed-signers line holding the key."""
    from patchkit.signing import signers
    from patchkit.signing.signatures import load_signers
    from patchkit.signing.sshsig import BadSignature

    if lock.signing is None:
        raise BadInput(
            "audits are signed: the lockfile has no [signing] table naming the allowed signers",
            'add [signing] with allowed_signers = "PATH" (docs/signing.md)',
        )
    allowed = load_signers(repo.root / str(lock.signing.allowed_signers), str(lock.signing.allowed_signers))
    try:
        match = signers.find(allowed, key_wire, NAMESPACE, identity, now)
    except BadSignature as e:  # the key may not sign audits, as anyone or as ``identity``
        raise BadInput(
            f"this key may not sign audits ({e})",
            f'allow it in {lock.signing.allowed_signers}: PRINCIPAL namespaces="patchkit,{NAMESPACE}" ssh-ed25519 …',
        ) from e
    if identity is None and any(c in match.principal for c in ",*?!"):
        raise BadInput(
            f"the allowed-signers line for this key names several principals ({match.principal})",
            "say which is you: --identity PRINCIPAL",
        )
    return match.principal


def _start(
    repo: Repo, lock: Lockfile, audits: Audits, patch: Reviewed, criteria: tuple[str, ...], now: dt.datetime
) -> str:
    """The reviewed sha256 a delta audit of ``patch`` starts from: the latest one covered for every criterion."""
    good, _ = verified(repo, lock, audits, now)
    chains = [_covered(_candidates(good, patch), c, audits) for c in criteria]
    chains = [{sha: chain for sha, chain in ch.items() if chain[-1].patch == patch.name} for ch in chains]
    common = set(chains[0]).intersection(*chains[1:])
    if not common:
        raise BadInput(
            f"'{patch.name}' has no earlier audit for {', '.join(criteria)} to start a delta from",
            f"review it in full: patchkit audit certify {patch.name} --criteria {criteria[0]}",
        )
    return max(common, key=lambda sha: (chains[0][sha][-1].date, chains[0][sha][-1].index))


def certify(
    repo: Repo,
    lock: Lockfile,
    name: str,
    criteria: tuple[str, ...],
    *,
    key: Ed25519PrivateKey,
    identity: str | None,
    delta: bool,
    notes: str | None,
    now: dt.datetime,
) -> tuple[Audit, dict[str, bytes]]:
    """Record that the key's holder reviewed patch ``name`` (or, with ``delta``, its change since the last audit).

    Returns the new audit and the files to write (audits.toml and the copy of
    the reviewed text), which the caller writes as one transaction.
    """
    from patchkit.signing import sshsig
    from patchkit.signing.keys import public_wire

    patches = reviewed_patches(repo, lock)
    patch = patches.get(name)
    if patch is None:
        listed = ", ".join(sorted(patches)) or "none"
        raise BadInput(f"no patch '{name}' to certify (patches: {listed})", "series patches are SERIES/PATCH")
    audits = load(repo) or new_audits()
    for c in criteria:
        if c not in audits.criteria:
            raise BadInput(
                f"unknown criterion '{c}' (defined: {', '.join(audits.criteria)})",
                f"define [criteria.{c}] in {AUDITS_FILE}",
            )
    if not criteria:
        raise BadInput("say what the review establishes: --criteria NAME", f"defined: {', '.join(audits.criteria)}")
    start = _start(repo, lock, audits, patch, criteria, now) if delta else None
    if start == patch.sha256:
        raise BadInput(f"'{name}' has not changed since its last audit for {', '.join(criteria)}: nothing to certify")
    fields: dict[str, object] = {
        "patch": name,
        "criteria": list(criteria),
        "reviewed_sha256": patch.sha256,
        "applies_to": patch.applies_to,
        "who": _principal(repo, lock, public_wire(key), identity, now),
        "date": now.strftime("%Y-%m-%d"),
    }
    if start is not None:
        fields["delta_from"] = start
    if notes:
        fields["notes"] = notes
    signature = sshsig.sign(key, statement(fields), NAMESPACE).decode()
    audit = _audit(len(audits.audits), {**fields, "signature": signature}, audits.criteria)
    updated = dataclasses.replace(audits, audits=(*audits.audits, audit))
    return audit, {AUDITS_FILE: render(updated), f"{REVIEWED_DIR}/{patch.sha256}": patch.text}


def import_audits(
    repo: Repo, name: str, source: str, rev: str, path: str, trust: tuple[str, ...], cache: Context
) -> tuple[Import, dict[str, bytes]]:
    """Copy another repository's audits file (``path`` at ``rev`` of the git repository ``source``) in, pinned.

    Returns the import record and the files to write (the copy and
    audits.toml). The copy is read as patchkit reads any upstream: a cached,
    disarmed clone; nothing of the other repository runs.
    """
    from patchkit.core.values import check_name
    from patchkit.sources.git import GitSource

    check_name(name, "import name")
    if not trust:
        raise BadInput("say whose audits count: --trust PRINCIPAL (an allowed signer's principal)")
    snapshot = GitSource(source, cache.cache_dir, progress=cache.progress).snapshot(rev)
    data = snapshot.read([path]).get(path)
    if data is None:
        raise BadInput(f"{source} at {rev}: no file {path}", "name the audits file: --path PATH")
    parse(data)  # refuse a file that is no audits file before pinning it
    audits = load(repo) or new_audits()
    imp = Import(
        name,
        source,
        snapshot.commit,
        f"{IMPORTED_DIR}/{name}.toml",
        hashlib.sha256(data).hexdigest(),
        trust,
    )
    kept = tuple(i for i in audits.imports if i.name != name)
    updated = dataclasses.replace(audits, imports=(*kept, imp))
    return imp, {AUDITS_FILE: render(updated), imp.file: data}


def review_summary(repo: Repo) -> str:
    """The pull request's "Reviews needed" section: each patch the policy no longer covers, with its change.

    Read from the repository as it is now (after a rebase committed); empty
    when it keeps no audits.toml or every patch is covered.
    """
    audits = load(repo)
    if audits is None:
        return ""
    lock, _ = repo.read_lockfile()
    found, _ = statuses(repo, lock, audits, dt.datetime.now(dt.UTC))
    needed = [s for s in found if s.coverage in (Coverage.NEEDS_DELTA, Coverage.UNAUDITED)]
    if not needed:
        return ""
    out = ["", "## Reviews needed", ""]
    for s in needed:
        if s.coverage is Coverage.UNAUDITED:
            out.append(f"- `{s.patch}` ({s.criterion}): never audited: `patchkit audit certify {s.patch}`")
            continue
        out += [
            f"- `{s.patch}` ({s.criterion}): changed since its audit: `patchkit audit certify {s.patch} --delta`",
            "  <details><summary>interdiff since the audited version</summary>",
            "",
            "  ```diff",
            *(f"  {line}" for line in s.change),
            "  ```",
            "  </details>",
        ]
    return "\n".join(out) + "\n"
