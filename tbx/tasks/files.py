"""Finding and reading task files, bounded before anything is read.

`tasks.path` names a file or a folder the user controls, so what it names is checked by its
`stat` first: a named pipe, a device (`/dev/zero`), a socket or a symlink loop is refused by its
type, and a file over `MAX_FILE_BYTES` by its size, before a byte is read (a pipe would block the
start forever, a device would be read without end, and a 50 MB YAML file takes minutes to parse).
Nesting is bounded while parsing: YAML is scanned as a stream of events (no recursion) and stops at
`MAX_DEPTH` levels, before a composer or the JSON encoder could recurse past Python's limit.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import yaml

from tbx.errors import TaskFormatError

TASK_FILE_SUFFIXES = (".yaml", ".yml", ".json", ".jsonl")
MAX_FILE_BYTES = 2 * 1024 * 1024  # ~2,000 tasks; parsing takes about a second per MiB on a loaded CPU
MAX_DEPTH = 64  # a task is ~6 levels deep; tool arguments or seed rows may nest a few more
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: faster than the pure-Python loader
_KINDS = {stat.S_IFIFO: "a named pipe", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a folder"}


def _fail(path: Path | str, problem: str, fix: str, field: str = "tasks.path") -> TaskFormatError:
    return TaskFormatError(str(path), field, problem, fix)


def file_status(path: Path) -> os.stat_result:
    """The `stat` of what `path` names once links are followed; a loop, a dangling link or a missing
    file is one line."""
    try:
        return path.stat()
    except OSError as exc:
        if exc.errno == 40:  # ELOOP
            raise _fail(path, "is a symlink loop", "point the link at a task file, or remove it") from None
        if path.is_symlink():
            raise _fail(path, f"is a link to {os.readlink(path)}, which does not exist",
                        "point the link at a task file, or remove it") from None
        raise _fail(path, "does not exist" if exc.errno == 2 else f"cannot be read ({exc.strerror})",
                    "give an existing task file or folder") from None


def check_task_file(path: Path, status: os.stat_result) -> None:
    """Refuse what is not a regular file of bounded size, by its type and size alone."""
    if not stat.S_ISREG(status.st_mode):
        kind = _KINDS.get(stat.S_IFMT(status.st_mode), "not a regular file")
        raise _fail(path, f"is {kind}, not a task file", "give a regular YAML/JSON file, or a folder of them")
    if status.st_size > MAX_FILE_BYTES:
        raise _fail(path, f"is {status.st_size / 2**20:.1f} MiB, over the {MAX_FILE_BYTES // 2**20} MiB a task "
                    "file may hold", "split it into several files in one folder and give the folder as tasks.path")


def task_files(path: Path) -> list[Path]:
    """The task files of `tasks.path`, each checked by type and size: the file itself, or every file
    with a task suffix under the folder. A file in the folder that is a link to somewhere outside it
    is refused: a task set stays in its folder."""
    status = file_status(path)
    if not stat.S_ISDIR(status.st_mode):
        check_task_file(path, status)
        return [path]
    root = path.resolve()
    files = sorted(p for p in path.rglob("*") if p.suffix in TASK_FILE_SUFFIXES)
    for file in files:
        file_stat = file_status(file)
        target = file.resolve()
        if not target.is_relative_to(root):
            raise _fail(file, f"is a link to {target}, outside the task folder {root}",
                        "copy the file into the folder, or give its own path as tasks.path")
        check_task_file(file, file_stat)
    return files


def _too_deep(source: str, line: object) -> TaskFormatError:
    return _fail(source, f"nests lists or mappings deeper than {MAX_DEPTH} levels (line {line})",
                 "flatten the data; a task needs a few levels", "(file)")


def _where(mark: yaml.Mark | None) -> str:
    """`line L, column C` of a YAML mark (both counted from 1), as an editor shows them."""
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "line ?"


def _self_alias(source: str, event: yaml.AliasEvent) -> TaskFormatError:
    return _fail(source, f"the alias *{event.anchor} ({_where(event.start_mark)}) is inside the value its anchor "
                 f"&{event.anchor} names, so that value would contain itself", "write the value out, or refer "
                 "only to an anchor whose value has ended before the alias", "(file)")


def _bounded_yaml(text: str, source: str) -> object:
    """The YAML document, its nesting bounded and an alias to a value it is inside (a value that would
    contain itself, which no task can hold and JSON cannot write) refused, both from the event stream."""
    open_anchors: list[str | None] = []  # the anchor of each collection not yet ended
    try:
        for event in yaml.parse(text, Loader=_LOADER):
            if isinstance(event, yaml.CollectionStartEvent):
                open_anchors.append(event.anchor)
                if len(open_anchors) > MAX_DEPTH:
                    raise _too_deep(source, event.start_mark.line + 1 if event.start_mark else "?")
            elif isinstance(event, yaml.CollectionEndEvent):
                open_anchors.pop()
            elif isinstance(event, yaml.AliasEvent) and event.anchor in open_anchors:
                raise _self_alias(source, event)
    except yaml.MarkedYAMLError as exc:  # libyaml's scanner, which reads ahead, stops at its own 1,000 levels
        if "nesting depth" not in str(exc.problem):
            raise
        raise _too_deep(source, exc.problem_mark.line + 1 if exc.problem_mark else "?") from None
    return yaml.load(text, Loader=_LOADER)


def _depth(value: object) -> int:
    """How deeply lists and mappings nest in `value` (iterative: no recursion limit)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _json_line(line: str, source: str, number: int) -> object:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        raise _fail(source, f"is not valid YAML/JSON at line {number}, column {exc.colno}: {exc.msg}",
                    "fix the syntax there (one task object per line)", "(file)") from None
    except RecursionError:
        too_deep = True
    else:
        too_deep = _depth(value) > MAX_DEPTH
    if too_deep:
        raise _too_deep(source, number)
    return value


def parse_task_text(text: str, source: str, jsonl: bool) -> object:
    """The parsed content of a task file: JSON lines, or YAML (which JSON is)."""
    try:
        if jsonl:
            return [_json_line(line, source, i + 1) for i, line in enumerate(text.splitlines()) if line.strip()]
        return _bounded_yaml(text, source)
    except yaml.MarkedYAMLError as exc:  # where the parser stopped, and what it expected there
        what = ": ".join(part for part in (exc.context, exc.problem) if part)
        raise _fail(source, f"is not valid YAML/JSON at {_where(exc.problem_mark)}: {what}", "fix the syntax there",
                    "(file)") from None
    except yaml.YAMLError as exc:
        raise _fail(source, f"is not valid YAML/JSON: {exc}".splitlines()[0], "fix the syntax", "(file)") from exc


def read_task_text(path: Path) -> str:
    """The text of one task file, checked by type and size first (nothing is opened otherwise)."""
    check_task_file(path, file_status(path))
    source = str(path)
    try:
        with path.open("rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise _fail(source, f"cannot be read ({exc.strerror})", "check the path", "(file)") from exc
    if len(data) > MAX_FILE_BYTES:  # grew since its stat
        check_task_file(path, path.stat())
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise _fail(source, f"is not UTF-8 text (byte 0x{data[exc.start]:02x} on line {line})",
                    "save the file as UTF-8", "(file)") from None
