"""Benchmark: an evaluation campaign with and without injected faults (`faults=chaos`, tbx/episodes/faults.py).

For each campaign it prints attempts, tries, the faults injected per site, the error outcomes per
type, re-runs, attempts left in error after `eval.max_error_retries`, pass@1 and wall time; then
how many verdicts of the faulty run agree with the clean run's. This is a measurement, not a test:
it asserts nothing (tests/hardening/test_faults.py does).

    .venv/bin/python benchmarks/fault_campaign.py                       # 10% per site, travel + judged mock
    .venv/bin/python benchmarks/fault_campaign.py --rate 0.2 --attempts 8

Campaigns: the 72 travel tasks (tool calls, DB connections, user replies; no judge rules) and the
mock tasks with a judge rule added (so the judge site is hit too, with the evidence judge), each
played by the oracle and by CoinPolicy (tests/stages/coin.py: a stochastic stand-in for a model).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the CoinPolicy test double lives under tests/

from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from tbx.config import register_configs  # noqa: E402
from tbx.domains import get_domain  # noqa: E402
from tbx.episodes.faults import SITES  # noqa: E402
from tbx.launch import run_stage  # noqa: E402
from tbx.records import ERROR_OUTCOMES, Outcome  # noqa: E402
from tbx.store.results import read_records  # noqa: E402

POLICIES = {"oracle": ["policy=oracle"],
            "coin": ["policy._target_=tests.stages.coin.CoinPolicy", "policy.name=coin"]}


def judged_mock_file(folder: Path) -> Path:
    tasks = [dict(t, checks=dict(t.get("checks", {}), judge=[{"id": "told", "rule": "The agent said it is done.",
                                                              "evidence": ["done"]}]))
             for t in get_domain("mock").generate_tasks(0)]
    path = folder / "judged_mock.json"
    path.write_text(json.dumps({"tasks": tasks}))
    return path


def campaign(folder: Path, overrides: list[str]) -> dict:
    """Run one eval campaign; return its figures from the stored tries."""
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        composed = compose("config", overrides=["logger=none", f"out_root={folder}/outputs",
                                                f"backend.workdir={folder}/db", *overrides])
    start = time.perf_counter()
    summary = run_stage(OmegaConf.to_object(composed))
    seconds = time.perf_counter() - start
    records = read_records(summary.run_dir)
    finals = {}
    for r in sorted(records, key=lambda r: r.try_index):
        finals[(r.task_id, r.attempt)] = r
    injected = Counter(f["site"] for r in records for f in r.extra.get("faults", []))
    return {"attempts": len(finals), "tries": len(records), "injected": injected,
            "errors": Counter(r.outcome.value for r in records if r.outcome in ERROR_OUTCOMES),
            "retries": len(records) - len(finals),
            "final_errors": sum(r.outcome in ERROR_OUTCOMES for r in finals.values()),
            "pass_at_1": summary.pass_at_1, "seconds": seconds, "finals": finals}


def agreement(clean: dict, faulty: dict) -> tuple[int, int, int]:
    """(verdicts in the faulty run, of them equal to the clean run's, of them first tries)."""
    both = [(key, r) for key, r in faulty["finals"].items() if r.outcome in (Outcome.SUCCESS, Outcome.FAILURE)]
    same = sum(r.outcome is clean["finals"][key].outcome for key, r in both)
    return len(both), same, sum(r.try_index == 0 for _, r in both)


def row(label: str, c: dict) -> str:
    sites = "/".join(str(c["injected"][s]) for s in SITES)
    errors = "/".join(str(c["errors"][o]) for o in ("infra_error", "user_sim_error", "verifier_error"))
    p1 = "n/a" if c["pass_at_1"] is None else f"{c['pass_at_1']:.4f}"
    return (f"| {label} | {c['attempts']} | {c['tries']} | {sites} | {errors} | {c['retries']} | "
            f"{c['final_errors']} | {p1} | {c['seconds']:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=0.1, help="share of calls that fail or hang, every site")
    parser.add_argument("--attempts", type=int, default=4, help="attempts per task")
    parser.add_argument("--timeout", type=float, default=0.2, help="faults.hang_s: how long an injected hang lasts")
    parser.add_argument("--tasks", choices=["travel", "mock+judge"], nargs="+", default=["travel", "mock+judge"])
    parser.add_argument("--policies", choices=sorted(POLICIES), nargs="+", default=["oracle", "coin"])
    args = parser.parse_args()
    register_configs()
    folder = Path(tempfile.mkdtemp(prefix="tbx-faults-"))
    task_sets = {"travel": ["tasks=travel"],
                 "mock+judge": ["tasks=files", f"tasks.path={judged_mock_file(folder)}", "judge=evidence"]}
    chaos = ["faults=chaos", *(f"faults.{site}={args.rate}" for site in SITES),
             f"faults.hang_s={args.timeout}"]
    print(f"faults: {args.rate:.0%} of calls per site (half fail, half hang for {args.timeout:g} s); "
          f"{args.attempts} attempts per task; eval.max_error_retries=2\n")
    print("| campaign | attempts | tries | injected tool/db/user/judge | infra/user_sim/verifier errors | "
          "re-runs | attempts left in error | pass@1 | seconds |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    notes = []
    for tasks_label in args.tasks:
        for policy in args.policies:
            base = [*task_sets[tasks_label], *POLICIES[policy], f"eval.attempts={args.attempts}"]
            clean = campaign(folder, base)
            faulty = campaign(folder, [*base, *chaos])
            print(row(f"{tasks_label} {policy} clean", clean))
            print(row(f"{tasks_label} {policy} faults", faulty))
            verdicts, same, first = agreement(clean, faulty)
            notes.append(f"{tasks_label} {policy}: {verdicts} verdicts with faults, {same} equal to the clean "
                         f"run's ({first} on the first try, the clean run's seed)")
    print("\n" + "\n".join(notes))


if __name__ == "__main__":
    main()
