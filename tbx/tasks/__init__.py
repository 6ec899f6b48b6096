"""Task records and their loading (see `model` for the format, `loader` for validation)."""

from tbx.tasks.loader import load_task, load_task_file, load_tasks
from tbx.tasks.model import (
    Checks,
    ExpectedChange,
    JudgeRule,
    PrivateFact,
    Step,
    Task,
    UserScenario,
)

__all__ = [
    "Checks",
    "ExpectedChange",
    "JudgeRule",
    "PrivateFact",
    "Step",
    "Task",
    "UserScenario",
    "load_task",
    "load_task_file",
    "load_tasks",
]
