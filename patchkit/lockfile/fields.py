"""The lockfile's field tables: each record declares its fields once, and reading and writing follow.

A :class:`Record` lists the TOML fields of one lockfile table (an image, a
patch, its base, ...) in the order ``patchkit`` writes them. Each
:class:`Field` says its key, whether it must be present, its default, how its
TOML value is read and checked, and how it is written. :func:`read_record`
(used by ``lockfile.reader``) and :func:`write_record` (used by
``lockfile.writer``) are driven by the table alone: the unknown-field check,
the reading of every field with its located problems, the rules across the
fields of one entry, and the canonical form written back. A new lockfile field
is its attribute in the dataclass (``lockfile/model.py``) and one line in its
record's table.

The readers here are closures made once per field, so reading 5,000 patches
costs a dictionary lookup and a type test per field before the value's own
constructor runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Protocol, TypeVar

from patchkit.lockfile.tomlpos import FieldPath, FieldReader, toml_type

# The default of a field with none: it is always written, and a record lacking it is not built.
NO_DEFAULT = object()
_SKIP = object()  # in a record's writers: a default never to compare with
_READ = object()  # a field's value when absent: what its reader says (it may report a problem)

# A TOML table as tomllib gives it: its values are checked by the field that reads them.
Raw = dict[str, Any]
# Reads field ``key`` of the table at ``path``: the typed value, the default when absent, None when invalid.
ReadFn = Callable[[Raw, FieldPath, "Context"], object]
# A record's rule across its fields, run once they are read.
Rule = Callable[["Entry"], None]


class Invalid(ValueError):
    """A field value is wrong; ``hint`` says how to fix it (a value constructor's ``ValueError`` has none)."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


class Context:
    """What the reading of one document shares: the located reader, and the sections read so far.

    Rules that refer to another section (a base names an upstream, a hand
    diff names patches) ask :meth:`names`; the document is read in written
    order, so a section is read before any section that refers to it.
    """

    def __init__(self, reader: FieldReader) -> None:
        self.r = reader
        # The sections read so far by attribute, each of its own type (the Lockfile is built of them).
        self.doc: dict[str, Any] = {}
        # Per section, each entry name seen so far and where (for the rules that keep names unique).
        self.seen: dict[str, dict[str, int | str]] = {}
        self._names: dict[str, set[str]] = {}

    def names(self, section: str) -> set[str]:
        """The names of the entries of ``section`` that loaded (``name`` of each)."""
        found = self._names.get(section)
        if found is None:
            found = self._names[section] = {e.name for e in self.doc.get(section, ())}
        return found


class Entry:
    """One table being read, as a record's rules see it: the raw table, where it is, and its read values.

    ``complete`` says whether the record will be built (every field it needs has a value).
    """

    __slots__ = ("ctx", "path", "record", "t", "values")

    def __init__(self, t: Raw, path: FieldPath, values: dict[str, Any], ctx: Context, record: Record) -> None:
        self.t = t
        self.path = path
        self.values = values
        self.ctx = ctx
        self.record = record

    @property
    def complete(self) -> bool:
        return self.record.complete(self.values)

    def problem(self, sub: FieldPath, message: str, hint: str | None = None) -> None:
        self.ctx.r.problem((*self.path, *sub), message, hint)


@dataclass(frozen=True)
class Field:
    """One field of a record: its TOML key and attribute, how it is read, how it is written.

    ``get`` takes the field's value out of the record (its attribute unless
    the field is computed); a value equal to ``default`` is left out of the
    written file unless ``always``. ``absent`` is the value ``read`` gives
    for a table without the key, when that is a constant and no problem
    (the reader is then not called for it).
    """

    key: str
    read: ReadFn
    write: Callable[[Any], object]  # takes the field's own type: a table of fields mixes them
    attr: str | None
    default: object = None
    always: bool = False
    get: Callable[[Any], object] | None = None
    absent: object = _READ


@dataclass(frozen=True)
class Key:
    """How the key of a table of tables (``[images.NAME]``) becomes the record's attribute ``attr``."""

    attr: str
    parse: Callable[[str], object]


class _Named(Protocol):
    @property
    def name(self) -> str: ...


N = TypeVar("N", bound=_Named)


def by_name(records: Iterable[N]) -> dict[str, N]:
    """``records`` by their ``name``, the first of a name kept (as a scan would find it).

    For the lookups by name of a lockfile or a series: a scan for each of
    thousands of patches made a rebase quadratic in them.
    """
    found: dict[str, N] = {}
    for r in records:
        found.setdefault(r.name, r)
    return found


class Record:
    """The table of one lockfile record: its fields in written order, its key, its rules.

    ``cls`` builds the record from the read values (``choose`` may pick a
    subclass, as an upstream's ``source`` does); it is built only when every
    dataclass field without a default has a value.
    """

    def __init__(
        self,
        cls: type,
        fields: Iterable[Field],
        *,
        key: Key | None = None,
        rules: Iterable[Rule] = (),
        choose: Callable[[Entry], type] | None = None,
    ) -> None:
        self.cls = cls
        self.fields = tuple(fields)
        self.key = key
        self.rules = tuple(rules)
        self.choose = choose
        self.keys = tuple(f.key for f in self.fields)
        self.keyset = frozenset(self.keys)
        self.needed = _needed(cls)
        self._build = _builder(cls)
        self._computed = tuple(f.key for f in self.fields if f.attr is None)
        self._readers = tuple((f.attr or f.key, f.key, f.read, f.absent) for f in self.fields)
        # A default is compared only when it is a value (a field at None or without one is never equal to it:
        # skipping the comparison spares a dataclass __eq__ call per written value).
        self._writers = tuple(
            (
                f.key,
                f.get or attrgetter(f.attr or f.key),
                f.write,
                _SKIP if f.always or f.default is None or f.default is NO_DEFAULT else f.default,
            )
            for f in self.fields
        )

    def field(self, key: str) -> Field:
        return next(f for f in self.fields if f.key == key)

    def read(self, t: Raw, path: FieldPath, ctx: Context, name: str | None = None) -> object:
        """The record of table ``t`` at ``path`` (keyed by ``name``), or None; every problem goes to ``ctx.r``."""
        if not self.keyset.issuperset(t):
            ctx.r.known(t, path, self.keys)
        key = None if self.key is None else _parse_key(self.key, name or "", path, ctx)
        # Written out rather than calling values() and complete(): this runs once per table of the file.
        values = {}
        for attr, key_, read, absent in self._readers:
            values[attr] = absent if absent is not _READ and key_ not in t else read(t, path, ctx)
        if self.key is not None:
            values[self.key.attr] = key
        cls = self.cls
        if self.rules or self.choose is not None:
            entry = Entry(t, path, values, ctx, self)
            for rule in self.rules:
                rule(entry)  # a rule may complete a value (a series' upstream defaults to its name)
            if self.choose is not None:
                cls = self.choose(entry)
        for attr in self.needed:
            if values[attr] is None:
                return None
        for computed_key in self._computed:
            del values[computed_key]
        return self._build(values) if cls is self.cls else cls(**values)

    def complete(self, values: Mapping[str, object]) -> bool:
        """Whether every field the record needs has a value."""
        # By identity, in a loop: ``None in`` would call each value's __eq__, ``all()`` make a generator per record.
        for attr in self.needed:  # noqa: SIM110
            if values[attr] is None:
                return False
        return True

    def values(self, t: Raw, path: FieldPath, ctx: Context) -> dict[str, object]:
        """Every field of ``t`` read in table order, by attribute (computed fields by key)."""
        values = {}
        for name, key, read, absent in self._readers:
            values[name] = absent if absent is not _READ and key not in t else read(t, path, ctx)
        return values

    def write(self, obj: object) -> dict[str, object]:
        """The TOML table of ``obj``: its fields in table order, those at their default left out."""
        out: dict[str, object] = {}
        for key, get, write, default in self._writers:
            value = get(obj)
            if value is None or (default is not _SKIP and value == default):
                continue
            out[key] = write(value)
        return out


def _builder(cls: type) -> Callable[[dict[str, object]], object]:
    """How a record of ``cls`` is made of its read values: ``cls(**values)``, the same object made faster.

    A frozen dataclass's ``__init__`` stores each field through
    ``object.__setattr__``: a dozen calls per patch. For a dataclass whose
    ``__init__`` does nothing else (no ``__post_init__``, every field an init
    field, no slots), the values, already read and checked, are stored at once.
    """
    if (
        not dataclasses.is_dataclass(cls)
        or hasattr(cls, "__post_init__")
        or hasattr(cls, "__slots__")
        or not all(f.init for f in dataclasses.fields(cls))
    ):
        return lambda values: cls(**values)
    new = object.__new__

    def build(values: dict[str, object]) -> object:
        obj = new(cls)
        obj.__dict__.update(values)
        return obj

    return build


def _needed(cls: type) -> tuple[str, ...]:
    """The dataclass fields a record cannot be built without (those with no default)."""
    if not dataclasses.is_dataclass(cls):
        return ()
    return tuple(
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    )


def _parse_key(key: Key, name: str, path: FieldPath, ctx: Context) -> object:
    try:
        return key.parse(name)
    except ValueError as e:
        ctx.r.problem(path, str(e))
        return None


# --------------------------------------------------------------------------- kinds of field


def _identity(value: object) -> object:
    return value


def text(
    key: str,
    check: Callable[[str], object] | None = None,
    *,
    required: bool = False,
    hint: str | None = None,
    keep: bool = False,
    default: object = None,
    attr: str | None = "",
    write: Callable[[Any], object] | None = None,
) -> Field:
    """A string field; ``check`` makes the typed value of it or raises ``ValueError`` (``Invalid`` for a hint).

    With ``keep`` the string itself is the value and a failed check is only a
    problem. Typed values are written as their text.
    """
    missing = f"missing required field '{key}'"

    def read(t: Raw, path: FieldPath, ctx: Context) -> object:
        value = t.get(key, NO_DEFAULT)
        if value is NO_DEFAULT:
            if required:
                ctx.r.problem(path, missing)
            return default
        if value.__class__ is not str:
            ctx.r.problem((*path, key), f"must be a string, got {toml_type(value)}")
            return None
        if check is None:
            return value
        try:
            checked = check(value)
        except ValueError as e:
            ctx.r.problem((*path, key), str(e), e.hint if isinstance(e, Invalid) and e.hint else hint)
            return value if keep else None
        return value if keep else checked

    if write is None:
        write = _identity if check is None or keep else str
    return Field(key, read, write, key if attr == "" else attr, default, absent=_READ if required else default)


def integer(key: str, valid: Callable[[int], bool], message: str, default: object = NO_DEFAULT) -> Field:
    """An integer field ``valid`` accepts; anything else is ``message`` (``{value!r}`` shows it).

    Absent, it is ``default``; without one, absent is wrong too.
    """

    def read(t: Raw, path: FieldPath, ctx: Context) -> object:
        value = t.get(key, default)
        if value is NO_DEFAULT or value.__class__ is not int or not valid(value):
            ctx.r.problem((*path, key), message.format(value=None if value is NO_DEFAULT else value))
            return None
        return value

    return Field(key, read, _identity, key, default)


def strings(
    key: str,
    item: Callable[[str], object] | None,
    message: str,
    *,
    default: tuple[object, ...] = (),
    nonempty: bool = False,
    always: bool = False,
) -> Field:
    """An array of strings, each made by ``item`` (a problem per bad item); anything else is ``message``.

    Without ``item`` every element must be a string. ``message`` may show the
    value's type as ``{got}``. Written one per line, as text.
    """

    def read(t: Raw, path: FieldPath, ctx: Context) -> object:
        raw = t.get(key, NO_DEFAULT)
        if raw is NO_DEFAULT:
            return default
        if (
            raw.__class__ is not list
            or (nonempty and not raw)
            or (item is None and not all(isinstance(x, str) for x in raw))
        ):
            ctx.r.problem((*path, key), message.format(got=toml_type(raw)))
            return ()
        if item is None:
            return tuple(raw)
        return _items(raw, item, (*path, key), ctx)

    return Field(key, read, _texts, key, default, always, absent=default)


def _items(raw: list[object], item: Callable[[str], object], path: FieldPath, ctx: Context) -> tuple[object, ...]:
    out = []
    for i, x in enumerate(raw):
        try:
            out.append(item(x if isinstance(x, str) else repr(x)))
        except ValueError as e:
            ctx.r.problem((*path, i), str(e))
    return tuple(out)


def _texts(values: tuple[object, ...]) -> list[str]:
    return [str(v) for v in values]


def table(key: str, record: Record, *, attr: str | None = "") -> Field:
    """A sub-table (``[patches.base]``) read as ``record``."""

    def read(t: Raw, path: FieldPath, ctx: Context) -> object:
        sub = t.get(key)
        if sub is None:
            return None
        if sub.__class__ is not dict:
            ctx.r.problem((*path, key), f"must be a table, got {toml_type(sub)}")
            return None
        return record.read(sub, (*path, key), ctx)

    return Field(key, read, record.write, key if attr == "" else attr, absent=None)


def tables(key: str, record: Record, message: str, *, order: Callable[[Any], str] | None = None) -> Field:
    """An array of tables (``[[patches]]``), each read as ``record``; ``order`` sorts them when written.

    ``message`` is the problem when the value is not an array of tables (``{got}`` shows its type).
    """

    def read(t: Raw, path: FieldPath, ctx: Context) -> object:
        raw = t.get(key)
        if raw is None:
            return ()
        if raw.__class__ is not list or not all(v.__class__ is dict for v in raw):
            ctx.r.problem((*path, key), message.format(got=toml_type(raw)))
            return ()
        where = (*path, key)
        found = (record.read(v, (*where, i), ctx) for i, v in enumerate(raw))
        return tuple(x for x in found if x is not None)

    def write(items: tuple[object, ...]) -> list[dict[str, object]]:
        return [record.write(x) for x in (sorted(items, key=order) if order else items)]

    return Field(key, read, write, key, (), absent=())


def keyed(key: str, record: Record, *, message: str | None = None, entry: str | None = None) -> Field:
    """A table of tables (``[images.NAME]``) keyed by ``record.key``, written sorted by that key.

    ``message`` and ``entry`` are the problems when it, or one of its entries, is not a table
    (by default "must be a table, got …").
    """
    if record.key is None:
        raise TypeError("a table of tables needs a record with a key")
    name_of = attrgetter(record.key.attr)

    def read(t: Raw, path: FieldPath, ctx: Context) -> object:
        raw = t.get(key)
        if raw is None:
            return ()
        if raw.__class__ is not dict:
            ctx.r.problem((*path, key), message or f"must be a table, got {toml_type(raw)}")
            return ()
        out = []
        for name, value in raw.items():
            where = (*path, key, name)
            if value.__class__ is not dict:
                ctx.r.problem(where, entry or f"must be a table, got {toml_type(value)}")
                continue
            found = record.read(value, where, ctx, name)
            if found is not None:
                out.append(found)
        return tuple(out)

    def write(items: tuple[object, ...]) -> dict[str, dict[str, object]]:
        return {str(name_of(x)): record.write(x) for x in sorted(items, key=lambda x: str(name_of(x)))}

    return Field(key, read, write, key, (), absent=())


def computed(field: Field, get: Callable[[Any], object]) -> Field:
    """``field`` as no attribute of the record: read for its rules (or ``choose``), written from ``get``."""
    return dataclasses.replace(field, attr=None, get=get)


def section(
    key: str,
    read: ReadFn,
    write: Callable[[Any], object],
    *,
    attr: str | None = "",
    default: object = (),
    always: bool = False,
) -> Field:
    """A field read and written by functions of its own (a section another module keeps, ``schema``)."""
    return Field(key, read, write, key if attr == "" else attr, default, always)
