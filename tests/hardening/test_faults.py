"""Injected faults (tbx/episodes/faults.py): every fault at every site (tool call, DB connection, user reply,
judge call), failing at once or hanging, ends its episode as the error outcome of that site's type;
the stages re-run it within `eval.max_error_retries`; no error is ever scored 0; campaigns finish
in bounded time; and the verdicts that survive are the clean run's.

Faults are drawn per call from a per-try fault seed, so a re-run of an attempt (which keeps the
attempt's own seed) draws faults afresh and each campaign here is reproducible. Injected hangs last
`faults.hang_s=0.2` in campaigns; in the single episodes they last until `call_timeout_s=1` cuts them (the real calls of those episodes, a
template clone among them, run under the same limit, and on a loaded machine one took over 0.2 s).
"""

import asyncio
import json
import random
import re
import time
from collections import Counter, defaultdict
from dataclasses import replace

import pytest

from tbx.catalog import prepare_task
from tbx.config import FaultsConfig
from tbx.config.values import validate_faults
from tbx.domains import get_domain
from tbx.episodes import Outcome, run_episode
from tbx.episodes.faults import SITE_OUTCOMES, SITES, draw
from tbx.errors import ConfigError
from tbx.grading.judge import EvidenceJudge, Judge
from tbx.policies.reference import OraclePolicy
from tbx.records import ERROR_OUTCOMES, StoredTry
from tbx.store.results import read_records
from tbx.tasks import load_task
from tbx.users.base import UserSession, UserSimulator
from tests.helpers.episodes import LIMITS, world_of
from tests.helpers.stage import make_cfg, run
from tests.stages.coin import true_rate

MOCK = get_domain("mock")
TIMEOUT = 1.0
CUT = replace(LIMITS, call_timeout_s=TIMEOUT)  # hung calls cut at TIMEOUT
COIN = ["policy._target_=tests.stages.coin.CoinPolicy", "policy.name=coin"]
CHAOS = ["faults=chaos", f"faults.hang_s={TIMEOUT}"]  # real calls keep eval.call_timeout_s


def judged_mock_tasks() -> list[dict]:
    """The mock tasks, each with a judge rule the reference satisfies (every reference ends in "Done")."""
    return [dict(t, checks=dict(t.get("checks", {}), judge=[{"id": "told", "rule": "The agent said it is done.",
                                                             "evidence": ["done"]}]))
            for t in MOCK.generate_tasks(0)]


def judged_task_file(tmp_path) -> list[str]:
    path = tmp_path / "judged.json"
    path.write_text(json.dumps({"tasks": judged_mock_tasks()}))
    return ["tasks=files", f"tasks.path={path}", "judge=evidence"]


# -- the draw ---------------------------------------------------------------------------------------


def test_draw_is_seeded_and_hits_the_configured_share():
    cfg = FaultsConfig(tool=0.15, db=0.0, user=1.0, hang=0.25)
    draws = [draw(cfg, seed, "tool", i) for seed in range(400) for i in range(10)]
    assert draws == [draw(cfg, seed, "tool", i) for seed in range(400) for i in range(10)]  # reproducible
    hits = [d for d in draws if d is not None]
    # 4000 draws at 15%: 600 expected, sd ~22.6; hangs 25% of the hits
    assert 530 <= len(hits) <= 670 and 0.18 <= hits.count("hang") / len(hits) <= 0.32
    assert all(draw(cfg, s, "db", 0) is None for s in range(200))  # rate 0: never
    assert all(draw(cfg, s, "user", 3) is not None for s in range(200))  # rate 1: always
    other = FaultsConfig(tool=0.15, hang=0.25, seed=1)
    assert draws != [draw(other, seed, "tool", i) for seed in range(400) for i in range(10)]


def test_bad_fault_settings_name_the_field():
    with pytest.raises(ConfigError, match=r"conf/faults/chaos.yaml: field 'faults.user': is 1.5"):
        validate_faults(FaultsConfig(name="chaos", user=1.5), 1.0)
    with pytest.raises(ConfigError, match=r"field 'eval.call_timeout_s': is 0"):
        validate_faults(FaultsConfig(), 0)


@pytest.mark.parametrize("stage", ["eval", "probe", "train", "serve"])
def test_a_bad_fault_rate_stops_the_command_at_composition(stage):
    """One line before any task is prepared or any store opened: the config's own check."""
    from tests.launch import compose_cfg

    with pytest.raises(ConfigError) as error:
        compose_cfg(f"stage={stage}", "faults=chaos", "faults.tool=1.5", "serve.agent_name=a")
    assert (error.value.source, error.value.field) == ("conf/faults/chaos.yaml", "faults.tool")


# -- one episode per site and kind ------------------------------------------------------------------


def seed_where(cfg: FaultsConfig, site: str, wanted: list[str | None]) -> int:
    """The first episode seed whose first draws at `site` are `wanted` (e.g. the reader, not the clone)."""
    return next(s for s in range(10_000) if [draw(cfg, s, site, i) for i in range(len(wanted))] == wanted)


CASES = [(site, kind, [kind]) for site in SITES for kind in ("fail", "hang")] + [
    ("db", "hang", [None, "hang"]),  # the clone passes, the grader's reader hangs
    ("tool", "fail", [None, "fail"]),  # the first tool call passes, the second crashes
]


def leftover_databases(backend) -> list:
    """Episode databases still there: files on SQLite, databases made and not dropped on PostgreSQL."""
    return sorted(backend._live) if backend.kind == "postgres" else list(backend.episodes.glob("*.sqlite"))


@pytest.mark.parametrize(("site", "kind", "wanted"), CASES, ids=[f"{s}-{k}-{len(w)}" for s, k, w in CASES])
def test_each_site_fails_or_hangs_into_its_error_outcome(site, kind, wanted, backend):
    runtime = prepare_task(load_task(judged_mock_tasks()[0], "judged", MOCK.policy), backend)
    cfg = FaultsConfig(**{site: 0.5}, hang=1.0 if kind == "hang" else 0.0)
    seed = seed_where(cfg, site, wanted)
    start = time.perf_counter()
    result = asyncio.run(run_episode(world_of(backend, judge=EvidenceJudge(), limits=CUT, faults=cfg), runtime,
                                     OraclePolicy(), 0, seed))
    took = time.perf_counter() - start
    assert result.outcome.value == SITE_OUTCOMES[site] and result.reward is None, result.cause
    assert result.extra["faults"] == [{"site": site, "kind": kind, "call": len(wanted) - 1}]
    assert re.search(r"did not answer within 1(\.0)? s" if kind == "hang" else "injected fault", result.cause), result.cause
    assert took < TIMEOUT + 2.0  # a hang costs the limit, not more (PostgreSQL clones take ~10 ms)
    assert not leftover_databases(backend)  # the episode database was dropped (or never made)
    clean = asyncio.run(run_episode(world_of(backend, judge=EvidenceJudge()), runtime, OraclePolicy(), 0,
                                    seed))  # the usual limits: on a loaded machine a real call may take 0.2 s
    assert clean.outcome is Outcome.SUCCESS and "faults" not in clean.extra


class HangingUser(UserSimulator):
    """A real (not injected) hang: the simulator never answers."""

    def session(self, scenario, seed):
        class Session(UserSession):
            def opening(self):
                return scenario.opening_message

            async def reply(self, conversation):
                await asyncio.sleep(3600)

        return Session()


class HangingJudge(Judge):
    async def decide(self, rule, transcript):
        await asyncio.sleep(3600)


def test_real_hangs_are_bounded_by_the_call_timeout(tmp_path):
    from tbx.backend import make_backend

    backend = make_backend("sqlite", None, str(tmp_path))
    runtime = prepare_task(load_task(judged_mock_tasks()[0], "judged", MOCK.policy), backend)
    start = time.perf_counter()
    user = asyncio.run(run_episode(world_of(backend, user=HangingUser(), limits=CUT), runtime, OraclePolicy(), 0, 0))
    judge = asyncio.run(run_episode(world_of(backend, judge=HangingJudge(), limits=CUT), runtime, OraclePolicy(), 0, 0))
    assert time.perf_counter() - start < 2 * TIMEOUT + 2.0
    assert user.outcome is Outcome.USER_SIM_ERROR and "user simulator did not answer" in user.cause
    assert judge.outcome is Outcome.VERIFIER_ERROR and "judge on rule told did not answer" in judge.cause
    backend.close()


# -- campaigns --------------------------------------------------------------------------------------


def account(records: list[StoredTry], max_retries: int) -> dict:
    """Check every stored try against the fault it carries and return the tallies.

    - a try with an injected fault ends as its site's error outcome, reward None (never 0);
    - a try with no injected fault reaches a verdict: no error comes from anywhere else;
    - an attempt is re-run only after an error, at most `max_retries` times.
    """
    injected, errors, tries = Counter(), Counter(), defaultdict(list)
    for r in records:
        faults = r.extra.get("faults", [])
        assert len(faults) <= 1, r.extra  # the first fault ends the episode
        if faults:
            injected[faults[0]["site"]] += 1
            assert r.outcome == SITE_OUTCOMES[faults[0]["site"]], (faults, r.outcome, r.cause)
        else:
            assert r.outcome in ("success", "failure"), (r.outcome, r.cause)
        if r.outcome in ERROR_OUTCOMES:
            errors[r.outcome.value] += 1
            assert r.reward is None
        tries[(r.task_id, r.attempt)].append(r)
    for key, ts in tries.items():
        ts.sort(key=lambda r: r.try_index)
        assert [r.try_index for r in ts] == list(range(len(ts))) and len(ts) <= 1 + max_retries, key
        assert all(r.outcome in ERROR_OUTCOMES for r in ts[:-1]), key  # re-run only after an error
        if ts[-1].outcome in ERROR_OUTCOMES:
            assert len(ts) == 1 + max_retries, key  # gave up only when the retries were spent
    assert sum(injected.values()) == sum(errors.values())
    finals = {key: ts[-1] for key, ts in tries.items()}
    return {"injected": injected, "errors": errors, "finals": finals,
            "retries": sum(len(ts) - 1 for ts in tries.values())}


def verdict_pass_at_1(finals: dict) -> float:
    judged = [r.outcome == "success" for r in finals.values() if r.outcome in ("success", "failure")]
    return sum(judged) / len(judged)


def coin_says(record: StoredTry) -> str:
    """What CoinPolicy must produce with the attempt's seed, whatever happened to other tries."""
    return "success" if random.Random(record.seed).random() < true_rate(record.task_id) else "failure"


def test_oracle_campaign_with_faults_at_every_site_scores_exactly_one(tmp_path):
    start = time.perf_counter()
    summary = run(make_cfg(tmp_path, *judged_task_file(tmp_path), "policy=oracle", "eval.attempts=12", *CHAOS,
                           "faults.tool=0.15", "faults.db=0.15", "faults.user=0.15", "faults.judge=0.15"))
    took = time.perf_counter() - start
    tally = account(read_records(summary.run_dir), max_retries=2)
    assert set(tally["injected"]) == set(SITES), tally["injected"]  # every site was hit
    assert set(tally["errors"]) == {"infra_error", "user_sim_error", "verifier_error"}
    assert tally["errors"]["infra_error"] == tally["injected"]["tool"] + tally["injected"]["db"]
    assert tally["errors"]["user_sim_error"] == tally["injected"]["user"]
    assert tally["errors"]["verifier_error"] == tally["injected"]["judge"]
    assert summary.pass_at_1 == 1.0 == verdict_pass_at_1(tally["finals"])
    assert summary.counts["failure"] == 0 and summary.error_tries == sum(tally["injected"].values())
    final_errors = sum(r.outcome in ERROR_OUTCOMES for r in tally["finals"].values())
    assert summary.counts["success"] + final_errors == 3 * 12
    assert took < 60  # no hang: each hung call cost 0.2 s


def test_coin_campaign_keeps_the_clean_runs_verdicts(tmp_path):
    tasks = ["tasks=travel", "tasks.per_family=1", "eval.attempts=4", *COIN]
    clean = run(make_cfg(tmp_path, *tasks))
    faulty = run(make_cfg(tmp_path, *tasks, *CHAOS, "faults.judge=0.0"))
    assert clean.run_dir != faulty.run_dir  # the fault settings are part of the run's identity
    base = account(read_records(clean.run_dir), max_retries=2)
    tally = account(read_records(faulty.run_dir), max_retries=2)
    assert not base["injected"] and set(tally["injected"]) == {"tool", "db", "user"}
    survived = 0
    for key, record in tally["finals"].items():
        if record.outcome in ERROR_OUTCOMES:
            continue
        assert record.outcome == coin_says(record)  # the verdict is the policy's, not the faults'
        survived += 1  # every try of an attempt has the attempt's seed: the clean run's verdict
        assert record.outcome == base["finals"][key].outcome, key
    assert survived >= len(tally["finals"]) // 2  # most attempts survive their retries
    assert faulty.pass_at_1 == verdict_pass_at_1(tally["finals"])  # errors are outside the denominator
    # Over the surviving attempts, pass@1 is the clean run's over the same attempts, exactly; the
    # headline moves only by the attempts still in error after their retries.
    same = {key: base["finals"][key] for key, r in tally["finals"].items() if r.outcome not in ERROR_OUTCOMES}
    assert faulty.pass_at_1 == verdict_pass_at_1(same)
    left = len(tally["finals"]) - survived
    assert abs(faulty.pass_at_1 - clean.pass_at_1) <= left / len(tally["finals"]) + 1e-9


def test_probe_with_faults_counts_only_verdicts(tmp_path):
    faulty = run(make_cfg(tmp_path, "stage=probe", "tasks=travel", "tasks.per_family=1", *COIN, "probe.attempts=8",
                          *CHAOS, "faults.tool=0.2", "faults.user=0.2"))
    tally = account(read_records(faulty.run_dir), max_retries=2)
    # the judge too: travel's cancel_refundable has a judge rule, decided by the default evidence judge
    assert {"tool", "db", "user"} <= set(tally["injected"]) <= {"tool", "db", "user", "judge"}
    assert faulty.error_tries == sum(tally["injected"].values()) > 0
    for task_id, row in faulty.tasks.items():
        finals = [r for (t, _), r in tally["finals"].items() if t == task_id]
        judged = [r for r in finals if r.outcome in ("success", "failure")]
        assert (row.k, row.n) == (sum(r.outcome == "success" for r in judged), len(judged))
        assert all(r.outcome == coin_says(r) for r in judged)
        assert row.n <= len(finals) <= 8
    assert faulty.n_tasks == 9 and faulty.rounds >= 2


@pytest.mark.parametrize("workers", [1, 2])
def test_error_tries_played_again_show_in_the_progress_bar(tmp_path, capsys, workers):
    summary = run(make_cfg(tmp_path, "stage=eval", "tasks=mock", "policy=oracle", "eval.attempts=4",
                           f"eval.workers={workers}", "faults.tool=0.5", "faults.hang=0.0"))
    finals = {(r.task_id, r.attempt): r.outcome for r in read_records(summary.run_dir)}
    played_again = summary.error_tries - sum(outcome in ERROR_OUTCOMES for outcome in finals.values())
    assert played_again > 0
    bar = capsys.readouterr().err.replace("\r", "\n").splitlines()[-1]  # the bar as it closed
    plural = "try" if played_again == 1 else "tries"
    assert f"{played_again} error {plural} re-run" in bar, bar
