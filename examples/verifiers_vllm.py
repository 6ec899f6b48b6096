"""verifiers' own evaluation command on tbx tasks, against the embedded model served by tbx's vLLM
(docs/environments.md).

    .venv-envs/bin/python examples/verifiers_vllm.py [tbx overrides ...] [-- vf-eval flags ...]
    .venv-envs/bin/python examples/verifiers_vllm.py tasks=mock 'tasks.families=[transfer]' eval.max_turns=3 \
        model.temperature=0.2 -- --env.taskset.tool_format json -r 4
    .venv-envs/bin/python examples/verifiers_vllm.py tasks=travel tasks.per_family=1 eval.max_turns=3 model.context_length=8192

Starts vLLM as tbx does for `model.kind: vllm` (`tbx.policies.vllm.serve`: the packaged GGUF converted once
into the model cache, the CPU build in `.venv-vllm`, tbx's flags), runs `vf-eval tbx-tasks` against its
OpenAI-compatible endpoint with the model group's sampling (`model.max_new_tokens`, `model.temperature`),
and stops it. The tbx overrides name both the served model (`model=...`, `model.context_length=...`) and the
task set (`--env.taskset.overrides`): one list, as on tbx's command line; vf-eval flags go after `--`
(`--env.taskset.tool_format json`: tbx's own prompt and call format, which SmolLM2-135M follows on the mock
transfer tasks). verifiers' chat harness runs in its subprocess runtime. The episodes are stored in the run
folder `<out_root>/serve-<tasks>-verifiers-<hash>/` (`outputs/` by default, as every tbx run; a task set run again
continues it), vf-eval's own results in its `vf-<time>/`. Prints vf-eval's own report, then one JSON line: the
seconds (vLLM start, vf-eval), the run folder, and per episode the reward verifiers recorded beside the verdict
tbx stored for the same task and attempt (and its tool calls).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VF_EVAL = Path(sys.executable).parent / "vf-eval"
# travel's sample; its system prompt (policy + 14 tool schemas) is ~3,700 tokens: 3 turns fit in 8,192
DEFAULT = ["tasks=travel", "tasks.per_family=1", "eval.max_turns=3", "model.context_length=8192"]


def vf_command(base_url: str, served_name: str, overrides: list[str], max_tokens: int, temperature: float,
               out: Path) -> list[str]:
    return [str(VF_EVAL), "tbx-tasks", "-m", served_name, "--client.base-url", base_url,
            "--client.api-key-var", "TBX_VLLM_API_KEY", "--no-push", "-o", str(out),
            "--env.player.runtime.type", "subprocess", "--env.taskset.overrides", json.dumps(overrides),
            "--sampling.max-tokens", str(max_tokens), "--sampling.temperature", f"{temperature:g}"]


def episodes_of(vf_dir: Path) -> list[dict]:
    """Each episode vf-eval saved: its task, tbx attempt, the reward it recorded, whether it failed."""
    out = []
    for path in vf_dir.glob("*/traces.jsonl"):
        for line in path.read_text().splitlines():
            episode = json.loads(line)
            trace = (episode.get("traces") or [{}])[0]
            reward = (trace.get("rewards") or {}).get("tbx_verdict")
            out.append({"task_id": episode["task"]["data"]["task_id"], "attempt": trace.get("info", {}).get("tbx_attempt"),
                        "ok": episode["ok"], "reward": reward["score"] if reward else None,
                        "output_tokens": episode.get("num_output_tokens")})
    return out


def evaluate(overrides: list[str], vf_flags: list[str]) -> dict:
    """Serve the model, run vf-eval against it, stop the server; what ran and what each side recorded."""
    from tbx.envs.episodes import compose
    from tbx.policies.vllm import serve
    from tbx.runs.identity import resolve_run_dir
    from tbx.store.results import read_records
    from tbx.vllm.server import stop_shared

    cfg = compose("verifiers", overrides)
    run_dir = resolve_run_dir(cfg).resolve()
    # vf-eval's process (its own working folder) stores into the same run folder
    words = [*overrides, f"out_root={Path(cfg.out_root).resolve()}", *([f"run_dir={run_dir}"] if cfg.run_dir else [])]
    vf_dir = run_dir / time.strftime("vf-%Y%m%d-%H%M%S")
    vf_dir.mkdir(parents=True)
    started = time.perf_counter()
    try:
        server = serve(cfg.model).server
        ready = time.perf_counter() - started
        command = [*vf_command(server.base_url, server.spec.served_name, words, cfg.model.max_new_tokens,
                               cfg.model.temperature, vf_dir), *vf_flags]
        env = os.environ | {"TBX_VLLM_API_KEY": "unused",  # vLLM started by tbx takes any key
                            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), str(ROOT / "envs" / "verifiers"),
                                                                       os.environ.get("PYTHONPATH")])),
                            "PATH": f"{VF_EVAL.parent}{os.pathsep}{os.environ['PATH']}"}
        evaluated = time.perf_counter()
        done = subprocess.run(command, env=env, cwd=vf_dir)
        vf_seconds = time.perf_counter() - evaluated
        engine = server.engine()
    finally:
        stop_shared()
    stored = {(r.task_id, r.attempt): r for r in read_records(run_dir)}
    verdicts = {key: {"tbx_outcome": r.outcome.value, "tbx_reward": r.reward,
                      "tbx_tool_calls": r.counts.get("tool_calls")} for key, r in stored.items()}
    episodes = [e | verdicts.get((e["task_id"], e["attempt"]), {"tbx_outcome": None, "tbx_reward": None})
                for e in episodes_of(vf_dir)]
    return {"returncode": done.returncode, "vllm_ready_s": round(ready, 1), "vf_eval_s": round(vf_seconds, 1),
            "engine": engine, "model": server.spec.served_name, "context_length": cfg.model.context_length,
            "max_tokens": cfg.model.max_new_tokens, "episodes": episodes, "stored": len(stored),
            "run_dir": str(run_dir), "vf_dir": str(vf_dir)}


def main(argv: list[str]) -> int:
    split = argv.index("--") if "--" in argv else len(argv)
    overrides, vf_flags = argv[:split] or list(DEFAULT), argv[split + 1:]
    summary = evaluate(overrides, vf_flags)
    rewards = [e["reward"] for e in summary["episodes"] if e["reward"] is not None]
    summary["mean_reward"] = round(sum(rewards) / len(rewards), 3) if rewards else None
    print(json.dumps(summary))
    return summary["returncode"]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
