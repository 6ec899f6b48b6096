"""Hostile tool input: hypothesis strategies for bad tool calls, and the arena they are played in.

Shared by `test_fuzz_tools.py` (a fixed, derandomized run in CI) and `benchmarks/fuzz_tools.py`
(a long random run). A generated call carries the fault it was built with, so the checks know
when the answer must be a refusal and which argument it must name:

- ``valid``: every argument well typed, mostly values that exist in the database;
- ``hostile``: well typed but nasty (SQL injection, 50,000-character text, 1e308, int64 edges,
  RTL/zero-width/combining unicode, impossible dates): any answer but a crash is fine;
- ``wrong_type`` / ``invalid_text`` (NUL, lone surrogate) / ``missing`` / ``extra`` /
  ``not_a_mapping``: must be refused with an error that names the argument.

The arena is a backend work dir with the domain's template, the episode's clone and a sibling
clone: everything but the episode's own database file is hashed before and after, so a write
anywhere else (another database, a file created by an injected ATTACH) is caught.
"""

from __future__ import annotations

import hashlib
import inspect
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from hypothesis import strategies as st
from sqlalchemy import Engine, MetaData, select

from tbx.backend import EpisodeDatabase
from tbx.backend.sqlite import SQLiteBackend
from tbx.domains import Domain
from tbx.tools.declare import ToolSpec

FAULTS = ("valid", "hostile", "wrong_type", "invalid_text", "missing", "extra", "not_a_mapping")
REFUSED = frozenset({"wrong_type", "invalid_text", "missing", "extra", "not_a_mapping"})
MAX_ERROR_CHARS = 600  # runtime.ERROR_CHARS plus the note saying the message was cut

SQL_INJECTIONS = (
    "' OR '1'='1", "1 OR 1=1", "'; DROP TABLE {t}; --", '" OR ""="', "'); DELETE FROM {t}; --",
    "' UNION SELECT name, sql FROM sqlite_master --", "'; ATTACH DATABASE 'pwned.sqlite' AS p; --",
    "1; UPDATE {t} SET id = id + 1000", "' || (SELECT group_concat(sql) FROM sqlite_master) || '",
    "%", "_%", "\\", "''", '"', "`", "?", ":name", "$1", "%s", "{}", "NULL", "null", "None", "*",
)
UNICODE = (
    "\u202eevil\u202c", "\u202bمرحبا\u202c", "שלום עולם", "\u200b", "\ufeffBOM", "line\u2028sep\u2029",
    "e\u0301\u0301\u0301", "🧨🧨", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "ＡＢＣ", "\u0130stanbul", "straße", "\x1b[31mred", "a\r\nb",
    "\t", "   ", "", "\u00a0", "Ω≈ç√∫", "\U0010ffff", "😀",
)
LOOKALIKES = (
    "1e308", "-0", "NaN", "Infinity", "9" * 400, "0x10", "1_000", "2024-02-30", "9999-12-31", "0001-01-01",
    "2024-13-01", "24-1-1", "2024-01-01T25:61:00", "true", "[]", "{}", '{"id": 1}',
)
INT_EDGES = (0, -1, 1, 2**31 - 1, 2**31, -(2**31) - 1, 2**53 + 1, 2**63 - 1, -(2**63))
FLOAT_EDGES = (0.0, -0.0, 0.01, 1e-7, 5e-324, 1e308, -1e308, 1.7976931348623157e308, 0.1 + 0.2, 1e15, 1e16 + 1,
               123456789.125, -0.01, 10**30, 2**63 - 1, "12.50", "1e3", " 7 ")
EXTRA_KEYS = ("db", "__class__", "self", "kwargs", "' OR 1=1 --", "", "x" * 100, "\u202e", "model_config")


@dataclass(frozen=True)
class FuzzCall:
    """One generated tool call and what a right answer must look like."""

    tool: ToolSpec
    arguments: Any  # usually a dict; anything for the not_a_mapping fault
    fault: str  # one of FAULTS
    named: tuple[str, ...] = ()  # text a refusal must contain (the argument at fault)

    @property
    def refused(self) -> bool:
        return self.fault in REFUSED


# --- values -----------------------------------------------------------------------------------

def value_pool(engine: Engine, metadata: MetaData, rows_per_table: int = 25) -> dict[str, tuple]:
    """Values that exist in the database, by column name, so many calls reach a tool's body past
    its 'not found' checks (an argument named like a column is drawn from that column)."""
    pool: dict[str, set] = {}
    with engine.connect() as conn:
        for table in metadata.sorted_tables:
            for row in conn.execute(select(table).limit(rows_per_table)).mappings():
                for column, value in row.items():
                    if isinstance(value, int | float | str) and not (isinstance(value, str) and len(value) > 60):
                        pool.setdefault(column, set()).add(value)
                        pool.setdefault(f"<{type(value).__name__}>", set()).add(value)
    return {name: tuple(sorted(values, key=repr)) for name, values in pool.items()}


def _pooled(name: str, kind: type, pool: dict[str, tuple]) -> st.SearchStrategy:
    candidates = [v for v in pool.get(name, ()) + pool.get(f"<{kind.__name__}>", ()) if type(v) is kind]
    return st.sampled_from(candidates) if candidates else st.nothing()


def _text(max_size: int = 24) -> st.SearchStrategy[str]:
    """Arbitrary valid text (NUL and lone surrogates are the invalid_text fault's business)."""
    return st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",)), max_size=max_size)


def _long_text() -> st.SearchStrategy[str]:
    return st.builds(lambda unit, n: unit * n, st.sampled_from(["A", "é", "'; --", "🧨", "\u202e"]),
                     st.integers(1_000, 50_000))


def _hostile_text(tables: tuple[str, ...]) -> st.SearchStrategy[str]:
    injections = st.builds(lambda s, t: s.replace("{t}", t), st.sampled_from(SQL_INJECTIONS), st.sampled_from(tables))
    return st.one_of(injections, st.sampled_from(UNICODE + LOOKALIKES), _long_text(), _text(200))


def _literal_values(annotation: Any) -> tuple | None:
    return get_args(annotation) if get_origin(annotation) is Literal else None


def well_typed(annotation: Any, name: str, pool: dict[str, tuple], tables: tuple[str, ...],
               hostile: bool) -> st.SearchStrategy:
    """A value the argument's type accepts; `hostile` mixes in edge cases the body must survive."""
    choices = _literal_values(annotation)
    if choices is not None:
        nasty = st.sampled_from([str(c).upper() for c in choices] + [f" {c}" for c in choices])
        return st.one_of(st.sampled_from(choices), nasty) if hostile else st.sampled_from(choices)
    if annotation is int:
        plain = st.one_of(_pooled(name, int, pool), st.integers(-5, 500))
        nasty = st.one_of(st.sampled_from(INT_EDGES), st.integers(-(2**63), 2**63 - 1), st.booleans(),
                          st.integers(-1000, 1000).map(float), st.integers(-1000, 1000).map(str))
        return st.one_of(plain, nasty) if hostile else plain
    if annotation is float:
        plain = st.one_of(_pooled(name, float, pool), st.integers(1, 5000).map(lambda c: c / 100))
        nasty = st.one_of(st.sampled_from(FLOAT_EDGES), st.floats(allow_nan=False, allow_infinity=False))
        return st.one_of(plain, nasty) if hostile else plain
    if annotation is str:
        plain = st.one_of(_pooled(name, str, pool), _text())
        return st.one_of(plain, _hostile_text(tables)) if hostile else plain
    if annotation is bool:
        return st.booleans()
    return st.one_of(st.none(), st.integers(), _text())  # unannotated: anything goes


def wrong_typed(annotation: Any, json_only: bool) -> st.SearchStrategy:
    """A value the argument's type must refuse (lax coercion cannot turn it into one)."""
    letters = st.text("abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=12)
    containers = st.sampled_from([None, [], [1], ["a"], {}, {"a": 1}])
    choices = _literal_values(annotation)
    if choices is not None:
        return st.one_of(letters.filter(lambda s: s not in choices), st.sampled_from([0, -1, None, []]))
    if annotation is int:
        numbers = [0.5, -2.25, 1e308, 2**63, -(2**63) - 1, 10**30, 10**400]
        if not json_only:
            numbers += [math.nan, math.inf, -math.inf]
        return st.one_of(letters, containers, st.sampled_from(numbers))
    if annotation is float:
        numbers = ["nan", "inf", "-Infinity", 10**400] + ([] if json_only else [math.nan, math.inf])
        return st.one_of(letters, containers, st.sampled_from(numbers))
    if annotation is str:
        return st.one_of(containers, st.sampled_from([0, -1, 1.5, 1e308, True, False, 2**70]))
    return st.nothing()


_INVALID_TEXT = st.builds(lambda a, b, c: a + b + c, _text(8),
                          st.sampled_from(["\x00", "\ud800", "\udfff", "\udc80", "a\x00b", "\ud83d"]), _text(8))
_EXTRA_KEY = st.one_of(st.sampled_from(EXTRA_KEYS), _text(20))
_EXTRA_VALUE = st.one_of(st.none(), st.integers(), _text())


# --- calls ------------------------------------------------------------------------------------

def _parameters(spec: ToolSpec) -> list[inspect.Parameter]:
    return list(inspect.signature(spec.fn, eval_str=True).parameters.values())[1:]


@dataclass(frozen=True)
class _Parameter:
    """One argument's prebuilt strategies (building them per draw would cost more than the call)."""

    name: str
    required: bool
    annotation: Any
    plain: st.SearchStrategy
    hostile: st.SearchStrategy
    wrong: st.SearchStrategy


def _prepared(spec: ToolSpec, pool: dict[str, tuple], tables: tuple[str, ...], json_only: bool) -> list[_Parameter]:
    return [_Parameter(p.name, p.default is inspect.Parameter.empty, p.annotation,
                       well_typed(p.annotation, p.name, pool, tables, False),
                       well_typed(p.annotation, p.name, pool, tables, True), wrong_typed(p.annotation, json_only))
            for p in _parameters(spec)]


@st.composite
def _call(draw: st.DrawFn, spec: ToolSpec, params: list[_Parameter], faults: tuple[str, ...]) -> FuzzCall:
    """A call of `spec` with one fault (drawn from `faults`) and otherwise well-typed arguments."""
    fault = draw(st.sampled_from(faults))
    hostile = fault != "valid"
    arguments: dict[str, Any] = {}
    for p in params:
        if p.required or draw(st.booleans()):  # optional arguments are often left out
            arguments[p.name] = draw(p.hostile if hostile else p.plain)
    if fault == "not_a_mapping":
        return FuzzCall(spec, draw(st.sampled_from([None, [], ["x", 1], "x=1", 42, list(arguments.items())])),
                        fault, ("arguments",))
    if fault == "missing":
        required = [p.name for p in params if p.required]
        if not required:
            return FuzzCall(spec, arguments, "valid")
        name = draw(st.sampled_from(required))
        del arguments[name]
        return FuzzCall(spec, arguments, fault, (name,))
    if fault == "extra":
        taken = {p.name for p in params}
        key = draw(_EXTRA_KEY.filter(lambda k: k not in taken))
        arguments[key] = draw(_EXTRA_VALUE)
        return FuzzCall(spec, arguments, fault, (repr(key)[:30],))
    typed = [p for p in params if p.annotation in (int, float, str) or _literal_values(p.annotation)]
    texts = [p for p in params if p.annotation is str]
    if fault == "wrong_type" and typed:
        p = draw(st.sampled_from(typed))
        arguments[p.name] = draw(p.wrong)
        return FuzzCall(spec, arguments, fault, (p.name,))
    if fault == "invalid_text" and texts:
        p = draw(st.sampled_from(texts))
        arguments[p.name] = draw(_INVALID_TEXT)
        return FuzzCall(spec, arguments, fault, (p.name,))
    return FuzzCall(spec, arguments, "hostile" if hostile else "valid")


def fuzz_call(spec: ToolSpec, pool: dict[str, tuple], tables: tuple[str, ...], json_only: bool = False,
              faults: tuple[str, ...] = FAULTS) -> st.SearchStrategy[FuzzCall]:
    """Calls of `spec`, each with one of `faults` and otherwise well-typed arguments. `json_only`:
    only values JSON can carry (for MCP), so no NaN, no infinity, no arguments that are not a mapping."""
    faults = tuple(f for f in faults if not (json_only and f == "not_a_mapping"))
    return _call(spec, _prepared(spec, pool, tables, json_only), faults)


def domain_call(domain: Domain, pool: dict[str, tuple], json_only: bool = False,
                faults: tuple[str, ...] = FAULTS) -> st.SearchStrategy[FuzzCall]:
    """A fuzz call of any of the domain's tools."""
    tables = tuple(domain.metadata.tables)
    return st.one_of([fuzz_call(spec, pool, tables, json_only, faults) for spec in domain.tools])


# --- checks -----------------------------------------------------------------------------------

def answer_problems(call: FuzzCall, text: str, is_error: bool) -> list[str]:
    """What is wrong with the answer `text` to `call` (empty when it is a right answer)."""
    problems = []
    if call.refused and not is_error:
        problems.append(f"a {call.fault} call was accepted")
    if is_error:
        if not text.startswith("Error"):
            problems.append("the error does not start with 'Error'")
        if "Traceback" in text or 'File "' in text:
            problems.append("the error carries a Python traceback")
        if len(text) > MAX_ERROR_CHARS:
            problems.append(f"the error is {len(text)} characters long")
        if call.refused:
            problems += [f"the error does not name {name!r}" for name in call.named if name not in text]
    return problems


# --- the arena --------------------------------------------------------------------------------

def _digest(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


class Arena:
    """A backend work dir holding a domain's template, the episode clone the calls go to, and a
    sibling clone nobody should touch."""

    def __init__(self, workdir: Path, domain: Domain):
        self.root = workdir
        self.backend = SQLiteBackend(str(workdir))
        self.domain = domain
        self.template = self.backend.ensure_template(f"fuzz_{domain.name}", domain.metadata, domain.base_rows())
        self.sibling = self.backend.clone(self.template)
        self._owned: list[EpisodeDatabase] = []
        self.episode = self.own_clone()
        self.pool = value_pool(self.episode.engine, domain.metadata)

    def own_clone(self) -> EpisodeDatabase:
        """Another clone the calls may write to (the direct twin of an MCP episode)."""
        db = self.backend.clone(self.template)
        self._owned.append(db)
        return db

    def owns(self, path: Path) -> bool:
        """An episode database the calls may write, or its rollback journal."""
        return any(path.parent == file.parent and path.name.startswith(file.name)
                   for file in map(sqlite_file, self._owned))

    def outside(self) -> dict[str, str]:
        """sha256 of every file in the work dir except the episodes' own."""
        return {str(p.relative_to(self.root)): _digest(p) for p in sorted(self.root.rglob("*"))
                if p.is_file() and not self.owns(p)}

    def close(self) -> None:
        for db in (self.sibling, *self._owned):
            self.backend.drop(db)
        self.backend.close()


def sqlite_file(db: EpisodeDatabase) -> Path:
    return Path(db.url.removeprefix("sqlite:///"))
