"""The verdict on hand-made states: every expected change present, nothing else changed."""

from decimal import Decimal

from tbx.backend.state import canonical
from tbx.grading import derive_expected, diff_states, grade_state
from tbx.grading.judge import JudgeVerdict
from tbx.tasks.model import ExpectedChange, JudgeRule


def state(bookings, approvals=(), audit=()):
    return {
        "bookings": {"pk": ["id"], "rows": [dict(r) for r in bookings]},
        "approvals": {"pk": ["id"], "rows": [dict(r) for r in approvals]},
        "audit_log": {"pk": ["id"], "rows": [dict(r) for r in audit]},
    }


INITIAL = state([{"id": "1", "room": "suite", "price": "1450", "updated_at": None},
                 {"id": "2", "room": "standard", "price": "300", "updated_at": None}])
APPROVAL = {"id": "7", "booking_id": "1", "status": "pending", "reason": "user asked"}
EXPECT_APPROVAL = [ExpectedChange("insert", "approvals", values={"booking_id": 1, "status": "pending"})]
VOLATILE = ("audit_log", "bookings.updated_at")


def test_canonical_numbers_are_equal_across_types():
    # 25, 25.0 and Decimal("25.00") are the same amount; True is stored as 1
    assert canonical(25) == canonical(25.0) == canonical(Decimal("25.00")) == "25"
    assert canonical(Decimal("1450.50")) == canonical(1450.5) == "1450.5"
    assert canonical(True) == canonical(1) == "1" and canonical(None) is None


def test_expected_insert_passes_and_free_columns_are_not_compared():
    final = state(INITIAL["bookings"]["rows"], [APPROVAL])
    grade = grade_state(INITIAL, final, EXPECT_APPROVAL, VOLATILE)
    assert grade.passed, grade.explain()


def test_do_nothing_fails_with_missing_record_named():
    grade = grade_state(INITIAL, INITIAL, EXPECT_APPROVAL, VOLATILE)
    assert grade.passed is False
    assert "missing: no new row in approvals" in grade.explain()


def test_extra_side_effect_fails_and_names_the_row():
    rows = [dict(INITIAL["bookings"]["rows"][0], room="standard", price="1000"), INITIAL["bookings"]["rows"][1]]
    grade = grade_state(INITIAL, state(rows, [APPROVAL]), EXPECT_APPROVAL, VOLATILE)
    assert grade.passed is False
    failed = grade.failed_checks
    assert [c.name for c in failed] == ["no other change"]
    assert "update bookings {'id': '1'}" in failed[0].detail and "room: 'suite' -> 'standard'" in failed[0].detail


def test_volatile_columns_and_tables_are_ignored():
    rows = [dict(INITIAL["bookings"]["rows"][0], updated_at="2026-11-29"), INITIAL["bookings"]["rows"][1]]
    final = state(rows, [APPROVAL], audit=[{"id": "1", "event": "read booking"}])
    assert grade_state(INITIAL, final, EXPECT_APPROVAL, VOLATILE).passed


def test_update_with_wrong_value_names_column_and_values():
    expected = [ExpectedChange("update", "bookings", key={"id": 2}, values={"price": 250})]
    rows = [INITIAL["bookings"]["rows"][0], dict(INITIAL["bookings"]["rows"][1], price="260")]
    grade = grade_state(INITIAL, state(rows), expected, VOLATILE)
    assert grade.passed is False
    assert "row {'id': 2}: price is '260', expected '250'" in grade.explain()


def test_update_of_an_extra_column_in_the_expected_row_fails():
    expected = [ExpectedChange("update", "bookings", key={"id": 2}, values={"price": 250})]
    rows = [INITIAL["bookings"]["rows"][0], dict(INITIAL["bookings"]["rows"][1], price="250", room="suite")]
    grade = grade_state(INITIAL, state(rows), expected, VOLATILE)
    assert "room changed unexpectedly ('standard' -> 'suite')" in grade.explain()
    assert grade_state(INITIAL, state(rows), expected, VOLATILE, loose=("bookings.room",)).passed


def test_delete_expected_and_update_instead_fails():
    expected = [ExpectedChange("delete", "bookings", key={"id": 2})]
    assert grade_state(INITIAL, state(INITIAL["bookings"]["rows"][:1]), expected, VOLATILE).passed
    rows = [INITIAL["bookings"]["rows"][0], dict(INITIAL["bookings"]["rows"][1], price="1")]
    assert "was updated, expected deleted" in grade_state(INITIAL, state(rows), expected, VOLATILE).explain()


def test_no_expected_change_never_passes():
    # an empty expectation would pass a do-nothing agent (fleet-sdk #139): refused
    assert grade_state(INITIAL, INITIAL, [], VOLATILE).passed is False


def test_each_insert_spec_needs_its_own_row():
    two = EXPECT_APPROVAL * 2
    assert grade_state(INITIAL, state(INITIAL["bookings"]["rows"], [APPROVAL]), two, VOLATILE).passed is False
    both = [APPROVAL, dict(APPROVAL, id="8")]
    assert grade_state(INITIAL, state(INITIAL["bookings"]["rows"], both), two, VOLATILE).passed


def test_judge_rules_without_judge_exclude_and_with_judge_decide():
    rules = [JudgeRule("told_amount", "The agent told the user the refund amount.")]
    final = state(INITIAL["bookings"]["rows"], [APPROVAL])
    excluded = grade_state(INITIAL, final, EXPECT_APPROVAL, VOLATILE, judge_rules=rules)
    assert excluded.passed is None and "no judge" in excluded.excluded_reason
    no = grade_state(INITIAL, final, EXPECT_APPROVAL, VOLATILE, judge_rules=rules,
                     judge_verdicts=[JudgeVerdict("told_amount", False, "never said the amount")])
    assert no.passed is False and "never said the amount" in no.explain()
    yes = grade_state(INITIAL, final, EXPECT_APPROVAL, VOLATILE, judge_rules=rules,
                      judge_verdicts=[JudgeVerdict("told_amount", True, "said $1,450")])
    assert yes.passed


def test_derive_expected_from_reference_diff():
    final = state([dict(INITIAL["bookings"]["rows"][0], room="standard")], [APPROVAL])
    changes = diff_states(INITIAL, final, VOLATILE)
    specs = derive_expected(changes, loose=("approvals.reason",))
    assert ExpectedChange("update", "bookings", key={"id": "1"}, values={"room": "standard"}) in specs
    assert ExpectedChange("delete", "bookings", key={"id": "2"}) in specs
    assert ExpectedChange("insert", "approvals", values={"booking_id": "1", "status": "pending"}) in specs
    assert grade_state(INITIAL, final, specs, VOLATILE).passed
