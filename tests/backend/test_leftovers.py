"""Nothing left behind: a run killed mid-episode leaves its episode databases (PostgreSQL) or episode
files (SQLite); the next start on the same server or work dir removes them, and only them: the
databases and folders of processes that still run are kept."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tbx.backend import make_backend
from tbx.process.owner import this_process

ROOT = Path(__file__).resolve().parents[2]
SLOW = ["policy._target_=tests.launch.SlowCoinPolicy", "policy.name=slowcoin", "+extra.turn_delay_s=0.5",
        "tasks=travel", "tasks.limit=4", "eval.attempts=4", "eval.concurrency=4", "logger=none"]


def episode_databases(url: str) -> dict[str, int]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT datname, pg_database_size(datname) FROM pg_database "
                                     "WHERE datname LIKE 'tbx_ep_%' OR datname LIKE 'tbx_tmp_%'"))
            return dict(rows.all())
    finally:
        engine.dispose()


def kill_while(args: list[str], busy, timeout_s: float = 120) -> None:  # a predicate
    """Start launch.py, SIGKILL it once `busy()` holds (episodes are running)."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "launch.py"), *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout_s
    while not busy() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert busy(), "the run ended or never started episodes"


@pytest.mark.integration
def test_killed_postgres_runs_leave_no_episode_databases_after_the_next_start(tmp_path, pg_url):
    before = set(episode_databases(pg_url))
    args = ["stage=eval", "backend=postgres", f"backend.url={pg_url}", f"out_root={tmp_path}",
            f"run_dir={tmp_path / 'run'}", *SLOW]
    kill_while(args, lambda: len(set(episode_databases(pg_url)) - before) >= 2)
    left = {k: v for k, v in episode_databases(pg_url).items() if k not in before}
    assert len(left) >= 2, left
    mine = make_backend("postgres", pg_url, str(tmp_path))  # a live process's database is kept
    db = mine.clone(_template(mine))
    try:
        done = subprocess.run([sys.executable, str(ROOT / "launch.py"), *args], capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        remaining = set(episode_databases(pg_url)) - before
        assert remaining == {db.name}, remaining
        print(f"{len(left)} episode databases ({sum(left.values()) / 1e6:.1f} MB) left by a killed run; "
              "0 after the next start; a live process's kept")
    finally:
        mine.drop(db)
        mine.close()


def _template(backend) -> str:
    from tbx.catalog import prepare_task, resolve_tasks
    from tbx.config import TasksConfig

    return prepare_task(resolve_tasks(TasksConfig(name="mock", domains=["mock"]))[0], backend).template


def test_killed_sqlite_runs_leave_no_episode_files_after_the_next_start(tmp_path):
    work = tmp_path / "db"
    args = ["stage=eval", f"backend.workdir={work}", f"out_root={tmp_path}", f"run_dir={tmp_path / 'run'}", *SLOW]

    def files() -> set[Path]:
        return set((work / "episodes").glob("*/*.sqlite"))

    kill_while(args, lambda: len(files()) >= 2)
    left = {p.parent for p in files()}
    assert left and all(folder.is_dir() for folder in left)
    live = make_backend("sqlite", None, str(work))  # a live process's folder is kept
    try:
        done = subprocess.run([sys.executable, str(ROOT / "launch.py"), *args], capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        assert not any(folder.exists() for folder in left)
        assert [p.name for p in (work / "episodes").iterdir()] == [live.episodes.name]
        assert live.episodes.name.startswith(this_process().tag)
    finally:
        live.close()
