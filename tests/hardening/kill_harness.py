"""The kill-and-resume harness: real processes that run a stage, SIGKILL them at seeded random
points, run them again until they finish, and what to compare afterwards.

Every run is a real process, forked from a forkserver that has already imported the stages, torch
and transformers (a fresh interpreter spends ~2.5 s importing for eval and probe, ~6 s for
training, before any work). The uninterrupted run and the run that finishes a killed one are
`python launch.py ARGS` (Hydra included); the runs that get killed are the same stage function on
the config composed from the same ARGS, which skips Hydra's ~1.5 s of composition per start so that
a test has room for 20 kills. A kill is SIGKILL: what survives is what the results store and the
checkpoint folder hold at that instant. Kill points are seeded: most land a random delay (up to the
work still to do over the kills still to make) after the process stored its first try, so inside
episodes, store writes, GRPO updates and checkpoint writes; every fourth anywhere in the stage's
start-up (store creation, templates, model loading); a training run is also killed at two exact
points inside checkpoint writes.

Training uses a tiny random llama whose tokenizer has a few whole-action tokens (the mock tasks'
right and wrong tool calls, "Done."), served by a real vLLM that outlives the killed trainers (each
start, and each resume, loads the trainer's weights into it), so the real vLLM policy, parser, MCP
tools and grader give mixed rewards and the steps make real GRPO updates.

Used by `tests/hardening/test_kill_resume.py` and `benchmarks/kill_resume.py`.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import pickle
import random
import signal
import sqlite3
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
COIN = ("policy._target_=tests.stages.coin.CoinPolicy", "policy.name=coin")
PRELOAD = ["launch", "tbx.stages.eval", "tbx.stages.probe", "tbx.stages.train", "tbx.stages.select",
           "tbx.policies.vllm", "tbx.policies.trainable", "tests.stages.coin", "torch", "transformers",
           "transformers.models.llama.modeling_llama", "tests.hardening.kill_harness"]
RUN_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Case:
    """One stage's command (launch.py overrides, without the run folder) and how many kills it gets."""

    stage: str
    args: tuple[str, ...]
    kills: int


@dataclass
class KillLog:
    """What happened to one stage's killed run."""

    stage: str
    kills: int = 0
    in_startup: int = 0  # killed before the process stored its first try
    in_work: int = 0  # killed after it had stored tries
    checkpoint_kills: int = 0  # training: killed at an exact point inside a checkpoint write
    runs: int = 0  # processes started for the killed run, the finishing launch.py one included
    clean_s: float = 0.0  # the uninterrupted run, through launch.py
    work_s: float = 0.0  # of which storing tries, first to last
    rows: int = 0  # tries the uninterrupted run stored
    startup_s: float = 0.0  # re-running the finished run (the stage's start-up, nothing to do)


# --- processes --------------------------------------------------------------------------------
def _redirect(log: str) -> None:
    """In a child: output to `log`; tqdm's default lock holds semaphores a SIGKILL would leak."""
    import threading

    import tqdm

    tqdm.tqdm.set_lock(threading.RLock())
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)


def _launch_child(args: list[str], log: str) -> None:
    """`python launch.py ARGS`, in a forked child."""
    import runpy

    _redirect(log)
    sys.argv = [str(ROOT / "launch.py"), *args]
    runpy.run_path(str(ROOT / "launch.py"), run_name="__main__")


def _stage_child(cfg, log: str) -> None:  # a tbx Config
    """The small entry: the stage on a config the parent composed from the same overrides (Hydra's
    composition is ~80% of launch.py's start-up; the stage, its store and resume logic are the same)."""
    from tbx.launch import run_stage

    _redirect(log)
    run_stage(cfg)


def _dying_child(payload: tuple, log: str) -> None:
    """The stage, SIGKILLing itself at an exact point of writing checkpoint `step`: "state" (state.pt
    written into the partial folder, not yet renamed into place) or "pointer" (the folder renamed,
    latest.json not yet replaced). Random kills rarely hit these few milliseconds."""
    import pathlib

    import torch

    cfg, step, point = payload
    save, write = torch.save, pathlib.Path.write_text

    def save_then_die(obj, *args, **kwargs):
        save(obj, *args, **kwargs)
        if point == "state" and isinstance(obj, dict) and obj.get("step") == step:
            os.kill(os.getpid(), signal.SIGKILL)

    def write_then_die(self, data, *args, **kwargs):
        written = write(self, data, *args, **kwargs)
        if point == "pointer" and self.name == "latest.json.partial" and json.loads(data)["step"] == step:
            os.kill(os.getpid(), signal.SIGKILL)
        return written

    torch.save, pathlib.Path.write_text = save_then_die, write_then_die
    _stage_child(cfg, log)


def forkserver_context() -> multiprocessing.context.BaseContext:
    """The forkserver, started now (it imports PRELOAD once, ~6 s), so no run's timing includes that."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    warm = context.Process(target=os.getpid)
    warm.start()
    warm.join()
    return context


def stop_forkserver() -> None:
    from multiprocessing import forkserver

    stop = getattr(forkserver._forkserver, "_stop", None)  # the server outlives its children otherwise
    if stop is not None:
        stop()


def start(context, target, payload, log: Path):  # a multiprocessing Process
    proc = context.Process(target=target, args=(payload, str(log)), daemon=False)
    proc.start()
    return proc


def finish(proc, log: Path) -> None:
    proc.join(RUN_TIMEOUT_S)
    if proc.is_alive():
        proc.kill()
        proc.join()
    assert proc.exitcode == 0, f"exit {proc.exitcode}:\n{log.read_text()[-3000:]}"


def timed_run(context, target, payload, log: Path) -> float:
    began = time.monotonic()
    finish(start(context, target, payload, log), log)
    return time.monotonic() - began


def launch_args(case: Case, root: Path, run_dir: Path) -> list[str]:
    return [*case.args, "logger=none", f"out_root={root}", f"backend.workdir={root}/db", f"run_dir={run_dir}"]


def compose(args: list[str]):  # a tbx Config
    """What launch.py composes from `args`."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    from tbx.config import register_configs

    register_configs()
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        return OmegaConf.to_object(hydra_compose("config", overrides=args))


# --- what a run left behind ---------------------------------------------------------------------
def query(run_dir: Path, sql: str) -> list[tuple]:
    """Rows of `sql` on the run's results store; [] before the store or its table exists."""
    path = run_dir / "results.sqlite"
    if not path.is_file():
        return []
    conn = sqlite3.connect(path, timeout=5)
    try:
        return conn.execute(sql).fetchall()
    except sqlite3.OperationalError:  # the table is not created yet
        return []
    finally:
        conn.close()


def stored_rows(run_dir: Path) -> list[tuple]:
    """(task, attempt, try, outcome, reward) of every stored try, sorted."""
    return sorted(query(run_dir, "SELECT task_id, attempt, try_index, outcome, reward FROM attempts"))


def work_seconds(run_dir: Path) -> float:
    """From the first stored try to the last: the run's work, without start-up and task preparation."""
    (first, last), = query(run_dir, "SELECT min(created_at), max(created_at) FROM attempts")
    return last - first


def integrity(run_dir: Path) -> str:
    return query(run_dir, "PRAGMA integrity_check")[0][0]


def compare_attempts(clean: list[tuple], killed: list[tuple]) -> dict[str, int]:
    """Attempts expected (from the uninterrupted run), stored, lost, duplicated, and differing verdicts."""
    expected, stored = Counter(r[:2] for r in clean), Counter(r[:2] for r in killed)
    verdict = {r[:2]: r[3:] for r in clean}  # sorted by try: the last try's outcome and reward
    killed_verdict = {r[:2]: r[3:] for r in killed}
    return {"expected": len(expected), "stored": len(stored),
            "lost": sum(max(0, n - stored[key]) for key, n in expected.items()),
            "duplicated": sum(max(0, n - expected[key]) for key, n in stored.items()),
            "verdicts_differ": sum(verdict[key] != killed_verdict.get(key) for key in verdict)}


# --- killing ------------------------------------------------------------------------------------
def stored_since(run_dir: Path, since: float) -> bool:
    """Whether a try was stored after wall-clock time `since` (by the process started then)."""
    return bool(query(run_dir, f"SELECT 1 FROM attempts WHERE created_at > {since!r} LIMIT 1"))


def _wait_for_work(proc, run_dir: Path, since: float, limit_s: float) -> None:
    """Until the process stored its first try (it is working) or ended."""
    end = time.monotonic() + limit_s
    while proc.is_alive() and time.monotonic() < end and not stored_since(run_dir, since):
        time.sleep(0.01)


def kill_until_done(context, case: Case, root: Path, run_dir: Path, rng: random.Random,
                    log: KillLog) -> None:
    """Run the stage, SIGKILL it at a random point, run it again; after `case.kills` kills finish it with
    the launch.py command line (which must resume, not start over)."""
    args = launch_args(case, root, run_dir)
    cfg, out = compose(args), root / f"{case.stage}-killed.log"
    while log.kills < case.kills:
        startup_kill = log.kills % 4 == 3
        before, began = len(stored_rows(run_dir)), time.time()
        # the work still to do, shared out over the kills still to make, so that they spread over the run
        window = log.work_s * max(0.02, 1 - before / log.rows) / (case.kills - log.kills + 1)
        delay = rng.uniform(0.0, log.startup_s if startup_kill else window)
        proc = start(context, _stage_child, cfg, out)
        log.runs += 1
        if not startup_kill:
            _wait_for_work(proc, run_dir, began, RUN_TIMEOUT_S)
        proc.join(delay)
        if not proc.is_alive():  # it finished first: fewer kills than asked, which the caller sees
            finish(proc, out)
            return
        proc.kill()
        proc.join()
        log.kills += 1
        worked = stored_since(run_dir, began)
        log.in_work += worked
        log.in_startup += not worked
    log.runs += 1
    finish(start(context, _launch_child, args, out), out)


def kill_in_checkpoint_writes(context, case: Case, root: Path, run_dir: Path, log: KillLog) -> None:
    """Training only: one SIGKILL at each exact point of a checkpoint write, steps 1 and 2."""
    cfg, out = compose(launch_args(case, root, run_dir)), root / f"{case.stage}-killed.log"
    for step, point in ((1, "state"), (2, "pointer")):
        proc = start(context, _dying_child, (cfg, step, point), out)
        proc.join(RUN_TIMEOUT_S)
        assert proc.exitcode == -signal.SIGKILL, f"did not die writing checkpoint {step}: {proc.exitcode}"
        log.checkpoint_kills += 1
        log.runs += 1


def clean_and_killed(context, case: Case, root: Path, seed: int) -> KillLog:
    """The uninterrupted run (launch.py), re-run (it must add nothing), then the killed-and-resumed one
    (for training, first killed inside two checkpoint writes, then at random points)."""
    log = KillLog(case.stage)
    clean_dir, out = root / f"{case.stage}-clean", root / f"{case.stage}-clean.log"
    args = launch_args(case, root, clean_dir)
    log.clean_s = timed_run(context, _launch_child, args, out)
    # The stored times are wall-clock: a clock step during the run (seen in CI: 27 s of "work" in a 5 s
    # run, so every kill window was too wide and the run finished first) cannot make it longer than the run.
    rows, log.work_s = stored_rows(clean_dir), min(work_seconds(clean_dir), log.clean_s)
    log.rows = len(rows)
    log.startup_s = timed_run(context, _stage_child, compose(args), out)
    assert stored_rows(clean_dir) == rows, "re-running a finished run changed its store"
    if case.stage == "train":
        kill_in_checkpoint_writes(context, case, root, root / "train-killed", log)
    kill_until_done(context, case, root, root / f"{case.stage}-killed", random.Random(seed), log)
    identities = {json.loads((root / f"{case.stage}-{k}" / "run.json").read_text())["identity"]
                  for k in ("clean", "killed")}
    assert len(identities) == 1, identities
    return log


# --- training fixtures --------------------------------------------------------------------------
def mock_actions() -> list[str]:
    """Whole assistant replies, one token each: the mock tasks' right calls, a wrong one, and a sign-off."""
    from tbx.llm.parsing import render_tool_call
    from tbx.messages import ToolCall

    calls = [ToolCall("set_nickname", {"account_id": 2, "nickname": "savings"}),
             ToolCall("set_nickname", {"account_id": 3, "nickname": "spare"}),
             ToolCall("transfer", {"from_account": 1, "to_account": 2, "amount": 5, "memo": "requested"}),
             ToolCall("transfer", {"from_account": 1, "to_account": 2, "amount": 20, "memo": "requested"})]
    return [render_tool_call(call) for call in calls] + ["Done."]


def build_tiny_model(folder: Path) -> Path:
    """A 2-layer random llama and a word-level tokenizer (every prompt word is [UNK]) saved as a HF folder.
    Heads of 32 dimensions: the smallest vLLM's CPU attention takes."""
    import torch
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    raw = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    raw.add_special_tokens([AddedToken(t, normalized=False) for t in ("<|im_start|>", "<|im_end|>")])
    raw.add_tokens([AddedToken(action, normalized=False) for action in mock_actions()])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="[UNK]", bos_token="<|im_start|>",
                                        eos_token="<|im_end|>", pad_token="<|im_end|>")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=2048,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def write_mock_pool(path: Path) -> Path:
    """A frozen pool manifest keeping the three mock tasks (what stage=select would write for them)."""
    from tbx.config import TasksConfig
    from tbx.records import manifest_hash

    manifest = {"version": 1, "probe_settings": {"tasks": dataclasses.asdict(TasksConfig(name="mock",
                                                                                          domains=["mock"]))},
                "kept": ["mock/nickname/1", "mock/transfer/20", "mock/transfer/5"], "dropped": [],
                "no_verdict": [], "tasks": []}
    manifest["hash"] = manifest_hash(manifest)
    path.write_text(json.dumps(manifest))
    return path


def train_case(root: Path, kills: int, steps: int, server: Any, *extra: str) -> Case:
    """Training the tiny llama of `server` (a running vLLM serving it as `tiny`: its rollouts); `extra`
    overrides follow the case's own. Every checkpoint is kept (`grpo.keep_checkpoints=null`): the clean and the
    killed runs are compared step by step."""
    pool = write_mock_pool(root / "pool.json")
    return Case("train", ("stage=train", f"train.pool={pool}", f"model.path={server.spec.directory}", "model.name=tiny",
                          f"model.endpoint.base_url={server.base_url}", "model.endpoint.model=tiny",
                          "model.max_new_tokens=2", "grpo=cpu_small", f"grpo.steps={steps}",
                          "grpo.lr=1e-2", "grpo.max_replacements=2", "grpo.keep_checkpoints=null", "eval.max_turns=3",
                          *extra), kills)


def eval_case(kills: int, tasks: int = 8, attempts: int = 8) -> Case:
    return Case("eval", ("stage=eval", "tasks=travel", f"tasks.limit={tasks}", *COIN, f"eval.attempts={attempts}",
                         "eval.concurrency=4"), kills)


def probe_case(kills: int, tasks: int = 8, attempts: int = 10) -> Case:
    return Case("probe", ("stage=probe", "tasks=travel", f"tasks.limit={tasks}", *COIN, f"probe.attempts={attempts}",
                          "eval.concurrency=4"), kills)


def checkpoint_states(run_dir: Path) -> dict[int, dict]:
    import torch

    return {int(p.name.removeprefix("step_")): torch.load(p / "state.pt", weights_only=False)
            for p in sorted((run_dir / "checkpoints").glob("step_*"))}


def compare_checkpoints(clean: dict[int, dict], killed: dict[int, dict]) -> dict[str, float]:
    """Steps compared, steps whose state is not bit-identical, and the largest weight difference."""
    import torch

    def tensors(state: dict) -> list:  # weights, AdamW moments and step counts, the torch RNG
        optimizer = [v for per_param in state["optimizer"]["state"].values() for v in per_param.values()]
        return [*state["trainable"].values(), *optimizer, state["rng"]["torch"]]

    # Python's global `random` is left out: `rich`, imported by the MCP SDK when a process builds its first
    # tool server, draws getrandbits(24) at import, so each resumed process moves it one draw further
    # than the uninterrupted run. Nothing in training draws from it (weights and losses stay identical).
    def plain(state: dict) -> bytes:  # sampler position and rng, rewards so far, numpy's global RNG
        return pickle.dumps([state["extra"]["sampler"], state["extra"]["scored"], state["rng"]["numpy"]])

    differing, worst = len(set(clean) ^ set(killed)), 0.0
    for step in set(clean) & set(killed):
        a, b = clean[step], killed[step]
        worst = max(worst, *(float((x - y).abs().max()) for x, y in zip(a["trainable"].values(),
                                                                         b["trainable"].values(), strict=True)))
        same = all(torch.equal(x, y) for x, y in zip(tensors(a), tensors(b), strict=True)) and plain(a) == plain(b)
        differing += not same
    return {"steps_compared": len(set(clean) & set(killed)), "steps_differing": differing,
            "max_weight_difference": worst}


def losses(run_dir: Path) -> list:
    return [h.get("train/loss") for h in json.loads((run_dir / "train.json").read_text())["history"]]
