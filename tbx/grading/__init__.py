"""The verdict: a row-level diff of the initial and terminal database states against the task's
expected changes. One grader serves evaluation, probing and the training reward."""

from tbx.grading.diff import RowChange, diff_states, same_changes
from tbx.grading.judge_llm import LLMJudge
from tbx.grading.verdict import CheckResult, Grade, derive_expected, grade_state
from tbx.traits import declare

# The LLM judge's trait (tbx/traits.py), declared here rather than in its class body: its file is part of
# every run's identity (tbx/runs/identity.py CODE_PARTS), and a trait changes no verdict.
declare(LLMJudge, needs_llm=True)

__all__ = ["CheckResult", "Grade", "RowChange", "derive_expected", "diff_states", "grade_state", "same_changes"]
