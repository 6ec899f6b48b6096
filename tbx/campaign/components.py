"""Build the pluggable parts named by `_target_` (policy, user, judge), the backend and the episode world: the
stage layer's one place that reads the whole config. A user simulator gets its `user` group, a judge its `judge`
group, a policy a `PolicySetup` (its group, the model it plays, the seed, and the free-form `extra` custom
policies read)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tbx.backend import Backend, make_backend
from tbx.config import Config
from tbx.episodes import EpisodeWorld, episode_limits
from tbx.episodes.state import Runtime
from tbx.messages import Usage
from tbx.policies.base import PolicySetup
from tbx.traits import component


def _build(target: str, group: str, settings: Any) -> Any:
    factory = component(target, group)
    build = getattr(factory, "from_config", factory)
    return build(settings)


def build_policy(cfg: Config):  # returns a Policy
    setup = PolicySetup(policy=cfg.policy, model=cfg.model, seed=cfg.seed, extra=cfg.extra)
    return _build(cfg.policy._target_, "policy", setup)


def build_user(cfg: Config):  # returns a UserSimulator
    return _build(cfg.user._target_, "user", cfg.user)


def build_judge(cfg: Config):  # returns a Judge or None
    return None if cfg.judge._target_ is None else _build(cfg.judge._target_, "judge", cfg.judge)


def build_backend(cfg: Config) -> Backend:
    """The run's backend. Its statements are bounded like every other call of an episode; the admin
    URL's server is reached at once, so an unreachable one stops the start with one line."""
    return make_backend(cfg.backend.kind, cfg.backend.url, cfg.backend.workdir, cfg.eval.call_timeout_s)


def build_world(cfg: Config, backend: Backend | None, runtimes: Mapping[str, Runtime]) -> EpisodeWorld:
    """The world every episode of this run plays in (per process): the run's user simulator and judge, the
    `eval` group's limits (a training episode is bounded as an evaluated one) and the injected faults
    (checked here, once)."""
    return EpisodeWorld(backend=backend, runtimes=runtimes, user=build_user(cfg), judge=build_judge(cfg),
                        limits=episode_limits(cfg), faults=cfg.faults)


def episode_cost(cfg: Config, usage: dict[str, Usage]) -> float:
    """USD for one episode's tokens: the agent at the model's prices (when a model plays), the
    user and the judge at their endpoints' prices."""
    def price(tokens: Usage, input_per_mtok: float, output_per_mtok: float) -> float:
        return (tokens.prompt_tokens * input_per_mtok + tokens.completion_tokens * output_per_mtok) / 1e6

    model = cfg.model
    agent_in = model.price_input_per_mtok or model.endpoint.price_input_per_mtok
    agent_out = model.price_output_per_mtok or model.endpoint.price_output_per_mtok
    total = price(usage.get("agent", Usage()), agent_in, agent_out)
    for role, endpoint in (("user", cfg.user.endpoint), ("judge", cfg.judge.endpoint)):
        total += price(usage.get(role, Usage()), endpoint.price_input_per_mtok, endpoint.price_output_per_mtok)
    return total
