"""What a campaign costs, from measured token usage and per-model prices (pure).

Each stored try (`tbx.records.StoredTry`) carries `usage` per role ("agent", "user", "judge"), each with
prompt and completion tokens. A role's tokens are priced with the prices of the model that
played it, and the roles stay separate lines, so a pricey judge never hides inside the agent's
bill. Every record passed in is billed, errors and exclusions included (their tokens were spent);
pass every try, not only final records, to bill retried errors too.

Costs carry a category (evaluation, probing, training). As in the reference, the cost per
successful attempt and per reliable task are evaluation-only: a probing or training bill is its
own category and can never be added to an evaluation bill.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tbx.errors import InputError
from tbx.records import EpisodeResult

ROLES = ("agent", "user", "judge")
CATEGORIES = ("evaluation", "probing", "training")


@dataclass(frozen=True)
class Prices:
    """USD per million tokens of one model."""

    input_per_million: float  # prompt tokens
    output_per_million: float  # completion tokens

    def usd(self, prompt_tokens: int, completion_tokens: int) -> float:
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
    """Tokens and dollars of one role played by one model (one episode, or summed)."""

    role: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    usd: float

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def _role_order(role: str) -> tuple[int, str]:
    return (ROLES.index(role) if role in ROLES else len(ROLES), role)


def episode_cost(record: EpisodeResult, models: Mapping[str, str],
                 prices: Mapping[str, Prices]) -> tuple[CostLine, ...]:
    """One line per role in the record's usage. `models` maps role -> model name.

    A role with tokens but no model, or a model without prices, raises: an unpriced call would
    silently make the campaign look cheaper. A role with no tokens costs 0 and needs neither.
    """
    lines = []
    where = f"record {record.task_id!r} attempt {record.attempt}"
    for role in sorted(record.usage, key=_role_order):
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
    def total_usd(self) -> float:
        return sum(line.usd for line in self.lines)

    @property
    def prompt_tokens(self) -> int:
        return sum(line.prompt_tokens for line in self.lines)

    @property
    def completion_tokens(self) -> int:
        return sum(line.completion_tokens for line in self.lines)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

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
    return CostLine(role, models, sum(x.prompt_tokens for x in lines),
                    sum(x.completion_tokens for x in lines), sum(x.usd for x in lines))


def _merge(lines: Iterable[CostLine]) -> tuple[CostLine, ...]:
    groups: dict[tuple[str, str], list[CostLine]] = {}
    for line in lines:
        groups.setdefault((line.role, line.model), []).append(line)
    merged = [_sum_lines(role, group) for (role, _), group in groups.items()]
    return tuple(sorted(merged, key=lambda x: (_role_order(x.role), x.model)))


def campaign_cost(records: Iterable[EpisodeResult], models: Mapping[str, str],
                  prices: Mapping[str, Prices], category: str = "evaluation") -> CampaignCost:
    """Sum of episode_cost over records, kept per (role, model)."""
    if category not in CATEGORIES:
        raise ValueError(f"unknown cost category {category!r}; use one of {CATEGORIES}")
    lines: list[CostLine] = []
    episodes = 0
    for record in records:
        lines.extend(episode_cost(record, models, prices))
        episodes += 1
    return CampaignCost(category, _merge(lines), episodes)


@dataclass(frozen=True)
class ReliabilityCost:
    """Evaluation cost per unit of result.

    per_success = campaign cost / successful attempts; per_reliable_task = campaign cost / tasks
    at k/k. Each is None (not infinity, so it survives JSON) when its denominator is zero.
    """

    campaign_usd: float
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
        per_success=total / successes if successes else None,
        per_reliable_task=total / reliable_tasks if reliable_tasks else None)
