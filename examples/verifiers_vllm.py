"""verifiers' own evaluation command runs tbx tasks against the embedded model served by tbx's vLLM
(docs/environments.md).

    TBX_VLLM_PYTHON=.venv-vllm/bin/python .venv-envs/bin/python examples/verifiers_vllm.py [tbx overrides ...]

tbx starts vLLM (its CPU build here) for the default model, SmolLM2-135M, as `model.kind=vllm` does;
`vf-eval tbx-tasks` (envs/verifiers) evaluates the task set against its OpenAI-compatible endpoint with
verifiers' chat harness in the subprocess runtime; the server is stopped on every way out. Prints vf-eval's
report, then one JSON line: seconds (server start, evaluation), the outcomes tbx stored, the run folders.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

SAMPLE = ["tasks=travel", "tasks.per_family=1"]


def evaluate(overrides: list[str], out: Path) -> dict:
    from tbx.envs.episodes import compose
    from tbx.policies.vllm import serve
    from tbx.store.results import read_records
    from tbx.vllm_server import stop_shared

    cfg = compose("verifiers", overrides)
    start = time.perf_counter()
    try:
        served = serve(cfg.model, seed=cfg.seed)
        ready = time.perf_counter() - start
        bin_dir = Path(sys.executable).parent
        command = [str(bin_dir / "vf-eval"), "tbx-tasks", "-m", served.server.spec.served_name, "--client.base-url",
                   served.server.base_url, "--client.api-key-var", "TBX_NO_KEY", "--no-push", "-o", str(out / "vf"),
                   "--env.player.runtime.type", "subprocess", "--env.player.max-turns", "6",
                   "--sampling.max-tokens", "128", "-c", "9", "--env.taskset.overrides", json.dumps(overrides)]
        env = dict(os.environ, TBX_NO_KEY="unused", PATH=f"{bin_dir}:{os.environ['PATH']}")
        mark = time.perf_counter()
        subprocess.run(command, env=env, check=True, timeout=3600)
        evaluated = time.perf_counter() - mark
    finally:
        stop_shared()
    (run_dir,) = Path(cfg.out_root).glob(f"serve-{cfg.tasks.name}-verifiers-*")
    outcomes = [r["outcome"] for r in read_records(run_dir)]
    return {"server_start_s": round(ready, 1), "vf_eval_s": round(evaluated, 1), "episodes": len(outcomes),
            "outcomes": {o: outcomes.count(o) for o in sorted(set(outcomes))}, "run_dir": str(run_dir),
            "vf_dir": str(out / "vf")}


if __name__ == "__main__":
    given = sys.argv[1:] or SAMPLE
    root = Path(next((a.split("=", 1)[1] for a in given if a.startswith("out_root=")), "outputs"))
    print(json.dumps(evaluate(given, root)))
