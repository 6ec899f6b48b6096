"""τ² environments for episodes: built once, reused, put back by restoring what an episode reached.

τ²'s own path builds a fresh `Environment` from its `db.json` for every episode (7 MB for airline:
most of an episode's cost, docs/tau2.md). Here a domain's database is parsed once per process and
every environment is built once; each top-level collection of its database (airline's `flights`,
`users`, `reservations`; retail's `products`, `users`, `orders`) is a `Reached` dict that records
which records a writing tool touched (read, replaced, added or removed). Putting the environment
back validates only those records again from the parsed document, so the next episode starts from
exactly the database `db.json` gives. A write that walks a whole collection marks it whole, and the
whole collection is rebuilt. Reading tools (τ² declares each tool's type) do not mark anything: they
only read.

`tests/tau2/test_environment.py` checks that a put-back environment hashes like a fresh one after
the gold actions and the mutations of every task.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Any, get_args

from pydantic import TypeAdapter

from tbx.tau2.package import tau2_domain_module, tool_type_of


class Reached(dict):
    """A collection of a τ² database that records which records writes reached (`keys_reached`), or that a
    write walked all of it (`whole`). Recording is on only while `recording` (a writing tool runs)."""

    __slots__ = ("keys_reached", "recording", "whole")

    def __init__(self, items: dict) -> None:
        super().__init__(items)
        self.keys_reached: set[str] = set()
        self.recording = False
        self.whole = False

    def _mark(self, key: Any) -> None:
        if self.recording:
            self.keys_reached.add(key)

    def _walk(self) -> None:
        if self.recording:
            self.whole = True

    def __getitem__(self, key: Any) -> Any:
        self._mark(key)
        return super().__getitem__(key)

    def get(self, key: Any, default: Any = None) -> Any:
        self._mark(key)
        return super().get(key, default)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._mark(key)
        super().__setitem__(key, value)

    def __delitem__(self, key: Any) -> None:
        self._mark(key)
        super().__delitem__(key)

    def pop(self, key: Any, *default: Any) -> Any:
        self._mark(key)
        return super().pop(key, *default)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self._mark(key)
        return super().setdefault(key, default)

    def values(self):  # type: ignore[override]
        self._walk()
        return super().values()

    def items(self):  # type: ignore[override]
        self._walk()
        return super().items()

    def __iter__(self) -> Iterator[Any]:
        self._walk()
        return super().__iter__()

    def update(self, *args: Any, **kwargs: Any) -> None:
        self._walk()
        super().update(*args, **kwargs)

    def popitem(self) -> tuple[Any, Any]:
        self._walk()
        return super().popitem()

    def clear(self) -> None:
        self._walk()
        super().clear()


def entry_json(value: Any) -> str | None:
    """A record as τ²'s database hash sees it (`json.dumps(model_dump(), sort_keys=True, default=str)`),
    None when absent: two databases hash alike exactly when every record's text is alike."""
    if value is None:
        return None
    dumped = value.model_dump() if hasattr(value, "model_dump") else value
    return json.dumps(dumped, sort_keys=True, default=str)


@dataclass
class Tau2Domain:
    """One τ² domain in this process: its database document parsed once, how to validate a record of each
    collection, and its idle environments."""

    name: str  # τ²'s name: airline | retail
    document: dict[str, Any]  # db.json, parsed once; never changed
    adapters: dict[str, TypeAdapter]  # collection -> the record type's validator
    policy: str
    digest: str  # db.json's sha256 (16 hex digits): the initial state every episode starts from
    idle: list[Any] = field(default_factory=list)
    texts: dict[tuple[str, Any], str | None] = field(default_factory=dict)  # initial_json's

    def fresh_record(self, collection: str, key: Any) -> Any:
        return self.adapters[collection].validate_python(self.document[collection][key])

    def initial_json(self, collection: str, key: Any) -> str | None:
        """The record's text in the database `db.json` gives (None: no such record); kept once made."""
        if (collection, key) not in self.texts:
            present = key in self.document[collection]
            self.texts[collection, key] = entry_json(self.fresh_record(collection, key)) if present else None
        return self.texts[collection, key]

    def build(self) -> Any:
        """A new environment over its own database, every collection a `Reached`."""
        module = tau2_domain_module(self.name)
        database = module_db_class(module).model_validate(self.document)
        for collection in self.adapters:
            database.__dict__[collection] = Reached(getattr(database, collection))
        return module.get_environment(db=database)

    def acquire(self) -> Any:
        return self.idle.pop() if self.idle else self.build()

    def release(self, environment: Any) -> None:
        """Put `environment` back as `db.json` gives it and keep it for the next episode."""
        restore(self, environment)
        self.idle.append(environment)


def collections(environment: Any) -> dict[str, Reached]:
    database = environment.tools.db
    return {name: value for name, value in database.__dict__.items() if isinstance(value, Reached)}


def restore(domain: Tau2Domain, environment: Any) -> None:
    """Validate again every record a write reached (the whole collection when one was walked or a record
    was removed, which would move it in the collection's order), and forget what was reached."""
    for name, records in collections(environment).items():
        pristine = domain.document[name]
        removed = any(key in pristine and not dict.__contains__(records, key) for key in records.keys_reached)
        if records.whole or removed:
            dict.clear(records)
            for key in pristine:
                dict.__setitem__(records, key, domain.fresh_record(name, key))
        else:
            for key in records.keys_reached:
                if key in pristine:
                    dict.__setitem__(records, key, domain.fresh_record(name, key))
                elif dict.__contains__(records, key):
                    dict.__delitem__(records, key)
        records.keys_reached, records.whole, records.recording = set(), False, False


def module_db_class(module: Any) -> type:
    """The database model of a τ² domain's environment module (its `get_environment(db: X | None)`)."""
    annotation = module.get_environment.__annotations__["db"]
    if isinstance(annotation, str):
        annotation = eval(annotation, vars(module))  # τ² writes Optional[FlightDB]
    return next(arg for arg in get_args(annotation) if arg is not type(None))


@cache
def tau2_domain(name: str) -> Tau2Domain:
    """The τ² domain `name` of this process (its document is read once)."""
    module = tau2_domain_module(name)
    db_class = module_db_class(module)
    utils = __import__(f"tau2.domains.{name}.utils", fromlist=["x"])
    path = getattr(utils, f"{name.upper()}_DB_PATH")
    data = open(path, "rb").read()
    document = json.loads(data)
    adapters = {}
    for collection, info in db_class.model_fields.items():
        args = get_args(info.annotation)
        if not args or len(args) != 2:
            raise TypeError(f"τ² {name}: the database field {collection} is not a dict of records")
        adapters[collection] = TypeAdapter(args[1])
    policy = open(getattr(utils, f"{name.upper()}_POLICY_PATH"), encoding="utf-8").read()
    return Tau2Domain(name, document, adapters, policy, hashlib.sha256(data).hexdigest()[:16])


def call_tool(environment: Any, name: str, arguments: dict[str, Any], call_id: str = "") -> tuple[str, bool]:
    """One tool call as τ²'s orchestrator makes it (`Environment.get_response`): its text and whether it is an
    error ("Error: <message>", as τ² writes it). A writing tool's reach is recorded."""
    from tau2.data_model.message import ToolCall

    writing = tool_type_of(environment, name) != "read"
    reached = collections(environment).values()
    for records in reached:
        records.recording = writing
    try:
        message = environment.get_response(ToolCall(id=call_id, name=name, arguments=arguments))
    finally:
        for records in reached:
            records.recording = False
    return message.content or "", bool(message.error)
