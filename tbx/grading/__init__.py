"""The verdict: a row-level diff of the initial and terminal database states against the task's
expected changes. One grader serves evaluation, probing and the training reward."""

from tbx.grading.diff import RowChange, diff_states, same_changes
from tbx.grading.verdict import CheckResult, Grade, derive_expected, grade_state

__all__ = ["CheckResult", "Grade", "RowChange", "derive_expected", "diff_states", "grade_state", "same_changes"]
