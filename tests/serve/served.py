"""`launch.py stage=serve` in a process of its own, as a user starts it, for the serve tests."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from tbx.catalog import resolve_tasks
from tbx.config import TasksConfig
from tbx.store.results import read_records

ROOT = Path(__file__).resolve().parents[2]
ANNOUNCED = re.compile(r" at (http://\S+) -> (\S+)")


def tasks_of(domain):
    return resolve_tasks(TasksConfig(name=domain, domains=[domain]))


def serve_args(tmp_path: Path, *overrides: str) -> list[str]:
    return [sys.executable, str(ROOT / "launch.py"), "stage=serve", "serve.port=0", "logger=none",
            f"out_root={tmp_path}/outputs", f"backend.workdir={tmp_path}/db", *overrides]


class Served:
    """The server process: `url` and `run_dir` once it listens, `wait()` for its exit, then its results."""

    def __init__(self, tmp_path: Path, *overrides: str, env: dict[str, str] | None = None, ready_s: float = 180.0):
        self.args, self.env, self.ready_s = serve_args(tmp_path, *overrides), env, ready_s
        self.stderr_path = tmp_path / f"serve-{len(list(tmp_path.glob('serve-*.err')))}.err"
        self.lines: list[str] = []
        self._announced = threading.Event()
        self.url = ""
        self.run_dir = Path()

    def __enter__(self) -> Served:
        self._stderr = self.stderr_path.open("w")
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=self._stderr, text=True, cwd=ROOT,
                                     env=self.env)
        threading.Thread(target=self._read, daemon=True).start()
        if not self._announced.wait(self.ready_s) or not self.url:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"the server did not announce its URL: {self.output()[-2000:]}")
        return self

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            found = ANNOUNCED.search(line)
            if found and not self._announced.is_set():
                self.url, self.run_dir = found.group(1), Path(found.group(2))
                self._announced.set()
        self._announced.set()

    def output(self) -> str:
        return "".join(self.lines) + self.stderr_path.read_text()

    def wait(self, timeout: float = 120.0) -> int:
        return self.proc.wait(timeout=timeout)

    def __exit__(self, *exc: Any) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._stderr.close()

    @property
    def summary(self) -> dict[str, Any]:
        return json.loads((self.run_dir / "summary.json").read_text())

    @property
    def records(self) -> dict[tuple[str, int], dict[str, Any]]:
        return {(r.task_id, r.attempt): r for r in read_records(self.run_dir)}
