"""Checks of the configuration that need the environment, run by launch.py after the typed config is built
(`check_config`): the endpoints the run will call (URL, model, the key's environment variable: its name, never
its value), a W&B login for online logging, the served agent's or viewer's token variable, the task path and
domains, a pool manifest's finetune, an installed vLLM. Each is checked only where the stage uses it (its
registry entry, tbx/runs/stages.py; a stage's own checks are listed by its name in `ENVIRONMENT_CHECKS`), and
each mistake is one `ConfigError` naming the file, the field and the fix. The composition checks before it
are tbx/config/checks.py's; the values a type cannot express, tbx/config/values.py's.

Reads the environment only: does the task path exist, is the key's variable set, is there a W&B login.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tbx.config import Config, EndpointConfig
from tbx.config.values import check_turn_timeout, fail, value_of
from tbx.errors import ConfigError, InputError
from tbx.process.durable import check_folder_path
from tbx.runs.stages import Stage, stage_of
from tbx.traits import traits_of


def check_config(cfg: Config) -> None:
    """Raise the first mistake among the settings this stage uses that needs the environment, as a
    ConfigError (the values themselves were checked when the typed config was built)."""
    stage = stage_of(cfg)
    if cfg.logger.kind == "wandb" and cfg.logger.mode == "online" and not _wandb_login():
        raise fail(cfg, "logger.mode", "is online, but WANDB_API_KEY is not set and ~/.netrc holds no W&B login",
                   "export WANDB_API_KEY=<key> (or run `wandb login`), or log offline: logger=wandb_offline")
    _check_path_kinds(cfg)
    for check in ENVIRONMENT_CHECKS.get(stage.name, ()):
        check(cfg)
    if stage.loads_tasks:
        _check_tasks(cfg)
    if stage.name == "train" and cfg.train.pool:
        _check_pool_finetune(cfg, Path(cfg.train.pool))
    if cfg.model.path and "model" in stage.uses and (_plays_model(cfg, stage) or stage.name == "serve_model"):
        _check_model_folder(Path(cfg.model.path))
    for key, endpoint in _endpoints_used(cfg, stage):
        _check_endpoint(cfg, key, endpoint)
        if key == "model.endpoint":
            check_turn_timeout(cfg, endpoint)
    _check_engine(cfg, stage)


def _check_path_kinds(cfg: Config) -> None:
    """Path settings that name the wrong kind of thing, by `stat` alone: a folder setting that is a file or
    lies below one, and a summary_path that is a folder (found here, not when the run has ended)."""
    for key in ("backend.workdir", "launcher.folder", "run_dir"):
        value = value_of(cfg, key)
        if value:
            check_folder_path(Path(value), key)
    if cfg.summary_path:
        path = Path(cfg.summary_path)
        if path.is_dir():
            raise ConfigError(str(path), "summary_path", "is a folder; summary_path names the file the summary "
                              "JSON is written to", f"give summary_path={path / 'summary.json'} (a file in it)")
        check_folder_path(path.parent, "summary_path")


def _check_model_folder(directory: Path) -> None:
    """A model folder given as model.path holds a config.json that reads as a JSON object (transformers, vLLM
    and the weight conversion all read it first)."""
    config = directory / "config.json"
    if not config.is_file():
        return  # named where the model loads (no config.json: not a Hugging Face folder)
    try:
        readable = isinstance(json.loads(config.read_text(encoding="utf-8")), dict)
        problem = "is not a JSON object"
    except (OSError, ValueError) as exc:
        readable, problem = False, f"cannot be read as JSON ({str(exc).splitlines()[0]})"
    if not readable:
        raise ConfigError(str(config), "model.path", problem, "point model.path at a folder saved with "
                          "save_pretrained, or restore its config.json")


def check_serve_token(cfg: Config) -> None:
    token = cfg.serve.token_env
    if token and not os.environ.get(token):
        raise fail(cfg, "serve.token_env", f"names the environment variable {token}, which is not set",
                   f"export {token}=<token> before launching, or serve.token_env=null on 127.0.0.1")


def check_view_token(cfg: Config) -> None:
    token = cfg.view.token_env
    if cfg.view.export is None and token and not os.environ.get(token):
        raise fail(cfg, "view.token_env", f"names the environment variable {token}, which is not set",
                   f"export {token}=<token> before launching, or view.token_env=null on 127.0.0.1")


def _plays_model(cfg: Config, stage: Stage) -> bool:
    return stage.plays_episodes and traits_of(cfg.policy._target_, "policy").plays_model


def _check_engine(cfg: Config, stage: Stage) -> None:
    """model.kind=vllm: its requests keep the endpoint's retry budget, within the turn limit; without an
    endpoint tbx starts vLLM, so an interpreter with vLLM must exist."""
    if cfg.model.kind != "vllm" or not _plays_model(cfg, stage):
        return
    check_turn_timeout(cfg, cfg.model.endpoint)
    if cfg.model.endpoint.base_url:
        return
    from tbx.vllm.spec import vllm_python

    try:
        vllm_python(cfg.model.server)
    except ConfigError as exc:
        raise fail(cfg, "model.server.python", exc.problem, exc.fix) from None


def _wandb_login() -> bool:
    """Whether W&B can log in without asking: a key in the environment or a login in ~/.netrc."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    netrc = Path(os.environ.get("NETRC") or Path.home() / ".netrc")
    try:
        return "api.wandb.ai" in netrc.read_text()
    except OSError:
        return False


def _check_tasks(cfg: Config) -> None:
    from tbx.domains import domain_names
    from tbx.tau2 import SOURCES, SPLITS, is_tau2

    tasks = cfg.tasks
    for name in tasks.domains:
        if is_tau2(name):
            from tbx.tau2.package import require_tau2

            require_tau2()
            if tasks.split not in (None, *SPLITS):
                raise fail(cfg, "tasks.split", f"is {tasks.split!r}, not a τ²-bench split",
                            f"use tasks.split=train, test or base (base = both) with {name}")
        elif name not in domain_names():
            raise fail(cfg, "tasks.domains", f"names the unknown domain {name!r}",
                        f"use domains of {', '.join(domain_names())} or τ²-bench's {', '.join(sorted(SOURCES))}")
    if not tasks.domains and not tasks.path:
        raise fail(cfg, "tasks.path", "is not set and no bundled domain is named",
                    "give tasks.path=FILE_OR_DIR, or pick a bundled set (tasks=travel, tasks=sample)")
    if tasks.path:  # by type and size only: nothing is read before the stage starts
        from tbx.tasks.files import task_files

        try:
            task_files(Path(tasks.path).expanduser())
        except InputError as exc:
            raise ConfigError(exc.source, exc.field, exc.problem,
                              f"{exc.fix} (tasks.path, set for tasks={tasks.name})") from None


def _check_pool_finetune(cfg: Config, path: Path) -> None:
    """Both trainers train as the pool manifest was selected (full parameters or LoRA); a `pool=` that says
    otherwise would be ignored, so it is refused."""
    if not path.is_file():
        return  # the stage names a missing manifest itself
    from tbx.catalog import load_manifest

    manifest = load_manifest(str(path), "train.pool")
    if manifest.finetune != cfg.pool.finetune:
        option = manifest.pool.get("name") or "?"
        raise fail(cfg, "pool.finetune", f"is {cfg.pool.finetune}, but train.pool ({path}) was selected for "
                   f"{manifest.finetune}", f"give pool={option} (the pool's own option) or pool.finetune="
                   f"{manifest.finetune}")


def _endpoints_used(cfg: Config, stage: Stage) -> list[tuple[str, EndpointConfig]]:
    """The endpoints the run calls: the model's when its policy plays the model through one, and the user's
    and the judge's where the stage uses that group and its component calls an LLM."""
    used = []
    if cfg.model.kind == "openai" and _plays_model(cfg, stage):
        used.append(("model.endpoint", cfg.model.endpoint))
    if "user" in stage.uses and traits_of(cfg.user._target_, "user").needs_llm:
        used.append(("user.endpoint", cfg.user.endpoint))
    if "judge" in stage.uses and traits_of(cfg.judge._target_, "judge").needs_llm:
        used.append(("judge.endpoint", cfg.judge.endpoint))
    return used


def _check_endpoint(cfg: Config, key: str, endpoint: EndpointConfig) -> None:
    if not endpoint.base_url:
        raise fail(cfg, f"{key}.base_url", "is not set", f"give {key}.base_url=http://HOST:PORT/v1")
    if not endpoint.model:
        raise fail(cfg, f"{key}.model", "is not set", f"give {key}.model=NAME (the name the server serves)")
    variable = endpoint.api_key_env
    if variable and not os.environ.get(variable):
        raise fail(cfg, f"{key}.api_key_env", f"names the environment variable {variable}, which is not set",
                    f"export {variable}=<key> before launching, or {key}.api_key_env=null for a server without a key")


# The checks of one stage's own settings that read the environment, by stage name (run by check_config).
ENVIRONMENT_CHECKS = {"serve": (check_serve_token,), "view": (check_view_token,)}
