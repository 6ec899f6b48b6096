"""Every mistake a user can make in a config group, on the command line or in a task file stops with
one error naming the file, the field and the fix; `launch.py` prints it as one line, exits with
status 2, and has touched nothing (a run already in the folder is kept as it was).

Config mistakes go through real Hydra composition (`tbx.config.checks.composition_error`, what
launch.py runs first: enumerations are refused there), the value checks the typed config runs when it is
built (`Config.__post_init__`, tbx/config/values.py) and the environment checks (`check_config`,
tbx/stages/environment.py); a few go through `launch.py` itself.
Task-file mistakes add the cases `tests/tasks/test_loader.py` does not cover.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from tbx.backend import make_backend
from tbx.catalog import prepare_task, resolve_tasks
from tbx.config import TasksConfig
from tbx.config.checks import composition_error
from tbx.domains import get_domain
from tbx.errors import ConfigError, TaskFormatError
from tbx.stages.environment import check_config
from tests.helpers.stage import OPTIONS, REQUIRED, digest, error_lines
from tests.helpers.stage import launch_cli as launch
from tests.launch import compose_cfg

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"


# --- composition: keys, types, options, overrides ---------------------------------------------------------------

@pytest.mark.parametrize(("overrides", "source", "field", "fix"), [
    (["eval.attemps=3"], "command line 'eval.attemps=3'", "eval.attemps", "did you mean eval.attempts?"),
    (["+eval.attemps=3"], "command line '+eval.attemps=3'", "eval.attemps", "did you mean eval.attempts?"),
    (["modle=openai_endpoint"], "command line 'modle=openai_endpoint'", "modle", "did you mean model?"),
    (["model.endpoint.nope=1"], "command line 'model.endpoint.nope=1'", "model.endpoint.nope", "EndpointConfig"),
    (["+colour=red"], "command line '+colour=red'", "colour", "The keys of the config"),
    (["model.chat_template_kwargs.enable_thinking=false"], "command line 'model.chat_template_kwargs.enable_thinking"
     "=false'", "model.chat_template_kwargs.enable_thinking", "'+model.chat_template_kwargs.enable_thinking=VALUE'"),
    (["eval.attempts=abc"], "command line 'eval.attempts=abc'", "eval.attempts", "type int"),
    (["difficulty.edges=abc"], "command line 'difficulty.edges=abc'", "difficulty.edges", "type list[float]"),
    (["model=nope"], "conf/model/nope.yaml", "model", "openai_endpoint, smollm2_135m"),
    (["logger=wandb"], "conf/logger/wandb.yaml", "logger", "none, wandb_offline, wandb_online"),
    (["eval.attempts=3)"], "command line 'eval.attempts=3)'", "eval.attempts", "key=value"),
    (["policy=oracle,null_agent"], "command line 'policy=oracle,null_agent'", "policy", "add -m"),
    # enumerations are Enum fields of the schema: refused at composition, the choices named
    (["model.kind=remote"], "command line 'model.kind=remote'", "model.kind", "use one of vllm, openai"),
    (["model.tool_format=yaml"], "command line 'model.tool_format=yaml'", "model.tool_format", "json, compact"),
    (["backend.kind=mysql"], "command line 'backend.kind=mysql'", "backend.kind", "sqlite, postgres"),
    (["logger.kind=tensorboard"], "command line 'logger.kind=tensorboard'", "logger.kind", "wandb, none"),
    (["logger.mode=sideways"], "command line 'logger.mode=sideways'", "logger.mode", "offline, online, disabled"),
    (["stage=train", "grpo.trainer=deepspeed"], "command line 'grpo.trainer=deepspeed'", "grpo.trainer",
     "native, verl"),
    (["pool=lora", "pool.finetune=qlora"], "command line 'pool.finetune=qlora'", "pool.finetune", "full, lora"),
    (["stage=train", "grpo.loss_agg_mode=seq-mean"], "command line 'grpo.loss_agg_mode=seq-mean'",
     "grpo.loss_agg_mode", "use one of token-mean, seq-mean-token-mean, seq-mean-token-sum, token-sum"),
    (["stage=probe", "probe.rule=vibes"], "command line 'probe.rule=vibes'", "probe.rule", "predictive, band_mass"),
    (["stage=serve", "serve.agent_name=a", "serve.transport=sse"], "command line 'serve.transport=sse'",
     "serve.transport", "http, stdio"),
    (["hardware.executor=pbs"], "command line 'hardware.executor=pbs'", "hardware.executor", "debug, local, slurm"),
    (["hardware.ray_auth_mode=none"], "command line 'hardware.ray_auth_mode=none'", "hardware.ray_auth_mode",
     "token, disabled"),
])
def test_composition_mistake_names_file_field_and_fix(overrides, source, field, fix):
    error = composition_error(CONF, "config", overrides)
    assert isinstance(error, ConfigError), error
    assert (error.source, error.field) == (source, field) and fix in error.fix, str(error)


def test_free_form_extra_keys_are_not_mistakes():
    assert composition_error(CONF, "config", ["stage=eval", "+extra.note=baseline"]) is None
    assert composition_error(CONF, "config", ["stage=eval", "+model.chat_template_kwargs.enable_thinking=false"]) is None


@pytest.mark.parametrize(("name", "text", "source", "field", "fix"), [
    ("experiment/mine.yaml", "# @package _global_\neval:\n  attemps: 3\n", "conf/experiment/mine.yaml",
     "eval.attemps", "did you mean eval.attempts?"),
    ("model/mine.yaml", "name: mine\nkind: vllm\nmax_new_tokenz: 5\n", "conf/model/mine.yaml",
     "model.max_new_tokenz", "did you mean model.max_new_tokens?"),
    ("tasks/mine.yaml", "name: mine\ndomains: [mock]\nlimit: some\n", "conf/tasks/mine.yaml", "tasks.limit", "int"),
    ("model/mine.yaml", "name: mine\nkind: remote\n", "conf/model/mine.yaml", "model.kind", "use one of vllm, openai"),
])
def test_a_mistake_inside_an_option_file_names_that_file(tmp_path, name, text, source, field, fix):
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    (conf / name).write_text(text)
    group, option = name.removesuffix(".yaml").split("/")
    error = composition_error(conf, "config", [f"{group}={option}"])
    assert isinstance(error, ConfigError), error
    assert (error.source, error.field) == (source, field) and fix in error.fix, str(error)


# --- values the types cannot express ----------------------------------------------------------------------------

URL = "http://127.0.0.1:9/v1"
ENDPOINT = ["policy=model", "model=openai_endpoint", f"model.endpoint.base_url={URL}", "model.endpoint.model=m"]


@pytest.mark.parametrize(("overrides", "source", "field", "fix"), [
    (["backend=postgres"], "conf/backend", "backend.url", "postgresql+psycopg://"),
    (["stage=select", "pool.keep_ranges=[[0.1,0.9]]"], "conf/pool/full_param.yaml", "pool.keep_ranges",
     "one of the band edges"),
    (["stage=probe", "difficulty.edges=[0,0.3,0.08,0.6,0.9,1]"], "conf/difficulty", "difficulty.edges",
     "sort the edges"),
    (["stage=select", "difficulty.edges=[0,0.5,1]", "pool.keep_ranges=[[0.0,0.5]]"], "conf/difficulty",
     "difficulty.names", "one name per band"),
    (["stage=probe", "probe.attempts=0"], "conf/config.yaml", "probe.attempts", "probe.attempts >= 1"),
    (["stage=probe", "probe.threshold=1.5"], "conf/config.yaml", "probe.threshold", "[0, 1]"),
    (["stage=train", "grpo.group_size=1"], "conf/grpo", "grpo.group_size", "grpo.group_size >= 2"),
    (["stage=train", "grpo.lr=0"], "conf/grpo", "grpo.lr", "positive learning rate"),
    (["stage=train", "grpo.keep_checkpoints=0"], "conf/grpo", "grpo.keep_checkpoints", "null to keep every"),
    (["stage=train", "grpo.verl_stall_s=0"], "conf/grpo", "grpo.verl_stall_s", "(e.g. 1800), or null"),
    (["stage=train", "grpo.kl_coef=0.01"], "conf/grpo", "grpo.kl_coef", "grpo.kl_coef=0, or train with grpo.trainer=verl"),
    (["stage=pipeline", "grpo.kl_coef=0.01"], "conf/grpo", "grpo.kl_coef", "grpo.kl_coef=0"),
    (["stage=eval", "eval.attempts=0"], "conf/config.yaml", "eval.attempts", "eval.attempts >= 1"),
    (["stage=eval", "eval.max_turns=0"], "conf/config.yaml", "eval.max_turns", "eval.max_turns >= 1"),
    (["stage=eval", "eval.resume_error_retries=-1"], "conf/config.yaml", "eval.resume_error_retries",
     "eval.resume_error_retries >= 0"),
    (["stage=validate", "eval.workers=0"], "conf/config.yaml", "eval.workers", "eval.workers >= 1"),
    (["stage=eval", "policy=model", "model=openai_endpoint"], "conf/model/openai_endpoint.yaml",
     "model.endpoint.base_url", "model.endpoint.base_url=http://HOST:PORT/v1"),
    (["stage=eval", *ENDPOINT[:3]], "conf/model/openai_endpoint.yaml", "model.endpoint.model", "model.endpoint.model="),
    (["stage=eval", *ENDPOINT], "conf/model/openai_endpoint.yaml", "model.endpoint.api_key_env",
     "export OPENAI_API_KEY=<key>"),
    (["stage=eval", *ENDPOINT, "model.endpoint.api_key_env=null", "eval.turn_timeout_s=200"], "conf/config.yaml",
     "eval.turn_timeout_s", "give eval.turn_timeout_s > 240"),
    (["stage=eval", "eval.turn_timeout_s=0"], "conf/config.yaml", "eval.turn_timeout_s", "seconds > 0"),
    (["stage=train", "eval.episode_timeout_s=0"], "conf/config.yaml", "eval.episode_timeout_s", "seconds > 0"),
    (["stage=eval", "user=llm"], "conf/user/llm.yaml", "user.endpoint.base_url", "user.endpoint.base_url="),
    (["stage=validate", "judge=llm"], "conf/judge/llm.yaml", "judge.endpoint.base_url", "judge.endpoint.base_url="),
    (["stage=eval", "tasks=files"], "conf/tasks/files.yaml", "tasks.path", "tasks.path=FILE_OR_DIR"),
    (["stage=eval", "tasks=files", "tasks.path=/nonexistent/tasks"], "/nonexistent/tasks", "tasks.path",
     "an existing task file or folder"),
    (["stage=eval", "tasks.domains=[travel,airline]"], "conf/tasks/travel.yaml", "tasks.domains", "retail"),
    (["stage=serve"], "conf/stage/serve.yaml", "serve.agent_name", "serve.agent_name=NAME"),
    (["stage=serve", "serve.agent_name='my agent'"], "conf/stage/serve.yaml", "serve.agent_name", "letters, digits"),
    (["stage=serve", "serve.agent_name=a", "serve.port=70000"], "conf/stage/serve.yaml", "serve.port", "0..65535"),
    (["stage=serve", "serve.agent_name=a", "serve.host=0.0.0.0"], "conf/stage/serve.yaml", "serve.token_env",
     "serve.token_env=TBX_SERVE_TOKEN"),
    (["stage=serve", "serve.agent_name=a", "serve.token_env=TBX_TEST_TOKEN_NOT_SET"], "conf/stage/serve.yaml",
     "serve.token_env", "export TBX_TEST_TOKEN_NOT_SET=<token>"),
    (["stage=serve", "serve.agent_name=a", "user=llm"], "conf/user/llm.yaml", "user.endpoint.base_url",
     "user.endpoint.base_url="),
])
def test_value_mistake_names_file_field_and_fix(monkeypatch, overrides, source, field, fix):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigError) as error:
        check_config(compose_cfg(*overrides))
    assert (error.value.source, error.value.field) == (source, field) and fix in error.value.fix, str(error.value)


def test_wandb_online_needs_a_login(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    with pytest.raises(ConfigError) as error:
        check_config(compose_cfg("stage=eval", "logger=wandb_online"))
    assert (error.value.source, error.value.field) == ("conf/logger", "logger.mode")
    assert "export WANDB_API_KEY=<key>" in error.value.fix
    (tmp_path / "netrc").write_text("machine api.wandb.ai\n  login user\n  password secret\n")
    check_config(compose_cfg("stage=eval", "logger=wandb_online"))
    monkeypatch.setenv("WANDB_API_KEY", "set")
    monkeypatch.setenv("NETRC", str(tmp_path / "none"))
    check_config(compose_cfg("stage=eval", "logger=wandb_online"))


def test_the_key_variable_is_named_never_its_value(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-never-shown-1234")
    check_config(compose_cfg("stage=eval", *ENDPOINT))  # set: fine
    monkeypatch.setenv("OPENAI_API_KEY", "")
    with pytest.raises(ConfigError) as error:
        check_config(compose_cfg("stage=eval", *ENDPOINT, "model.endpoint.api_key_env=TBX_TEST_KEY_NOT_SET"))
    assert "TBX_TEST_KEY_NOT_SET" in str(error.value) and "sk-never" not in str(error.value)


@pytest.mark.parametrize("overrides", [
    ["stage=select", "user=llm", "judge=llm", "model=openai_endpoint"],  # select plays no episode
    ["stage=eval", "pool.keep_ranges=[[0.1,0.9]]", "grpo.group_size=1"],  # eval selects no pool, trains nothing
    ["stage=report", "tasks=files"],  # report reads runs, not tasks
    ["stage=train", "grpo.trainer=verl", "grpo.kl_coef=0.01"],  # verl's KL loss has its reference model
])
def test_settings_a_stage_does_not_use_do_not_stop_it(overrides):
    check_config(compose_cfg(*overrides))


CHECKED = [(g, o) for g, o in OPTIONS if g != "hardware" and (g != "tasks" or o in ("bench", "train", "files"))]


@pytest.mark.parametrize(("group", "option"), CHECKED, ids=[f"{g}={o}" for g, o in CHECKED])
def test_every_shipped_option_passes_the_checks_of_its_stage(monkeypatch, group, option):
    """(hardware is the plan's to check, tests/launch; bench and train name every bundled domain)"""
    monkeypatch.setenv("OPENAI_API_KEY", "set")
    monkeypatch.setenv("WANDB_API_KEY", "set")
    given = ["user.endpoint.base_url=" + URL, "user.endpoint.model=m", "judge.endpoint.base_url=" + URL,
             "judge.endpoint.model=m", *REQUIRED.get((group, option), []), "tasks.path=" + str(CONF)]
    check_config(compose_cfg(f"{group}={option}", *given))


# --- launch.py: one line, status 2, nothing lost ----------------------------------------------------------------

def test_launch_prints_one_line_and_exits_2_without_touching_a_finished_run(tmp_path):
    from tests.helpers.stage import make_cfg, run

    base = ["stage=eval", "tasks=mock", "policy=oracle", "logger=none", f"out_root={tmp_path}/outputs",
            f"backend.workdir={tmp_path}/db"]
    run_dir = Path(run(make_cfg(tmp_path, *base[:3])).run_dir)
    assert run_dir.parent == tmp_path / "outputs"
    before = digest(run_dir)
    # the same run (same identity) with a logger mistake: stopped before anything ran
    late = launch(*base, "logger.kind=tensorboard")
    assert late.returncode == 2 and error_lines(late) == [
        "error: command line 'logger.kind=tensorboard': field 'logger.kind': is 'tensorboard'. Fix: use one of wandb, "
        "none"]
    assert digest(run_dir) == before
    typo = launch(*base, "eval.attemps=3")  # Hydra alone: several lines and status 1
    assert typo.returncode == 2 and len(error_lines(typo)) == 1 and "Traceback" not in typo.stderr
    assert error_lines(typo)[0].startswith("error: command line 'eval.attemps=3': field 'eval.attemps': unknown key.")
    assert digest(run_dir) == before


def test_a_task_file_mistake_found_inside_the_stage_is_printed_once(tmp_path):
    task = dict(get_domain("mock").generate_tasks(0)[0], turn_limit=0)
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(task))
    out = launch("stage=eval", f"tasks.path={tmp_path / 'bad.yaml'}", "tasks=files", "policy=oracle", "logger=none",
                 f"out_root={tmp_path}/out", f"backend.workdir={tmp_path}/db")
    assert out.returncode == 2, out.stderr
    assert error_lines(out) == [f"error: {tmp_path / 'bad.yaml'}: field 'turn_limit': is 0. Fix: give a positive integer"]


# --- task files: the cases tests/tasks/test_loader.py does not cover ---------------------------------------------

def good_task() -> dict:
    return json.loads(json.dumps(get_domain("mock").generate_tasks(0)[0]))


def edit(path: list, value=None, delete: bool = False):
    def change(task: dict) -> None:
        node = task
        for key in path[:-1]:
            node = node[key]
        if delete:
            del node[path[-1]]
        else:
            node[path[-1]] = value
    return change


@pytest.mark.parametrize(("change", "field", "fix"), [
    (edit(["id"], delete=True), "id", "add 'id:'"),
    (edit(["split"], delete=True), "split", "add 'split:'"),
    (edit(["user"], "Ada wants money moved"), "user", "mapping with persona"),
    (edit(["user", "persona"], "  "), "user.persona", "non-empty string"),
    (edit(["user", "private_facts"], ["Ada"]), "user.private_facts", "{value: ..., keywords: [...]}"),
    (edit(["user", "private_facts", "owner_name"], {"keywords": ["name"]}), "user.private_facts.owner_name.value",
     "give the fact's value"),
    (edit(["user", "private_facts", "owner_name", "keywords"], "name"), "user.private_facts.owner_name.keywords",
     "list of phrases"),
    (edit(["user", "private_facts", "owner_name", "keywords"], ["name", ""]),
     "user.private_facts.owner_name.keywords", "non-empty strings"),
    (edit(["reference", 1], {"tool": "get_account", "args": {"account_id": 1}}), "reference[1].args",
     "did you mean 'arguments'? Otherwise remove it or use the keys of reference[1]: tool, arguments, say"),
    (edit(["reference", 1, "arguments"], [1]), "reference[1].arguments", "mapping"),
    (edit(["reference", 1], "get_account"), "reference[1]", "{tool: NAME"),
    (edit(["reference", 0, "say"], 42), "reference[0].say", "string"),
    (edit(["checks", "expect"], []), "checks.expect", "did you mean 'expected'? Otherwise remove it or use the keys of checks: "
     "expected, volatile, loose, judge"),
    # unknown keys at any depth (tbx/tasks/schema.py): a misspelt key inside a block is never dropped silently
    (edit(["user", "privat_facts"], {}), "user.privat_facts", "did you mean 'private_facts'?"),
    (edit(["user", "private_facts", "owner_name", "keyword"], ["owner"]), "user.private_facts.owner_name.keyword",
     "did you mean 'keywords'?"),
    (edit(["checks", "expected", 0, "valeus"], {}), "checks.expected[0].valeus", "did you mean 'values'?"),
    (edit(["checks", "judge"], [{"id": "x", "rule": "r", "evidense": ["a"]}]), "checks.judge[0].evidense",
     "did you mean 'evidence'?"),
    (edit(["seed"], {"rows": {}, "row": {}}), "seed.row", "did you mean 'rows'?"),
    (edit(["checks", "expected"], {"op": "insert"}), "checks.expected", "list of changes"),
    (edit(["checks", "expected", 2, "values"], {}), "checks.expected[2].values", "values: {column: value}"),
    (edit(["checks", "expected", 0, "key"], {"idd": 1}), "checks.expected[0].key.idd", "columns of accounts"),
    (edit(["checks", "expected", 2, "values", "amout"], 5), "checks.expected[2].values.amout", "columns of transfers"),
    (edit(["checks", "judge"], [{"id": "x", "evidence": ["95"]}]), "checks.judge[0].rule", "non-empty string"),
    (edit(["checks", "judge"], [{"id": "x", "rule": "said the balance", "evidence": [95]}]),
     "checks.judge[0].evidence", "strings"),
    (edit(["checks", "loose"], [3]), "checks.loose[0]", "'table.column'"),
    (edit(["seed"], ["accounts"]), "seed", "{rows: {table: [row, ...]}}"),
    (edit(["seed"], {"rows": {"accounts": {"id": 9}}}), "seed.rows.accounts", "list of rows"),
    (edit(["seed"], {"rows": {"accounts": [9]}}), "seed.rows.accounts[0]", "mapping of column to value"),
    (edit(["tools"], "get_account"), "tools", "list the tool names"),
    (edit(["turn_limit"], True), "turn_limit", "positive integer"),
    (edit(["turn_limit"], "ten"), "turn_limit", "positive integer"),
    (edit(["policy"], ["be nice"]), "policy", "policy text as a string"),
])
def test_task_file_mistake_names_file_field_and_fix(tmp_path, change, field, fix):
    task = good_task()
    change(task)
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(task))
    with pytest.raises(TaskFormatError) as error:
        resolve_tasks(TasksConfig(name="files", path=str(path)))
    assert (error.value.source, error.value.field) == (str(path), field) and fix in error.value.fix, str(error.value)


@pytest.mark.parametrize(("name", "text", "source", "problem"), [
    ("empty.yaml", "", "empty.yaml", "holds neither a task nor a list"),
    ("scalar.yaml", "just words\n", "scalar.yaml", "holds neither a task nor a list"),
    ("broken.jsonl", '{"id": "a"}\n{"id": \n', "broken.jsonl", "is not valid YAML/JSON"),
    ("list.yaml", "- 3\n", "list.yaml", "expected a mapping of fields, got int 3"),
])
def test_a_file_that_holds_no_task_names_the_file(tmp_path, name, text, source, problem):
    (tmp_path / name).write_text(text)
    with pytest.raises(TaskFormatError) as error:
        resolve_tasks(TasksConfig(name="files", path=str(tmp_path / name)))
    assert error.value.source == str(tmp_path / source) and problem in error.value.problem, str(error.value)


@pytest.mark.parametrize(("change", "field", "problem"), [
    (edit(["reference"], [{"tool": "get_account", "arguments": {"account_id": 1}}, {"say": "Done."}]), "reference",
     "changes nothing"),
    (edit(["checks", "expected", 0, "values", "balance"], 94), "checks.expected", "fails its own checks"),
    (edit(["seed"], {"rows": {"accounts": [{"id": 1, "owner": "Ada", "balance": 5}]}}), "seed.rows",
     "refused the seed rows: (sqlite3.IntegrityError) UNIQUE constraint failed: accounts.id"),
    (edit(["reference", 1, "arguments", "account_id"], 99), "reference[1]", "failed on the seeded database"),
])
def test_a_task_whose_reference_does_not_hold_names_the_field(tmp_path, change, field, problem):
    task = good_task()
    change(task)
    (tmp_path / "task.yaml").write_text(yaml.safe_dump(task))
    loaded = resolve_tasks(TasksConfig(name="files", path=str(tmp_path / "task.yaml")))
    backend = make_backend("sqlite", None, str(tmp_path / "db"))
    try:
        with pytest.raises(TaskFormatError) as error:
            prepare_task(loaded[0], backend)
    finally:
        backend.close()
    assert error.value.source == str(tmp_path / "task.yaml") and error.value.field == field
    assert problem in error.value.problem, str(error.value)


def test_a_seed_row_may_leave_out_columns_the_base_rows_give(tmp_path):
    task = good_task()
    task["seed"] = {"rows": {"accounts": [{"id": 9, "owner": "Dee", "balance": 7}]}}  # no nickname, frozen, ...
    (tmp_path / "task.yaml").write_text(yaml.safe_dump(task))
    backend = make_backend("sqlite", None, str(tmp_path / "db"))
    try:
        runtime = prepare_task(resolve_tasks(TasksConfig(name="files", path=str(tmp_path / "task.yaml")))[0], backend)
    finally:
        backend.close()
    added = [row for row in runtime.initial["accounts"]["rows"] if str(row["id"]) == "9"]
    assert added == [{"id": "9", "owner": "Dee", "nickname": None, "balance": "7", "frozen": "0", "updated_at": None}]


def test_an_interpolation_that_does_not_resolve_names_its_key(monkeypatch):
    from hydra import compose, initialize_config_dir

    from tbx.config.checks import config_object

    monkeypatch.delenv("TBX_TEST_UNSET_DIR", raising=False)
    with initialize_config_dir(str(CONF), version_base="1.3"):
        dict_cfg = compose("config", overrides=["out_root=${oc.env:TBX_TEST_UNSET_DIR}"])
    with pytest.raises(ConfigError) as error:
        config_object(dict_cfg)
    # the first key whose value needs it: out_root, or launcher.folder (${out_root}/jobs) when resolved first
    assert error.value.source == "conf/config.yaml" and error.value.field in ("out_root", "launcher.folder")
    assert "TBX_TEST_UNSET_DIR" in error.value.problem and "export the variable" in error.value.fix


def test_edges_of_another_band_count_name_the_pools_keep_ranges():
    from hydra import compose, initialize_config_dir

    from tbx.config.checks import config_object

    with initialize_config_dir(str(CONF), version_base="1.3"):
        dict_cfg = compose("config", overrides=["stage=select", "difficulty.edges=[0,0.5,1]"])
    with pytest.raises(ConfigError) as error:
        config_object(dict_cfg)
    assert (error.value.source, error.value.field) == ("conf/pool/full_param.yaml", "pool.keep_ranges")
    assert "has 3 entries" in error.value.problem and "pool.keep_ranges=[[LOW,HIGH]]" in error.value.fix


# --- multirun, path kinds, --help: one line (or a short usage), before any job starts -----------------------------

@pytest.mark.parametrize(("sweep", "line"), [
    ("policy=oracle,nul", "error: conf/policy/nul.yaml: field 'policy': no option 'nul'. Fix: use one of model, "
     "null_agent, oracle, replay"),
    ("eval.attempts=1,x", "error: command line 'eval.attempts=x': field 'eval.attempts': Value 'x' of type 'str' "
     "could not be converted to Integer"),
    ("eval.attempts=1,0", "error: conf/config.yaml: field 'eval.attempts': is 0. Fix: give eval.attempts >= 1"),
], ids=["misspelt option in a comma list", "non-number in a swept integer", "a swept value out of range"])
def test_a_multirun_checks_every_job_before_the_first_starts(tmp_path, sweep, line):
    out = launch("-m", "stage=eval", "tasks=mock", "policy=oracle", sweep, "logger=none", f"out_root={tmp_path}/out",
                 f"backend.workdir={tmp_path}/db")
    assert out.returncode == 2 and len(error_lines(out)) == 1, out.stderr[-2000:]  # Hydra: several lines, status 1
    assert error_lines(out)[0].startswith(line), error_lines(out)
    assert sorted(tmp_path.rglob("eval-*")) == []  # no job ran: the first (valid) one would have made its run folder


def test_a_multirun_is_expanded_as_hydras_basic_sweeper_expands_it():
    from tbx.config.checks import sweep_jobs

    jobs, error = sweep_jobs(["stage=eval", "eval.attempts=range(1,3)", "tasks=mock,travel"])
    assert error is None and jobs == [["stage=eval", "eval.attempts=1", "tasks=mock"],
                                      ["stage=eval", "eval.attempts=1", "tasks=travel"],
                                      ["stage=eval", "eval.attempts=2", "tasks=mock"],
                                      ["stage=eval", "eval.attempts=2", "tasks=travel"]]
    assert sweep_jobs(["policy=glob(*)"]) == ([], None)  # needs Hydra's config loader: left to Hydra


@pytest.mark.parametrize(("setting", "source", "problem"), [
    ("summary_path={tmp}/folder", "{tmp}/folder", "is a folder; summary_path names the file"),
    ("backend.workdir={tmp}/afile/db", "{tmp}/afile", "is a file, not a folder (the setting names {tmp}/afile/db"),
], ids=["summary_path an existing folder", "backend.workdir below a file"])
def test_a_path_setting_that_names_the_wrong_kind_of_thing_stops_before_the_run(tmp_path, setting, source, problem):
    (tmp_path / "folder").mkdir()
    (tmp_path / "afile").write_text("x")
    args = ["stage=eval", "tasks=mock", "policy=oracle", "logger=none", f"out_root={tmp_path}/out",
            f"backend.workdir={tmp_path}/db", setting.format(tmp=tmp_path)]
    out = launch(*args)
    field = setting.partition("=")[0]
    assert out.returncode == 2 and error_lines(out) == [error_lines(out)[0]], out.stderr[-2000:]
    assert error_lines(out)[0].startswith(f"error: {source.format(tmp=tmp_path)}: field '{field}': "
                                          f"{problem.format(tmp=tmp_path)}"), error_lines(out)
    assert sorted(tmp_path.rglob("eval-*")) == []  # stopped at the start: before, the whole eval ran, then a traceback


def test_a_model_folder_with_a_broken_config_json_is_one_line(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text('{"model_type": "llama",')  # cut short
    (tmp_path / "model" / "model.safetensors").write_bytes(b"\0" * 64)
    with pytest.raises(ConfigError) as error:
        check_config(compose_cfg("stage=eval", "tasks=mock", "policy=model", f"model.path={tmp_path / 'model'}"))
    assert (error.value.source, error.value.field) == (str(tmp_path / "model" / "config.json"), "model.path")
    assert "cannot be read as JSON" in error.value.problem and "restore its config.json" in error.value.fix


@pytest.mark.parametrize("flag", ["--help", "-h", "--hydra-help"])
def test_help_prints_a_short_usage(flag):
    out = launch(flag)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert out.stdout.startswith("The single entry point") and "stage=" in out.stdout
    assert len(out.stdout.splitlines()) < 40  # Hydra's: the whole config, 287 lines
