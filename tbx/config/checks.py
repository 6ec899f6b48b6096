"""Checks of the configuration before anything runs: every mistake a user can make in a config group
or on the command line becomes one `ConfigError` naming the file, the field and the fix, which
`launch.py` prints as one line and exits with status 2.

In the order launch.py meets them:
- `composition_error`: composes the config once before Hydra does and turns what Hydra and
  OmegaConf raise (an unknown key, a wrong type, an unknown group option, an override that does not
  parse, a mistake inside an option file) into a ConfigError; Hydra itself would print several
  lines and exit with status 1.
- `check_composed`: what composition lets through. Keys added with `+key=value` that the typed
  schema lacks (`OmegaConf.to_object` drops them without a word, so `+eval.attemps=3` would do
  nothing), and a secret written into the config (`+extra.api_key=sk-...`), which would be saved
  with the run and sent to W&B: keys are only ever named by their environment variable.
- `config_object`: `OmegaConf.to_object`, its errors (an unresolvable `${oc.env:...}`) as ConfigError.
  Building the typed config runs `Config.__post_init__`, which checks the values a type cannot express
  (ranges, settings that must agree: tbx/config/values.py); enumerations are Enum fields and fail at
  composition, their choices named.
- then `check_config` (tbx/stages/environment.py): what needs the environment, checked only where the
  stage uses it.

Pure apart from `composition_error` (it composes).
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import math
import re
import typing
from collections.abc import Iterator, Sequence
from enum import Enum
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import tbx.config as tbx_config
from tbx.config import Config
from tbx.config.values import CONFIG
from tbx.errors import ConfigError

_SECRET = re.compile(r"(api[_-]?key|token|secret|password)$", re.IGNORECASE)  # as tbx.runs.sinks redacts for W&B
_IN_FILE = re.compile(r"In '([^']+)': (\w+) raised while composing config:\n(.*)", re.S)
_FULL_KEY = re.compile(r"full_key: (\S+)")
_OBJECT_TYPE = re.compile(r"object_type=(\w+)")
_CHECKOUT = Path(tbx_config.__file__).parents[2]  # the folder holding tbx/
_GIVEN = re.compile(r"Invalid value '([^']*)'")  # OmegaConf's words for a value outside an enumeration


def compose_config(config_dir: str | Path, config_name: str, overrides: Sequence[str]) -> tuple[Any, ConfigError | None]:
    """Compose `config_name` with `overrides` as Hydra would: (the config, None), or (None, the first
    mistake as a ConfigError)."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    try:
        with initialize_config_dir(str(Path(config_dir).resolve()), version_base="1.3"):
            dict_cfg = compose(config_name, overrides=list(overrides))
    except HydraException as exc:
        return None, translate(exc, overrides)
    error = check_composed(dict_cfg, overrides)
    return (None, error) if error is not None else (dict_cfg, None)


def sweep_jobs(overrides: Sequence[str]) -> tuple[list[list[str]], ConfigError | None]:
    """The overrides of every job a multirun (`-m`) of `overrides` would start, as Hydra's basic sweeper
    expands them (`policy=oracle,null_agent eval.attempts=1,2`: four jobs), or the override that does not
    parse as a ConfigError. A `glob(...)` over a group's options needs Hydra's config loader: no jobs, left
    to Hydra."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ValueType
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
        if any(override.value_type == ValueType.GLOB_CHOICE_SWEEP for override in parsed):
            return [], None
        return [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch], None
    except HydraException as exc:
        return [], translate(exc, overrides)


def composition_error(config_dir: str | Path, config_name: str, overrides: Sequence[str]) -> ConfigError | None:
    """The first composition mistake as a ConfigError, or None."""
    return compose_config(config_dir, config_name, overrides)[1]


def check_composed(dict_cfg: Any, overrides: Sequence[str] = ()) -> ConfigError | None:
    """What composition lets through: keys the schema lacks, and a secret written into the config."""
    return unknown_keys(dict_cfg, overrides) or secret_value(dict_cfg, overrides)


def _override_for(key: str, overrides: Sequence[str]) -> str | None:
    """The override that sets `key`: the most specific one (`pool.finetune=x` over `pool=lora`)."""
    found, length = None, -1
    for override in overrides:
        name = override.partition("=")[0].lstrip("+~")
        if (name == key or key.startswith(name + ".") or key.startswith(name + "[")) and len(name) > length:
            found, length = override, len(name)
    return found


def _source(key: str, overrides: Sequence[str]) -> str:
    override = _override_for(key, overrides)
    return f"command line '{_shown(override)}'" if override else CONFIG


def _shown(override: str) -> str:
    """An override as an error repeats it: a secret's value (or a URL with a key) is never repeated."""
    name, _, value = override.partition("=")
    secret = _SECRET.search(name.rpartition(".")[2]) or _has_credentials(value)
    return f"{name}=<not shown>" if secret and value else override


def _schema_fields(schema: Any) -> dict[str, Any]:
    return {f.name: f.type for f in dataclasses.fields(schema)} if dataclasses.is_dataclass(schema) else {}


def _choices(schema: Any, name: str) -> list[str] | None:
    """The values an Enum field of `schema` takes, or None when `name` is not one."""
    if not dataclasses.is_dataclass(schema):
        return None
    declared = typing.get_type_hints(schema).get(name)
    return [member.value for member in declared] if isinstance(declared, type) and issubclass(declared, Enum) else None


def _declared_in(schema: Any) -> str:
    """The module that declares `schema`, a config group's dataclass: `tbx/config/players.py ModelConfig`."""
    if not dataclasses.is_dataclass(schema):
        return "tbx/config/"
    return f"{Path(inspect.getfile(schema)).relative_to(_CHECKOUT)} {schema.__name__}"


def _wrong_value(key: str, schema: Any, detail: str, value: Any, source: str) -> ConfigError:
    """A value of the wrong type or outside an enumeration, with the values or the type it takes."""
    choices = _choices(schema, key.rpartition(".")[2])
    if choices is not None:
        given = f"is {value!r}" if isinstance(value, str) else detail
        return ConfigError(source, key, given, f"use one of {', '.join(choices)}")
    declared = _schema_fields(schema).get(key.rpartition(".")[2])
    where = _declared_in(schema)
    wanted = f"a value of type {declared}" if declared else "a value of the declared type"
    return ConfigError(source, key, detail, f"give {key} {wanted} (declared in {where})")


def translate(exc: Exception, overrides: Sequence[str]) -> ConfigError:
    """A Hydra/OmegaConf composition error as a ConfigError (pure)."""
    from hydra.errors import MissingConfigException, OverrideParseException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

    cause = exc.__cause__
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, MissingConfigException):
        group, _, option = (exc.missing_cfg_file or "").rpartition("/")
        options = [o for o in exc.options or () if not o.endswith("_schema")]
        if not group:
            return ConfigError(f"conf/{option}.yaml", option, "no such config file", "check --config-name")
        return ConfigError(f"conf/{group}/{option}.yaml", group, f"no option {option!r}",
                           f"use one of {', '.join(options)} ({group}=NAME picks conf/{group}/NAME.yaml)")
    if isinstance(exc, OverrideParseException):
        key = exc.override.partition("=")[0] if exc.override else "(override)"
        detail = str(exc).strip().splitlines()
        return ConfigError(f"command line '{_shown(exc.override)}'", key, "cannot be parsed"
                           + (f" ({detail[1].strip()})" if len(detail) > 1 else ""),
                           "write key=value; quote a value with spaces or brackets: key='a b'")
    if first.startswith("Ambiguous value for argument"):
        override = first.partition("'")[2].rpartition("'")[0]
        key, _, value = override.partition("=")
        return ConfigError(f"command line '{_shown(override)}'", key, "holds commas",
                           f"a list: {key}=[{value}]; one string: {key}='{value}'; a sweep over the values: add -m")
    in_file = _IN_FILE.match(str(exc).strip())
    if in_file:  # a mistake inside an option file: Hydra keeps only the message
        option, kind, detail = in_file.groups()
        key, schema = _FULL_KEY.search(detail), _OBJECT_TYPE.search(detail)
        schema_type = getattr(tbx_config, schema.group(1), None) if schema else None
        source, field = f"conf/{option}.yaml", key.group(1) if key else "(file)"
        if kind in ("ConfigKeyError", "ConfigAttributeError") and key:
            error = _unknown_key_error(field, schema_type, ())
            return ConfigError(source, field, error.problem, error.fix)
        problem = detail.strip().splitlines()[0].rstrip(".")
        given = _GIVEN.search(problem)
        if field.rpartition(".")[2] in _schema_fields(schema_type):
            return _wrong_value(field, schema_type, problem, given.group(1) if given else None, source)
        return ConfigError(source, field, problem, "fix the value in the file")
    if isinstance(cause, ConfigAttributeError | ConfigKeyError) and getattr(cause, "full_key", None):
        return _unknown_key_error(cause.full_key, getattr(cause, "object_type", None), overrides)
    if isinstance(cause, ValidationError) and getattr(cause, "full_key", None):
        key, schema = cause.full_key, getattr(cause, "object_type", None)
        return _wrong_value(key, schema, str(cause).strip().splitlines()[0].rstrip("."),
                            getattr(cause, "value", None), _source(key, overrides))
    return ConfigError(CONFIG, "(composition)", first, "check the overrides and the option files they name")


def _unknown_key_error(key: str, schema: Any, overrides: Sequence[str]) -> ConfigError:
    prefix, _, name = key.rpartition(".")
    if prefix and not dataclasses.is_dataclass(schema):  # a free-form dict field: Hydra adds keys with "+"
        return ConfigError(_source(key, overrides), key, f"is a new key of the free-form dict {prefix}",
                           f"add it with a leading +: '+{key}=VALUE', or the whole dict: '+{prefix}={{{name}:VALUE}}'")
    fields = sorted(_schema_fields(schema))
    close = difflib.get_close_matches(name, fields, n=1)
    full = f"{prefix}.{close[0]}" if prefix and close else (close[0] if close else None)
    where = _declared_in(schema)
    listing = f"{'t' if full else 'T'}he keys of {prefix or 'the config'} ({where}): {', '.join(fields)}"
    return ConfigError(_source(key, overrides), key, "unknown key",
                       (f"did you mean {full}? " if full else "") + listing)


def unknown_keys(dict_cfg: Any, overrides: Sequence[str] = ()) -> ConfigError | None:
    """The first key of the composed config that its typed schema does not declare (added with
    `+key=...`); free-form fields (`extra`) may hold anything."""
    from omegaconf import DictConfig, OmegaConf

    def walk(node: Any, path: str) -> ConfigError | None:
        if not isinstance(node, DictConfig):
            return None
        schema = OmegaConf.get_type(node)
        fields = _schema_fields(schema)
        for key in node.keys():
            full = f"{path}.{key}" if path else str(key)
            if fields and key not in fields:
                return _unknown_key_error(full, schema, overrides)
            found = walk(node._get_node(key), full) if fields else None
            if found:
                return found
        return None

    return walk(dict_cfg, "")


def config_object(dict_cfg: Any) -> Config:
    """`OmegaConf.to_object`, with its errors (an interpolation that does not resolve, such as an
    unset `${oc.env:VAR}`) as a ConfigError naming the key."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        return OmegaConf.to_object(dict_cfg)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or "(config)"
        if key.startswith("pool.keep_ranges") and "difficulty.edges[" in str(exc):
            edges = len(dict_cfg.difficulty.edges)
            raise ConfigError(f"conf/pool/{dict_cfg.pool.name}.yaml", "pool.keep_ranges",
                              f"is written as band edges of 5 bands (difficulty.edges[1..4]), but difficulty.edges "
                              f"has {edges} entries", "give 6 edges, or keep ranges on your own edges: "
                              "pool.keep_ranges=[[LOW,HIGH]]") from None
        raise ConfigError(CONFIG, key, str(exc).strip().splitlines()[0].rstrip("."),
                          "fix the value or the interpolation it uses (e.g. export the variable ${oc.env:...} reads)"
                          ) from None


def _leaves(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, value) of every leaf of a composed config, interpolations unresolved."""
    from omegaconf import DictConfig, ListConfig

    items = node.items_ex(resolve=False) if isinstance(node, DictConfig) else \
        enumerate(node) if isinstance(node, ListConfig) else ()
    for key, value in items:
        full = f"{path}.{key}" if path else str(key)
        if isinstance(value, DictConfig | ListConfig):
            yield from _leaves(value, full)
        else:
            yield full, value


def _has_credentials(value: str) -> bool:
    """Whether `value` is a URL with a key in it: a password (`http://user:KEY@host/v1`,
    `postgresql://USER:PASSWORD@HOST/DB`), or a user of an HTTP URL (`http://KEY@host/v1`)."""
    if "@" not in value or "://" not in value:
        return False
    try:
        parts = urlsplit(value.strip())
    except ValueError:
        return False
    return bool(parts.password or (parts.username and parts.scheme.startswith("http")))


def secret_value(dict_cfg: Any, overrides: Sequence[str] = ()) -> ConfigError | None:
    """A value the config must not hold, since it is saved with the run (config.yaml, run.json, .hydra/) and
    sent to W&B: a key that names a secret (`api_key`, `token`, `secret`, `password`) holding a value, a URL
    with credentials in it, or a number that is not finite (nan, inf). A secret is only ever named by its
    environment variable, and the value itself is never repeated."""
    for full, value in _leaves(dict_cfg):
        where = "command line" if _override_for(full, overrides) else CONFIG
        if _SECRET.search(full.rpartition(".")[2]) and isinstance(value, str) and value.strip():
            return ConfigError(where, full, "holds a secret; the config is saved with the run and sent to W&B",
                               "remove it, put the key in an environment variable and name that variable "
                               "(e.g. model.endpoint.api_key_env=MY_KEY_VAR)")
        if isinstance(value, str) and _has_credentials(value):
            return ConfigError(where, full, "holds a user or key inside the URL (scheme://USER:KEY@host); the config "
                               "is saved with the run and sent to W&B", "give the URL without them "
                               "(http://HOST:PORT/v1) and name the key's environment variable "
                               "(e.g. model.endpoint.api_key_env=MY_KEY_VAR); PostgreSQL reads a password from "
                               "PGPASSWORD or ~/.pgpass")
        if isinstance(value, float) and not math.isfinite(value):
            return ConfigError(where, full, f"is {value}, not a finite number", "give a finite number")
    return None
