"""What a campaign costs, from measured token usage and per-model prices (pure).

Each stored try (`tbx.records.StoredTry`) carries `usage` per role ("agent", "user", "judge"), each with
prompt and completion tokens. A role's tokens are priced with the prices of the model that
played it, and the roles stay separate lines, so a pricey judge never hides inside the agent's
bill. Every record passed in is billed, errors and exclusions included (their tokens were spent);
pass every try, not only final records, to bill retried errors too.

A cost tbx cannot know is None ("n/a" in every table), never $0.00: tokens spent on a model with no
price (0 in and out, the config's default, reads as "no price given"), and a role whose tokens tbx
never sees (a served agent runs outside tbx: `unseen` roles), whose tokens are None too.

Costs carry a category (evaluation, probing, training). As in the reference, the cost per
successful attempt and per reliable task are evaluation-only: a probing or training bill is its
own category and can never be added to an evaluation bill.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tbx.errors import InputError
from tbx.records import EpisodeResult

ROLES = ("agent", "user", "judge")
CATEGORIES = ("evaluation", "probing", "training")


@dataclass(frozen=True)
class Prices:
    """USD per million tokens of one model."""

    input_per_million: float  # prompt tokens
    output_per_million: float  # completion tokens

    @property
    def priced(self) -> bool:
        """False for 0 in and out: the config's default, no price given (a cost of n/a, not $0.00)."""
        return self.input_per_million > 0 or self.output_per_million > 0

    def usd(self, prompt_tokens: int, completion_tokens: int) -> float | None:
        """The dollars of these tokens; None when tokens were spent and no price was given."""
        if not self.priced and prompt_tokens + completion_tokens:
            return None
        return (prompt_tokens * self.input_per_million + completion_tokens * self.output_per_million) / 1e6


def parse_price_table(table: Mapping[str, Mapping[str, float]], source: str = "prices") -> dict[str, Prices]:
    """{"model": {"input": usd_per_million, "output": usd_per_million}} -> model name -> Prices."""
    prices: dict[str, Prices] = {}
    for model, entry in table.items():
        if set(entry) != {"input", "output"}:
            raise InputError(source, model, f"has keys {sorted(entry)}",
                             "give exactly 'input' and 'output' in USD per million tokens")
        if entry["input"] < 0 or entry["output"] < 0:
            raise InputError(source, model, f"has a negative price {dict(entry)}", "give prices >= 0")
        prices[model] = Prices(float(entry["input"]), float(entry["output"]))
    return prices


@dataclass(frozen=True)
class CostLine:
    """Tokens and dollars of one role played by one model (one episode, or summed). `usd` None: not known
    (tokens without a price, or tokens tbx never saw); `seen` False: tbx never saw this role's tokens."""

    role: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    usd: float | None
    seen: bool = True

    @property
    def tokens(self) -> int | None:
        return self.prompt_tokens + self.completion_tokens if self.seen else None


def _role_order(role: str) -> tuple[int, str]:
    return (ROLES.index(role) if role in ROLES else len(ROLES), role)


def episode_cost(record: EpisodeResult, models: Mapping[str, str], prices: Mapping[str, Prices],
                 unseen: Iterable[str] = ()) -> tuple[CostLine, ...]:
    """One line per role in the record's usage (and per `unseen` role). `models` maps role -> model name.

    A role with tokens but no model, or a model missing from the price table, raises: an unpriced call
    would silently make the campaign look cheaper. A model in the table at 0 in and out costs None
    (not known). A role with no tokens costs 0 and needs neither; an unseen role is None in both.
    """
    lines = []
    where = f"record {record.task_id!r} attempt {record.attempt}"
    hidden = set(unseen)
    for role in sorted(set(record.usage) | hidden, key=_role_order):
        if role in hidden:
            lines.append(CostLine(role, models.get(role, ""), 0, 0, None, seen=False))
            continue
        usage = record.usage[role]
        prompt, completion = int(usage.prompt_tokens), int(usage.completion_tokens)
        model = models.get(role, "")
        if prompt + completion == 0:
            lines.append(CostLine(role, model, 0, 0, 0.0))
            continue
        if not model:
            raise InputError(where, f"usage.{role}", f"has {prompt + completion} tokens but no model is named "
                             f"for role '{role}'", f"name the model that played '{role}' (models[{role!r}])")
        if model not in prices:
            raise InputError(where, f"usage.{role}", f"model {model!r} has no price",
                             f"add {model!r} to the price table (USD per million input/output tokens)")
        lines.append(CostLine(role, model, prompt, completion, prices[model].usd(prompt, completion)))
    return tuple(lines)


@dataclass(frozen=True)
class CampaignCost:
    """The bill of one category of work, one line per (role, model), summed over episodes."""

    category: str
    lines: tuple[CostLine, ...]
    episodes: int

    @property
    def total_usd(self) -> float | None:
        """The bill; None when a line's cost is not known (a partial sum would read as the whole)."""
        return _sum_known(line.usd for line in self.lines)

    @property
    def prompt_tokens(self) -> int:
        return sum(line.prompt_tokens for line in self.lines)

    @property
    def completion_tokens(self) -> int:
        return sum(line.completion_tokens for line in self.lines)

    @property
    def tokens(self) -> int | None:
        """Every role's tokens; None when a role's were never seen (a served agent's)."""
        return self.prompt_tokens + self.completion_tokens if all(x.seen for x in self.lines) else None

    def by_role(self) -> dict[str, CostLine]:
        """Lines summed per role (a role played by two models becomes one line, model 'a+b')."""
        return {role: _sum_lines(role, [x for x in self.lines if x.role == role])
                for role in sorted({x.role for x in self.lines}, key=_role_order)}

    def __add__(self, other: CampaignCost) -> CampaignCost:
        if other.category != self.category:
            raise ValueError(f"cannot add a {other.category} bill to a {self.category} bill: "
                             "categories are reported separately, never mixed")
        return CampaignCost(self.category, _merge(self.lines + other.lines), self.episodes + other.episodes)


def _sum_lines(role: str, lines: list[CostLine]) -> CostLine:
    models = "+".join(sorted({x.model for x in lines if x.model}))
    return CostLine(role, models, sum(x.prompt_tokens for x in lines), sum(x.completion_tokens for x in lines),
                    _sum_known(x.usd for x in lines), all(x.seen for x in lines))


def _sum_known(values: Iterable[float | None]) -> float | None:
    """The sum, or None when one value is not known."""
    total = 0.0
    for value in values:
        if value is None:
            return None
        total += value
    return total


def _merge(lines: Iterable[CostLine]) -> tuple[CostLine, ...]:
    groups: dict[tuple[str, str], list[CostLine]] = {}
    for line in lines:
        groups.setdefault((line.role, line.model), []).append(line)
    merged = [_sum_lines(role, group) for (role, _), group in groups.items()]
    return tuple(sorted(merged, key=lambda x: (_role_order(x.role), x.model)))


def campaign_cost(records: Iterable[EpisodeResult], models: Mapping[str, str], prices: Mapping[str, Prices],
                  category: str = "evaluation", unseen: Iterable[str] = ()) -> CampaignCost:
    """Sum of episode_cost over records, kept per (role, model); `unseen` roles' tokens tbx never saw."""
    if category not in CATEGORIES:
        raise ValueError(f"unknown cost category {category!r}; use one of {CATEGORIES}")
    lines: list[CostLine] = []
    episodes = 0
    hidden = tuple(unseen)
    for record in records:
        lines.extend(episode_cost(record, models, prices, hidden))
        episodes += 1
    return CampaignCost(category, _merge(lines), episodes)


@dataclass(frozen=True)
class ReliabilityCost:
    """Evaluation cost per unit of result.

    per_success = campaign cost / successful attempts; per_reliable_task = campaign cost / tasks
    at k/k. Each is None (not infinity, so it survives JSON) when its denominator is zero, and all
    are None when the campaign's cost is not known.
    """

    campaign_usd: float | None
    successes: int
    reliable_tasks: int
    per_success: float | None
    per_reliable_task: float | None


def reliability_cost(cost: CampaignCost, successes: int, reliable_tasks: int) -> ReliabilityCost:
    if cost.category != "evaluation":
        raise ValueError(f"cost per success / reliable task is defined on the evaluation bill, not on "
                         f"{cost.category!r} (probing and training costs are reported on their own)")
    if successes < 0 or reliable_tasks < 0:
        raise ValueError(f"negative counts: successes={successes}, reliable_tasks={reliable_tasks}")
    total = cost.total_usd
    return ReliabilityCost(
        campaign_usd=total, successes=successes, reliable_tasks=reliable_tasks,
        per_success=total / successes if successes and total is not None else None,
        per_reliable_task=total / reliable_tasks if reliable_tasks and total is not None else None)


@dataclass(frozen=True)
class RunPricing:
    """Who played each role of a stored run and at what prices, read from its config.yaml: `agent` is the
    label of who played (a served agent's own name, a reference policy's name, else the model's name);
    `unseen` the roles whose tokens tbx never sees (a served agent's)."""

    agent: str
    models: dict[str, str]  # role -> model name ("" where no model plays the role; the agent: its label)
    prices: dict[str, Prices]  # model name -> its prices (0 in and out: no price given)
    unseen: tuple[str, ...]
    agent_plays_model: bool  # False for a reference policy (oracle, null, replay) and a served agent

    @property
    def unpriced(self) -> tuple[str, ...]:
        """Roles played by a model with no price: their tokens' cost is not known."""
        played = {role: model for role, model in self.models.items() if role != "agent" or self.agent_plays_model}
        return tuple(role for role, model in played.items() if model and not self.prices[model].priced)


def _plays_model(target: str) -> bool:
    """Whether the policy a stored run names played its model; a custom policy that cannot be imported
    here is labelled by its own name, like the policies that play none."""
    from tbx.errors import ConfigError
    from tbx.traits import traits_of

    try:
        return traits_of(target, "policy").plays_model
    except ConfigError:
        return False


def run_pricing(run_cfg: Mapping[str, Any]) -> RunPricing:
    """The pricing of a stored run from its resolved config (config.yaml as a mapping)."""
    plays = run_cfg["stage"]["name"] != "serve" and _plays_model(run_cfg["policy"]["_target_"])
    if run_cfg["stage"]["name"] == "serve":  # an agent outside tbx: its own name; its tokens are not known
        agent, agent_prices, unseen = run_cfg["serve"]["agent_name"], Prices(0.0, 0.0), ("agent",)
    elif not plays:
        agent, agent_prices, unseen = run_cfg["policy"]["name"], Prices(0.0, 0.0), ()  # oracle, null, replay
    else:
        model = run_cfg["model"]
        agent, unseen = model["name"], ()
        agent_prices = Prices(float(model["price_input_per_mtok"] or model["endpoint"]["price_input_per_mtok"]),
                              float(model["price_output_per_mtok"] or model["endpoint"]["price_output_per_mtok"]))
    models, prices = {"agent": agent, "user": "", "judge": ""}, {agent: agent_prices}
    for role in ("user", "judge"):
        endpoint = run_cfg[role]["endpoint"]
        if endpoint["model"]:
            models[role] = endpoint["model"]
            prices[endpoint["model"]] = Prices(float(endpoint["price_input_per_mtok"]),
                                               float(endpoint["price_output_per_mtok"]))
    return RunPricing(agent, models, prices, unseen, plays)
