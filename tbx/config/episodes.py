"""What the episodes of a run play and under which limits: the task set, the database backend, the eval
settings (attempts, workers, timeouts) and the injected faults."""

from __future__ import annotations

from dataclasses import dataclass, field

from tbx.config.choices import BackendKind
from tbx.config.markers import CONTENT_PATH, NOT_IDENTITY, NOT_IDENTITY_PATH


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
    # re-runs of an attempt that ended in an error outcome, within one command
    max_error_retries: int = field(default=2, metadata=NOT_IDENTITY)
    # Commands after the first that play an attempt again whose every try ended in an error outcome (the same
    # command re-run: another round of 1 + max_error_retries tries each), so an infrastructure failure that has
    # passed (a deleted template cache, a server that was down) never leaves the run short. 0: never again.
    resume_error_retries: int = field(default=1, metadata=NOT_IDENTITY)
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
    """Injected faults (hardening, `tbx/episodes/faults.py`): a share of the calls at each site fails at once or
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
