"""TRL's GRPOTrainer trains SmolLM2-135M for 2 steps on CPU through tbx.envs.trl (examples/trl_grpo.py: TRL's own
generation, the packaged GGUF converted once into the model cache), on the mock domain and on the training sample,
and every reward it trained on is the verdict tbx stored for that rollout, which tbx's grader gives again from the
stored terminal state."""

import json
import math
from pathlib import Path

import pytest

pytest.importorskip("trl", reason="trl is not installed here: scripts/setup_envs.sh builds .venv-envs with it")
pytestmark = [pytest.mark.envs, pytest.mark.slow]


# mock: a short prompt to generate from; the training sample (policy and five tool schemas, ~1,600 tokens) with
# groups of 2 rollouts of up to 32 tokens, to stay within minutes on 2 CPU cores
@pytest.mark.parametrize(("tasks", "rollouts", "tokens"), [("tasks=mock", 4, 48), ("tasks=train_sample", 2, 32)])
def test_grpo_trains_two_steps_on_tbx_verdicts(tmp_path, monkeypatch, tasks, rollouts, tokens):
    from examples.trl_grpo import train
    from tbx.envs import trl as tbx_trl
    from tbx.stages.regrade import _load_runtimes, regrade_record
    from tbx.store.results import read_records
    from tests.envs import overrides

    given = []
    verdict = tbx_trl.reward

    async def tbx_verdict(completions, environments, **kwargs):
        rewards = await verdict(completions, environments, **kwargs)
        given.extend((e.episode.task_id, e.episode.attempt, r) for e, r in zip(environments, rewards, strict=True))
        return rewards

    monkeypatch.setattr(tbx_trl, "reward", tbx_verdict)
    summary = train(2, overrides(tmp_path, tasks), rollouts, tokens)
    print(json.dumps(summary | {"rollouts": given}))  # the figures docs/environments.md quotes
    assert summary["steps"] == 2 and len(summary["rewards"]) == 2
    assert all(math.isfinite(r) for r in summary["rewards"])
    for step, logged in enumerate(summary["rewards"]):  # what TRL logged: the mean verdict of the step's group
        verdicts = [r for _, _, r in given[rollouts * step:rollouts * (step + 1)] if r is not None]
        assert logged == pytest.approx(sum(verdicts) / len(verdicts))
    records = {(r.task_id, r.attempt): r for r in read_records(summary["run_dir"])}
    assert len(given) == len(records) == 2 * rollouts  # 2 steps x a group of rollouts, each stored once
    runtimes = _load_runtimes(Path(summary["run_dir"]))
    for task_id, attempt, reward in given:
        record = records[(task_id, attempt)]
        assert record.reward == reward and record.extra["policy"] == "trl"
        if reward is not None:  # a verdict: the grader gives it again from the stored terminal state
            assert regrade_record(record, runtimes[task_id]) is record.outcome
