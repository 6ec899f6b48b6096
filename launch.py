"""The single entry point: compose the config, validate it, run one stage.

    python launch.py stage=eval policy=oracle tasks=travel
    python launch.py -m stage=eval policy=oracle,null tasks=travel     # Hydra multirun
    python launch.py show=true ...                                     # print config and plan, exit
    python launch.py sweep=band_edges select.probe_run=...              # a sweep from sweeps/
    python launch.py                                                    # the main job (below)

Without a `stage=` (and without an `experiment=`), launch.py runs the main job: the whole
pipeline on the embedded default, `experiment=embedded_pipeline` (probe the easy training
sample with SmolLM2 on CPU, select, train a few GRPO steps, evaluate base and trained, report).

Every stage goes through `tbx.launch`: a checked job plan, then submitit (in this process by
default, `hardware=slurm_...` for Slurm). Heavy imports happen inside the stage. Errors in user
input, an unreachable service or a disk that refuses writes print one clear line (file, field, fix)
and exit with status 2; a service that fails for good while the run goes prints one line and exits 5;
a run whose every attempt errored exits with status 3 after writing its summary; Ctrl-C, or a campaign
worker killed by a signal, prints one line and exits 130 (the same command resumes after 5 and 130;
the statuses: tbx/errors.py, docs/guarantees.md).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from tbx.config import Config, register_configs
from tbx.config.checks import check_composed, compose_config, config_object, sweep_jobs
from tbx.errors import EXIT_INPUT, EXIT_INTERRUPTED, InputError, RunInterrupted, exit_status
from tbx.launch import dispatch, plan_for, run_stage  # noqa: F401 - run_stage: for callers and tests
from tbx.process.durable import check_writable
from tbx.stages.environment import check_config

register_configs()

# Hydra reads a bare `null` as "no option", so `policy=null` (the do-nothing agent) would select no
# policy at all. The option file is policy/null_agent.yaml; these words name it on the command line.
POLICY_ALIASES = {"null": "null_agent"}
SWEEPS = Path(__file__).resolve().parent / "sweeps"


MAIN_JOB = "experiment=embedded_pipeline"


def with_main_job(argv: list[str]) -> list[str]:
    """`argv` plus the main job's experiment when it names neither a stage nor an experiment."""
    keys = {arg.partition("=")[0].lstrip("+~") for arg in argv if "=" in arg}
    if keys & {"stage", "experiment", "sweep"} or any(arg.startswith("--config-name") for arg in argv):
        return argv
    return [MAIN_JOB, *argv]


def rewrite_aliases(argv: list[str]) -> list[str]:
    """`policy=null` -> the null_agent option; `sweep=NAME` -> sweeps/NAME.yaml as the primary config."""
    flags, out = [], []
    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep and key.lstrip("+~") == "policy":
            value = ",".join(POLICY_ALIASES.get(v, v) for v in value.split(","))
        if sep and key == "sweep":  # flags go before the overrides (argparse)
            flags += [f"--config-dir={SWEEPS}", f"--config-name={value}"]
            continue
        out.append(f"{key}{sep}{value}")
    return flags + out


def expand_home(argv: list[str]) -> list[str]:
    """`key=~/dir` -> `key=/home/me/dir`: what a shell does for `--key=~/dir` but not for `key=~/dir`, and
    Hydra's override grammar cannot parse a value that starts with `~`. A leading `~key` (delete) stays."""
    out = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        out.append(f"{key}{sep}{os.path.expanduser(value)}" if sep and value.startswith("~") else arg)
    return out


def precheck(argv: list[str]) -> None:
    """Compose before Hydra does: a composition mistake (unknown key or option, wrong type, unparsable
    override, a value out of range) becomes one line and exit status 2, where Hydra prints several lines
    and exits 1; so does an out_root on a full or read-only disk (Hydra writes its run folder there first).
    A multirun (`-m`) composes and checks every job it would start, before the first one starts. Runs
    with other flags (sweeps, --cfg) are left to Hydra."""
    flags = {arg for arg in argv if arg.startswith("-")}
    if flags - MULTIRUN_FLAGS:
        return
    overrides = [arg for arg in argv if not arg.startswith("-")]
    jobs, error = sweep_jobs(overrides) if flags else ([overrides], None)
    for job in jobs:
        error = error or job_error(job)
    if error is not None:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(EXIT_INPUT)


MULTIRUN_FLAGS = {"-m", "--multirun"}


def job_error(overrides: list[str]) -> InputError | None:
    """The first mistake in one job's config: its composition, its values, what they name (path kinds, task
    files, endpoints' keys: check_config), an out_root that takes no write."""
    dict_cfg, error = compose_config(Path(__file__).resolve().parent / "conf", "config", overrides)
    if error is not None or OmegaConf.select(dict_cfg, "show"):
        return error
    try:
        check_config(config_object(dict_cfg))
        check_writable(Path(OmegaConf.select(dict_cfg, "out_root", throw_on_resolution_failure=False) or "."))
    except InputError as exc:
        return exc
    return None


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(dict_cfg: DictConfig) -> None:
    try:
        stray = check_composed(dict_cfg, sys.argv[1:])
        if stray is not None:
            raise stray
        cfg: Config = config_object(dict_cfg)
        if cfg.show:
            print(OmegaConf.to_yaml(dict_cfg, resolve=True))
        else:
            check_config(cfg)
        plan = plan_for(cfg)
        if cfg.show:
            from tbx.runs.identity import identity_settings, run_name
            from tbx.runs.stages import stage_of

            try:
                own = stage_of(cfg).run_folder
                name = run_name(cfg) if own else f"none (stage={cfg.stage.name} writes no run folder of its own)"
                print(f"# run: {name}\n# identity settings: {identity_settings(cfg)}")
            except InputError as exc:  # the identity covers the tasks' content: named once they load
                print(f"# run: not known until the inputs load ({exc})")
            print(plan.describe())
            try:
                check_config(cfg)
            except InputError as exc:
                print(f"# problem (a run would stop here): {exc}")
            return
        result = dispatch(cfg, plan)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exit_status(exc))
    except RunInterrupted as exc:  # as after Ctrl-C: what finished is stored
        print(f"interrupted: {exc}; the tries that finished are stored; the same command resumes the run",
              file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    if result.exit_code:
        sys.exit(result.exit_code)


HELP_FLAGS = {"-h", "--help", "--hydra-help"}
USAGE_MORE = """

Stages: stage=eval, probe, select, train, pipeline, report, view, regrade, validate, serve, serve_model.
The options of each group: conf/<group>/<option>.yaml (group=option picks one); every setting and its
value: python launch.py show=true [overrides]."""
SHOW_WRITES_NOTHING = ("hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=stdout")


def without_run_files(argv: list[str]) -> list[str]:
    """`show=true` prints and writes nothing: no Hydra run folder, no .hydra/, no log file."""
    if "show=true" in argv and not any(arg.startswith("-") for arg in argv):
        return [*argv, *SHOW_WRITES_NOTHING]
    return argv


if __name__ == "__main__":
    if HELP_FLAGS & set(sys.argv[1:]):  # Hydra's own help composes the config (and prints it whole)
        print(__doc__.strip() + USAGE_MORE)
        sys.exit(0)
    sys.argv[1:] = without_run_files(rewrite_aliases(with_main_job(expand_home(sys.argv[1:]))))
    precheck(sys.argv[1:])
    try:
        main()
    except KeyboardInterrupt:  # Ctrl-C: the event loop has unwound, what finished is stored (as after SIGTERM)
        print("\ninterrupted (Ctrl-C): the tries that finished are stored; the same command resumes the run",
              file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
