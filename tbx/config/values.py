"""Values a type cannot express: ranges, and settings that must agree with each other. `Config.__post_init__`
expands `~` and `$VAR` in the path settings (`expand_paths`) and runs `check_values`, so `OmegaConf.to_object`
(`config_object`, tbx/config/checks.py) refuses a bad config before any stage sees it; enumerations are Enum
fields of the schema (tbx/config/choices.py) and fail earlier still, at compose time.

Each check applies only where the stage uses the setting (`eval` does not stop on `grpo.group_size=1`):
`check_values` runs the checks every stage shares, then the stage's own, listed by stage name in
`STAGE_CHECKS` (the config sits below the stages, so it names them; tbx/runs/stages.py checks that each
name is a stage, and refuses an unknown stage). Each mistake is one `ConfigError` naming the option file,
the field and the fix.
What needs the environment (endpoints' keys, whether paths exist, logins, an installed vLLM) is
tbx/stages/environment.py's (`check_config`); so is calling `check_turn_timeout`, defined here, which
checks the turn limit against the retry budget of each model endpoint a run calls.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import TYPE_CHECKING, Any

from tbx.errors import ConfigError

if TYPE_CHECKING:
    from tbx.config import Config, EndpointConfig, FaultsConfig

CONFIG = "conf/config.yaml"
LOOPBACK = ("127.0.0.1", "localhost", "::1")  # bind addresses that need no bearer token (serve, view)
_AGENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # it names the run folder


def option_file(cfg: Config, key: str) -> str:
    """Where the value of `key` is set: its group's option file, or the primary config."""
    group = key.partition(".")[0]
    names = {"model": cfg.model.name, "pool": cfg.pool.name, "tasks": cfg.tasks.name, "user": cfg.user.name,
             "judge": cfg.judge.name, "hardware": cfg.hardware.name}
    if group in names:
        return f"conf/{group}/{names[group]}.yaml"
    if group in ("backend", "logger", "grpo", "difficulty", "stage", "policy"):
        return f"conf/{group}"
    if group == "serve":
        return "conf/stage/serve.yaml"
    return CONFIG


def value_of(cfg: Config, key: str) -> Any:
    value: Any = cfg
    for part in key.split("."):
        value = getattr(value, part)
    return value


def fail(cfg: Config, key: str, problem: str, fix: str) -> ConfigError:
    return ConfigError(option_file(cfg, key), key, problem, fix)


def _expanded(value: Any) -> Any:
    if isinstance(value, str):
        return os.path.expandvars(os.path.expanduser(value))
    if isinstance(value, list):
        return [_expanded(item) for item in value]
    return value


def expand_paths(node: Any) -> None:
    """`~` and `$VAR` in every path setting (fields marked `"path": True`), in place, as a shell would:
    a variable that is not set stays as written, so the path check names it."""
    for spec in dataclasses.fields(node):
        value = getattr(node, spec.name)
        if spec.metadata.get("path"):
            setattr(node, spec.name, _expanded(value))
        elif dataclasses.is_dataclass(value):
            expand_paths(value)


def check_values(cfg: Config) -> None:
    """Raise the first mistake among the values this stage uses, as a ConfigError: the checks every stage
    shares, then the stage's own (`STAGE_CHECKS`)."""
    if cfg.backend.kind == "postgres" and not cfg.backend.url:
        raise fail(cfg, "backend.url", "is empty", "give backend.url=postgresql+psycopg://USER@HOST:PORT/DB")
    if cfg.eval.workers is not None:  # every campaign stage, and the prepared-task cache, spread over them
        _at_least(cfg, "eval.workers", 1)
    for check in STAGE_CHECKS.get(cfg.stage.name, ()):
        check(cfg)


def check_turn_timeout(cfg: Config, endpoint: EndpointConfig) -> None:
    """A turn limit inside the endpoint's own retry budget would count a dead endpoint as the agent's
    failure (a turn past its limit is the agent's; an endpoint that does not answer is infra_error).
    `check_config` runs it with the checks of the endpoints a run calls."""
    limit, budget = cfg.eval.turn_timeout_s, endpoint.timeout_s * (endpoint.max_retries + 1)
    if limit is not None and limit <= budget:
        raise fail(cfg, "eval.turn_timeout_s", f"is {limit:g} s, within the model endpoint's retry budget of "
                   f"{budget:g} s (timeout_s x (max_retries + 1))", f"give eval.turn_timeout_s > {budget:g}, or "
                   "lower model.endpoint.timeout_s or max_retries")


def _at_least(cfg: Config, key: str, low: int) -> None:
    value = value_of(cfg, key)
    if value is None or value < low:
        raise fail(cfg, key, f"is {value}", f"give {key} >= {low}")


def check_eval_counts(cfg: Config) -> None:
    for key in ("eval.attempts", "eval.concurrency"):
        _at_least(cfg, key, 1)


def check_served_attempts(cfg: Config) -> None:
    _at_least(cfg, "eval.attempts", 1)


def check_episode_limits(cfg: Config) -> None:
    """Error re-runs and the turn cap of the episodes a campaign plays (their waits: check_episode_timeouts)."""
    _at_least(cfg, "eval.max_error_retries", 0)
    _at_least(cfg, "eval.resume_error_retries", 0)
    if cfg.eval.max_turns is not None:
        _at_least(cfg, "eval.max_turns", 1)


def check_episode_timeouts(cfg: Config) -> None:
    """The waits of every stage that plays episodes (tbx/episodes/limits.py)."""
    if cfg.eval.turn_timeout_s is not None and not cfg.eval.turn_timeout_s > 0:
        raise fail(cfg, "eval.turn_timeout_s", f"is {cfg.eval.turn_timeout_s}", "give seconds > 0, or null")
    if not cfg.eval.episode_timeout_s > 0:
        raise fail(cfg, "eval.episode_timeout_s", f"is {cfg.eval.episode_timeout_s}", "give seconds > 0")


def check_probe(cfg: Config) -> None:
    for key in ("probe.attempts", "probe.min_attempts", "probe.round_size"):
        _at_least(cfg, key, 1)
    if not 0.0 <= cfg.probe.threshold <= 1.0:
        raise fail(cfg, "probe.threshold", f"is {cfg.probe.threshold}", "give a value in [0, 1]")


def check_grpo(cfg: Config) -> None:
    if cfg.grpo.group_size < 2:
        raise fail(cfg, "grpo.group_size", f"is {cfg.grpo.group_size}: a group of one has no relative advantage",
                   "give grpo.group_size >= 2 (the reference uses 8)")
    for key in ("grpo.groups_per_step", "grpo.steps", "grpo.save_every", "grpo.micro_batch_size"):
        _at_least(cfg, key, 1)
    if cfg.grpo.keep_checkpoints is not None and cfg.grpo.keep_checkpoints < 1:
        raise fail(cfg, "grpo.keep_checkpoints", f"is {cfg.grpo.keep_checkpoints}; a resumed run needs the newest "
                   "checkpoint", "give grpo.keep_checkpoints >= 1, or null to keep every checkpoint")
    if cfg.grpo.verl_stall_s is not None and cfg.grpo.verl_stall_s <= 0:
        raise fail(cfg, "grpo.verl_stall_s", f"is {cfg.grpo.verl_stall_s}",
                   "give the seconds a verl run may go without storing an episode, logging a step or writing a "
                   "checkpoint (e.g. 1800), or null")
    if cfg.grpo.lr <= 0:
        raise fail(cfg, "grpo.lr", f"is {cfg.grpo.lr}", "give a positive learning rate (the reference: 1e-6)")
    if cfg.grpo.trainer == "native" and cfg.grpo.kl_coef != 0:
        raise fail(cfg, "grpo.kl_coef", f"is {cfg.grpo.kl_coef}, but the native trainer keeps no reference model",
                   "give grpo.kl_coef=0, or train with grpo.trainer=verl (its KL loss uses a reference model)")
    if cfg.grpo.is_threshold is not None:
        check_is_threshold(cfg)
    if cfg.grpo.max_staleness < 0:
        raise fail(cfg, "grpo.max_staleness", f"is {cfg.grpo.max_staleness}",
                   "give 0 (synchronous) or the number of weight versions a trained turn may lag (e.g. 1)")


def check_is_threshold(cfg: Config) -> None:
    """The truncated importance weight's cap (tbx/rl/correction.py), where the trainer can apply it."""
    threshold, key = cfg.grpo.is_threshold, "grpo.is_threshold"
    if not threshold > 1.0:
        raise fail(cfg, key, f"is {threshold}; a cap at or below 1 down-weights every token the trainer finds at "
                   "least as likely as the sampler did", f"give {key} > 1 (verl's default 2.0), or null (off)")
    if cfg.model.temperature != 1.0:
        raise fail(cfg, key, f"is set, but model.temperature is {cfg.model.temperature}; vLLM's log-probs are the "
                   "raw (temperature 1) ones, so the weight would compare two distributions",
                   f"sample at model.temperature=1.0, or give {key}=null")


def check_pipeline(cfg: Config) -> None:
    _at_least(cfg, "pipeline.eval_attempts", 1)


def check_serve(cfg: Config) -> None:
    """The served agent's name, the address, and a token wherever other machines can connect."""
    serve = cfg.serve
    if not serve.agent_name:
        raise fail(cfg, "serve.agent_name", "is not set; it names the served agent's run (two agents under one "
                   "name would resume each other's results)", "give serve.agent_name=NAME, e.g. my_agent_v2")
    if not _AGENT_NAME.fullmatch(serve.agent_name):
        raise fail(cfg, "serve.agent_name", f"is {serve.agent_name!r}; it names the run folder",
                   "use letters, digits, '.', '_' and '-' (at most 64, starting with a letter or digit)")
    if not 0 <= serve.port <= 65535:
        raise fail(cfg, "serve.port", f"is {serve.port}", "give a port in 0..65535 (0: any free port)")
    if not serve.idle_timeout_s > 0:
        raise fail(cfg, "serve.idle_timeout_s", f"is {serve.idle_timeout_s}", "give a positive number of seconds")
    if serve.transport == "http" and serve.host not in LOOPBACK and not serve.token_env:
        raise fail(cfg, "serve.token_env", f"is not set, but serve.host={serve.host} is reachable from other "
                   "machines", "export a token in a variable and name it: serve.token_env=TBX_SERVE_TOKEN "
                   "(clients send 'Authorization: Bearer <token>'), or bind serve.host=127.0.0.1")


def check_view(cfg: Config) -> None:
    view = cfg.view
    if not 0 <= view.port <= 65535:
        raise fail(cfg, "view.port", f"is {view.port}", "give a port in 0..65535 (0: any free port)")
    if view.page_size < 1:
        raise fail(cfg, "view.page_size", f"is {view.page_size}", "give view.page_size >= 1")
    if view.export is None and view.host not in LOOPBACK and not view.token_env:
        raise fail(cfg, "view.token_env", f"is not set, but view.host={view.host} is reachable from other machines",
                   "export a token in a variable and name it: view.token_env=TBX_VIEW_TOKEN, or bind "
                   "view.host=127.0.0.1")


def check_bands(cfg: Config) -> None:
    """Band edges sorted from 0 to 1, one name per band, and every pool range end on an edge."""
    from tbx.stats.difficulty import validate_band_names, validate_edges
    from tbx.stats.pool import PoolStrategy, kept_bands

    try:
        edges = validate_edges(cfg.difficulty.edges)
    except ConfigError as exc:
        raise fail(cfg, "difficulty.edges", exc.problem, exc.fix) from None
    try:
        validate_band_names(cfg.difficulty.names, edges)
    except ConfigError as exc:
        raise fail(cfg, "difficulty.names", exc.problem, exc.fix) from None
    try:
        kept_bands(PoolStrategy(cfg.pool.name, tuple(tuple(r) for r in cfg.pool.keep_ranges)), edges)
    except ConfigError as exc:
        raise fail(cfg, "pool.keep_ranges", exc.problem, exc.fix) from None


FAULT_SITES = ("tool", "db", "user", "judge")  # where tbx/episodes/faults.py injects failures


def validate_faults(faults: FaultsConfig, call_timeout_s: float) -> None:
    """Injected faults' rates are shares in [0, 1]; a hang needs a finite per-call limit to end. Checked when
    the config is composed (`check_faults`) and when an episode world is built from hand-made settings."""
    source = f"conf/faults/{faults.name}.yaml"
    for key in (*FAULT_SITES, "hang"):
        value = getattr(faults, key)
        if not 0.0 <= value <= 1.0:
            raise ConfigError(source, f"faults.{key}", f"is {value}", "give a share between 0 and 1")
    if not call_timeout_s > 0:
        raise ConfigError("conf/config.yaml", "eval.call_timeout_s", f"is {call_timeout_s}",
                          "give a limit in seconds > 0 (a hung call must end)")
    if faults.hang_s is not None and not faults.hang_s > 0:
        raise ConfigError(source, "faults.hang_s", f"is {faults.hang_s}",
                          "give seconds > 0, or null to hang until eval.call_timeout_s")


def check_faults(cfg: Config) -> None:
    validate_faults(cfg.faults, cfg.eval.call_timeout_s)


_EPISODE_CHECKS = (check_episode_limits, check_episode_timeouts, check_faults)
# Each stage's own checks of the values it uses, by stage name (a stage of tbx/runs/stages.py, which checks
# the names; a stage not named here has none): the config is below the stages, so it names them, never imports them.
STAGE_CHECKS: dict[str, tuple] = {
    "eval": (check_eval_counts, *_EPISODE_CHECKS),
    "serve": (check_served_attempts, *_EPISODE_CHECKS, check_serve),
    "validate": (check_episode_timeouts,),
    "probe": (*_EPISODE_CHECKS, check_probe, check_bands),
    "select": (check_bands,),
    "view": (check_view,),
    "train": (check_episode_timeouts, check_faults, check_grpo),
    "pipeline": (*_EPISODE_CHECKS, check_probe, check_grpo, check_pipeline, check_bands),
}
