"""Campaign cost from token usage, with hand-worked dollars in the comments."""

from __future__ import annotations

import pytest

from tbx.errors import InputError
from tbx.messages import Usage
from tbx.records import StoredTry
from tbx.stats.cost import (
    CampaignCost,
    CostLine,
    Prices,
    campaign_cost,
    episode_cost,
    parse_price_table,
    reliability_cost,
)
from tbx.stats.metrics import outcomes_from_records, summarize
from tests.helpers.records import reference_counts
from tests.store.records import stored

PRICES = {"agent-m": Prices(1.0, 4.0), "sim-m": Prices(0.5, 1.0), "judge-m": Prices(10.0, 30.0)}
MODELS = {"agent": "agent-m", "user": "sim-m", "judge": "judge-m"}


def usage(agent: tuple[int, int] = (0, 0), user: tuple[int, int] = (0, 0),
          judge: tuple[int, int] = (0, 0)) -> dict[str, Usage]:
    return {role: Usage(p, c) for role, (p, c) in {"agent": agent, "user": user, "judge": judge}.items()}


def record(task: str, attempt: int, outcome: str, **tokens: tuple[int, int]) -> StoredTry:
    return stored(task, attempt, outcome, domain="d", usage=usage(**tokens))


def test_episode_cost_prices_each_role_with_its_model() -> None:
    lines = episode_cost(record("a", 0, "success", agent=(2_000_000, 500_000), user=(1_000_000, 100_000),
                                judge=(10_000, 1_000)), MODELS, PRICES)
    # agent 2M * $1 + 0.5M * $4 = $4; user 1M * $0.5 + 0.1M * $1 = $0.6; judge 0.01M * $10 + 0.001M * $30 = $0.13
    assert [(x.role, x.model) for x in lines] == [("agent", "agent-m"), ("user", "sim-m"), ("judge", "judge-m")]
    assert [x.usd for x in lines] == pytest.approx([4.0, 0.6, 0.13])
    assert lines[0].tokens == 2_500_000


def test_unpriced_tokens_are_refused_and_idle_roles_are_free() -> None:
    with pytest.raises(InputError, match="model 'sim-m' has no price"):
        episode_cost(record("a", 0, "success", user=(5, 5)), MODELS, {"agent-m": PRICES["agent-m"]})
    with pytest.raises(InputError, match="no model is named for role 'judge'"):
        episode_cost(record("a", 0, "success", judge=(5, 0)), {"agent": "agent-m"}, PRICES)
    lines = episode_cost(record("a", 0, "success", agent=(1_000_000, 0)), {"agent": "agent-m"}, PRICES)
    assert [(x.role, x.model, x.usd) for x in lines] == [("agent", "agent-m", 1.0), ("user", "", 0.0),
                                                          ("judge", "", 0.0)]


def test_campaign_bills_every_record_including_errors() -> None:
    records = [record("a", 0, "success", agent=(1_000_000, 0)),
               record("a", 1, "infra_error", agent=(500_000, 0)),  # spent, so billed
               record("b", 0, "failure", agent=(0, 250_000), user=(2_000_000, 0))]
    cost = campaign_cost(records, MODELS, PRICES)
    # agent $1 + $0.5 + 0.25M * $4 = $2.5; user 2M * $0.5 = $1
    assert cost.episodes == 3
    assert cost.total_usd == pytest.approx(3.5)
    assert cost.by_role()["agent"] == CostLine("agent", "agent-m", 1_500_000, 250_000, pytest.approx(2.5))
    assert cost.by_role()["user"].usd == pytest.approx(1.0)
    assert cost.tokens == 3_750_000
    # hand-fed counts: one success and no task at k/k -> no cost per reliable task (None)
    rc = reliability_cost(cost, successes=1, reliable_tasks=0)
    assert rc.per_success == pytest.approx(3.5)
    assert rc.per_reliable_task is None


def test_categories_never_mix() -> None:
    probe = campaign_cost([record("a", 0, "success", agent=(1_000_000, 0))], MODELS, PRICES, "probing")
    evaluation = campaign_cost([record("a", 0, "success", agent=(1_000_000, 0))], MODELS, PRICES)
    with pytest.raises(ValueError, match="never mixed"):
        evaluation + probe
    with pytest.raises(ValueError, match="evaluation bill"):
        reliability_cost(probe, 1, 1)
    both = evaluation + evaluation
    assert (both.episodes, both.total_usd, len(both.lines)) == (2, pytest.approx(2.0), 3)
    with pytest.raises(ValueError, match="unknown cost category"):
        campaign_cost([], MODELS, PRICES, "fun")


def test_no_success_means_no_cost_per_success() -> None:
    rc = reliability_cost(CampaignCost("evaluation", (), 0), 0, 0)
    assert (rc.campaign_usd, rc.per_success, rc.per_reliable_task) == (0, None, None)


def test_reference_cost_per_success_and_per_reliable_task() -> None:
    """The published base model: $925.80 for 507 x 20 -> $0.177 per success, $24.36 per 20/20 task.

    Every episode: agent 60,000 prompt + 5,000 completion tokens = $0.06 + $0.02 = $0.08, user
    20,000 prompt tokens = $0.01; over 10,140 episodes $811.20 + $101.40. One judge call of
    1,320,000 prompt tokens at $10 per million adds $13.20: $925.80 in all.
    """
    counts = reference_counts()
    records = [record(f"t{i:03d}", a, "success" if a < c else "failure", agent=(60_000, 5_000), user=(20_000, 0),
                      judge=(1_320_000 if i == a == 0 else 0, 0))
               for i, c in enumerate(counts) for a in range(20)]
    cost = campaign_cost(records, MODELS, PRICES)
    roles = cost.by_role()
    assert [round(roles[r].usd, 2) for r in ("agent", "user", "judge")] == [811.20, 101.40, 13.20]
    assert round(cost.total_usd, 2) == 925.80
    summary = summarize(*outcomes_from_records(records)[:2], attempts=20)
    rc = reliability_cost(cost, summary.successes, summary.tasks_all)
    assert f"{rc.per_success:.3f}" == "0.177"          # 925.80 / 5242 = 0.17661
    assert f"{rc.per_reliable_task:.2f}" == "24.36"    # 925.80 / 38 = 24.363


def test_parse_price_table() -> None:
    table = parse_price_table({"m": {"input": 3, "output": 15}})
    assert table == {"m": Prices(3.0, 15.0)}
    assert table["m"].usd(1_000_000, 1_000_000) == 18.0
    with pytest.raises(InputError, match="'input' and 'output'"):
        parse_price_table({"m": {"in": 3, "output": 15}})
    with pytest.raises(InputError, match="negative"):
        parse_price_table({"m": {"input": -1, "output": 15}})


def test_a_stored_runs_pricing_says_which_costs_are_not_known(tmp_path) -> None:
    from tbx.config import plain
    from tbx.stats.cost import run_pricing
    from tests.helpers.stage import make_cfg

    def pricing(*overrides: str):
        return run_pricing(plain(make_cfg(tmp_path, *overrides)))  # as config.yaml stores it

    local = pricing("policy=model")  # the default model, no price given: 0 in and out
    assert (local.agent, local.unpriced, local.unseen) == ("smollm2_135m", ("agent",), ())
    priced = pricing("policy=model", "model.price_input_per_mtok=1", "user=llm", "user.endpoint.base_url=http://x/v1",
                     "user.endpoint.model=sim-m", "user.endpoint.price_output_per_mtok=2")
    assert priced.unpriced == () and priced.prices["sim-m"] == Prices(0.0, 2.0)
    assert priced.models == {"agent": "smollm2_135m", "user": "sim-m", "judge": ""}
    oracle = pricing("policy=oracle")  # plays no model: spends nothing, costs $0, known
    assert (oracle.agent, oracle.unpriced, oracle.unseen) == ("oracle", (), ())
    assert campaign_cost([record("a", 0, "success")], oracle.models, oracle.prices).total_usd == 0.0
    served = pricing("stage=serve", "serve.agent_name=my_agent")
    assert (served.agent, served.unseen) == ("my_agent", ("agent",))
    bill = campaign_cost([record("a", 0, "success", agent=(0, 0))], served.models, served.prices, unseen=served.unseen)
    assert (bill.total_usd, bill.tokens, bill.by_role()["agent"].tokens) == (None, None, None)
    unpriced = campaign_cost([record("a", 0, "success", agent=(1_000, 10))], local.models, local.prices)
    assert (unpriced.total_usd, unpriced.tokens) == (None, 1_010)
    assert reliability_cost(unpriced, 1, 1).per_reliable_task is None
