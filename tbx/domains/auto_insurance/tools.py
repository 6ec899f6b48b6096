"""Auto insurance tools: what the policy-service agent may read and write.

The tools enforce only hard invariants (records exist, a vehicle belongs to the policy, a paid
claim is not paid again, a cancelled policy takes no endorsement, refunds never exceed the
premium). Business rules such as the 30-day filing window, the adjuster-review threshold or the
under-21 referral live in policy.md and are the agent's to follow: the tools would let the
agent break them, which is exactly what a task checks.
"""

from decimal import Decimal

from sqlalchemy import func, insert, select, update

from tbx.domains.auto_insurance.schema import (
    adjuster_reviews,
    adjusters,
    audit_log,
    claims,
    coverages,
    drivers,
    endorsements,
    identity_checks,
    payouts,
    policies,
    policyholders,
    premium_refunds,
    support_cases,
    underwriting_referrals,
    vehicles,
)
from tbx.domains.auto_insurance.seed import COVERAGE_FOR, TODAY, VIN_ALPHABET
from tbx.domains.kit import fetch_one, fetch_rows, parse_date, parse_money, record_once, require_text
from tbx.tools import ToolFailure, tool

CONTACT_FIELDS = ("phone", "email", "street")
COVERAGE_TYPES = ("liability", "collision", "comprehensive", "rental")
CASE_CATEGORIES = ("claim_late_report", "claim_not_covered", "identity_verification_failed", "other")
MODIFIED = "modified"  # updated_at marker: a constant keeps terminal states reproducible


def _policy(db, policy_number: str) -> dict:
    row = db.execute(select(policies).where(policies.c.policy_number == policy_number.strip().upper())
                     ).mappings().first()
    if row is None:
        raise ToolFailure(f"no policy with number {policy_number!r}")
    return {k: v for k, v in row.items() if k != "updated_at"}


def _active_policy(db, policy_number: str) -> dict:
    row = _policy(db, policy_number)
    if row["status"] != "active":
        raise ToolFailure(f"policy {row['policy_number']} is {row['status']} and cannot be changed")
    return row


def _claim(db, claim_id: int) -> dict:
    return fetch_one(db, claims, claim_id, "claim")


def _open_claim(db, claim_id: int) -> dict:
    row = _claim(db, claim_id)
    if row["status"] != "open":
        raise ToolFailure(f"claim {claim_id} is {row['status']}, not open")
    return row


def _log(db, event: str) -> None:
    db.execute(insert(audit_log).values(event=event))


@tool("write")
def verify_policyholder(db, policy_number: str, date_of_birth: str) -> dict:
    """Verify a caller as the policyholder of a policy; a success is recorded on the policyholder's file.

    Returns {"verified": true, "policyholder": ...} when the date of birth matches the
    policyholder's, otherwise {"verified": false, "reason": ...}.

    Args:
        policy_number: The policy number as the caller gave it, e.g. "PA-482915".
        date_of_birth: The caller's date of birth as YYYY-MM-DD.
    """
    row = _policy(db, policy_number)
    person = db.execute(select(policyholders).where(policyholders.c.id == row["policyholder_id"])).mappings().one()
    # A mismatch is an answer, not a tool error: policy.md tells the agent what to do next.
    if date_of_birth.strip() != person["date_of_birth"]:
        return {"verified": False, "reason": f"the date of birth does not match policy {row['policy_number']}"}
    record_once(db, identity_checks, policyholder_id=person["id"])
    return {"verified": True, "policyholder": {k: v for k, v in person.items()
                                               if k not in ("date_of_birth", "updated_at")}}


@tool("read")
def get_policy(db, policy_number: str) -> dict:
    """Show a policy with its policyholder's state, coverages (limits, deductibles), vehicles and drivers.

    Args:
        policy_number: The policy number, e.g. "PA-482915".
    """
    row = _policy(db, policy_number)
    state = db.execute(select(policyholders.c.state).where(policyholders.c.id == row["policyholder_id"])).scalar()
    row["policyholder_state"] = state
    row["coverages"] = fetch_rows(db, select(coverages).where(coverages.c.policy_id == row["id"])
                             .order_by(coverages.c.id))
    row["vehicles"] = fetch_rows(db, select(vehicles).where(vehicles.c.policy_id == row["id"]).order_by(vehicles.c.id))
    row["drivers"] = fetch_rows(db, select(drivers).where(drivers.c.policy_id == row["id"]).order_by(drivers.c.id))
    return row


@tool("read")
def list_claims(db, policy_number: str) -> list[dict]:
    """List the claims filed on a policy (any status).

    Args:
        policy_number: The policy number, e.g. "PA-482915".
    """
    row = _policy(db, policy_number)
    keep = (claims.c.id, claims.c.vehicle_id, claims.c.incident_type, claims.c.incident_date, claims.c.status)
    return fetch_rows(db, select(*keep).where(claims.c.policy_id == row["id"]).order_by(claims.c.id))


@tool("read")
def get_claim(db, claim_id: int) -> dict:
    """Show a claim with its appraised damage, payouts and adjuster reviews.

    Args:
        claim_id: The claim number (a numeric ID).
    """
    row = _claim(db, claim_id)
    row["policy_number"] = db.execute(select(policies.c.policy_number).where(policies.c.id == row["policy_id"])
                                      ).scalar()
    row["payouts"] = fetch_rows(db, select(payouts).where(payouts.c.claim_id == claim_id).order_by(payouts.c.id))
    row["adjuster_reviews"] = fetch_rows(db, select(adjuster_reviews).where(adjuster_reviews.c.claim_id == claim_id)
                                    .order_by(adjuster_reviews.c.id))
    return row


@tool("read")
def list_adjusters(db, state: str) -> list[dict]:
    """List the claims adjusters of a state with their status (active or on_leave).

    Args:
        state: Two-letter state code, e.g. "MA".
    """
    return fetch_rows(db, select(adjusters).where(adjusters.c.state == state.strip().upper()).order_by(adjusters.c.id))


@tool("write", free_args=("description",))
def file_claim(db, policy_number: str, vehicle_id: int, incident_type: str, coverage_type: str,
               incident_date: str, estimated_damage: float, reserve: float, description: str) -> dict:
    """File a new claim (first notice of loss) for a vehicle on a policy; the claim opens with status "open".

    Args:
        policy_number: The policy number, e.g. "PA-482915".
        vehicle_id: The damaged vehicle's numeric ID (from get_policy).
        incident_type: One of "collision", "hail", "theft", "vandalism", "flood", "fire",
            "animal_strike", "glass".
        coverage_type: The coverage the claim is made under: "collision" or "comprehensive".
        incident_date: The day of the incident as YYYY-MM-DD.
        estimated_damage: The repair estimate in dollars.
        reserve: The reserve to set aside in dollars (see the claims rules).
        description: What happened, in a sentence.
    """
    row = _policy(db, policy_number)
    if incident_type not in COVERAGE_FOR:
        raise ToolFailure(f"incident_type must be one of {', '.join(COVERAGE_FOR)}, not {incident_type!r}")
    if coverage_type not in ("collision", "comprehensive"):
        raise ToolFailure(f"coverage_type must be collision or comprehensive, not {coverage_type!r}")
    car = db.execute(select(vehicles).where(vehicles.c.id == vehicle_id)).mappings().first()
    if car is None or car["policy_id"] != row["id"]:
        raise ToolFailure(f"vehicle {vehicle_id} is not on policy {row['policy_number']}")
    values = dict(policy_id=row["id"], vehicle_id=vehicle_id, incident_type=incident_type,
                  coverage_type=coverage_type, incident_date=parse_date(incident_date, "incident_date"),
                  reported_date=TODAY.isoformat(), estimated_damage=parse_money(estimated_damage, "estimated_damage"),
                  reserve=parse_money(reserve, "reserve", allow_zero=True), status="open",
                  description=description)
    new_id = db.execute(insert(claims).values(**values)).inserted_primary_key[0]
    _log(db, f"file_claim claim={new_id}")
    return {"claim_id": new_id, "status": "open", "reported_date": values["reported_date"]}


@tool("write", free_args=("note",))
def record_payout(db, claim_id: int, amount: float, note: str) -> dict:
    """Pay an open claim: records the payout to the policyholder and marks the claim "paid".

    Args:
        claim_id: The claim's numeric ID.
        amount: Dollars paid, greater than zero, at most two decimals.
        note: How the amount was worked out, in a few words.
    """
    value = parse_money(amount)
    _open_claim(db, claim_id)
    new_id = db.execute(insert(payouts).values(claim_id=claim_id, amount=value, status="issued", note=note)
                        ).inserted_primary_key[0]
    db.execute(update(claims).where(claims.c.id == claim_id).values(status="paid", updated_at=MODIFIED))
    _log(db, f"record_payout claim={claim_id} payout={new_id}")
    return {"payout_id": new_id, "claim_id": claim_id, "amount": value, "claim_status": "paid"}


@tool("write", free_args=("reason",))
def request_adjuster_review(db, claim_id: int, adjuster_id: int, amount: float, reason: str) -> dict:
    """Send an open claim's proposed payout to an adjuster for review; the claim becomes "under_review".

    No money is paid: the adjuster decides.

    Args:
        claim_id: The claim's numeric ID.
        adjuster_id: The reviewing adjuster's numeric ID (from list_adjusters).
        amount: The proposed payout in dollars.
        reason: Why the review is needed, in a sentence.
    """
    value = parse_money(amount)
    _open_claim(db, claim_id)
    if db.execute(select(adjusters.c.id).where(adjusters.c.id == adjuster_id)).first() is None:
        raise ToolFailure(f"adjuster {adjuster_id} not found")
    new_id = db.execute(insert(adjuster_reviews).values(claim_id=claim_id, adjuster_id=adjuster_id, amount=value,
                                                        status="pending", reason=reason)).inserted_primary_key[0]
    db.execute(update(claims).where(claims.c.id == claim_id).values(status="under_review", updated_at=MODIFIED))
    _log(db, f"request_adjuster_review claim={claim_id} review={new_id}")
    return {"review_id": new_id, "claim_id": claim_id, "status": "pending"}


def _endorse(db, row: dict, kind: str, premium_change: Decimal, driver_id=None, vehicle_id=None) -> Decimal:
    db.execute(insert(endorsements).values(policy_id=row["id"], kind=kind, driver_id=driver_id,
                                           vehicle_id=vehicle_id, effective_date=TODAY.isoformat(),
                                           premium_change=premium_change))
    premium = Decimal(str(row["annual_premium"])) + premium_change
    db.execute(update(policies).where(policies.c.id == row["id"]).values(annual_premium=premium,
                                                                         updated_at=MODIFIED))
    return premium


@tool("write")
def add_driver(db, policy_number: str, first_name: str, last_name: str, date_of_birth: str,
               license_number: str, premium_change: float) -> dict:
    """Add a driver to an active policy, effective today, and raise the annual premium by `premium_change`.

    Args:
        policy_number: The policy number, e.g. "PA-482915".
        first_name: The new driver's first name.
        last_name: The new driver's last name.
        date_of_birth: The new driver's date of birth as YYYY-MM-DD.
        license_number: The new driver's license number.
        premium_change: Dollars added to the annual premium (see the endorsement rules).
    """
    row = _active_policy(db, policy_number)
    change = parse_money(premium_change, "premium_change", allow_zero=True)
    licence = require_text(license_number, "license_number").upper()
    taken = db.execute(select(drivers.c.id).where(drivers.c.policy_id == row["id"],
                                                  drivers.c.license_number == licence)).first()
    if taken is not None:
        raise ToolFailure(f"a driver with license {licence} is already on policy {row['policy_number']}")
    new_id = db.execute(insert(drivers).values(
        policy_id=row["id"], first_name=require_text(first_name, "first_name"), last_name=require_text(last_name, "last_name"),
        date_of_birth=parse_date(date_of_birth, "date_of_birth"), license_number=licence, status="active")
                        ).inserted_primary_key[0]
    premium = _endorse(db, row, "add_driver", change, driver_id=new_id)
    _log(db, f"add_driver policy={row['id']} driver={new_id}")
    return {"driver_id": new_id, "annual_premium": premium}


@tool("write", free_args=("reason",))
def refer_to_underwriting(db, policy_number: str, first_name: str, last_name: str, date_of_birth: str,
                          license_number: str, reason: str) -> dict:
    """Refer a proposed driver to underwriting; nothing changes on the policy until underwriting decides.

    Args:
        policy_number: The policy number, e.g. "PA-482915".
        first_name: The proposed driver's first name.
        last_name: The proposed driver's last name.
        date_of_birth: The proposed driver's date of birth as YYYY-MM-DD.
        license_number: The proposed driver's license number.
        reason: Why underwriting must decide, in a sentence.
    """
    row = _active_policy(db, policy_number)
    new_id = db.execute(insert(underwriting_referrals).values(
        policy_id=row["id"], first_name=require_text(first_name, "first_name"), last_name=require_text(last_name, "last_name"),
        date_of_birth=parse_date(date_of_birth, "date_of_birth"),
        license_number=require_text(license_number, "license_number").upper(), status="pending", reason=reason)
                        ).inserted_primary_key[0]
    _log(db, f"refer_to_underwriting policy={row['id']} referral={new_id}")
    return {"referral_id": new_id, "status": "pending"}


@tool("write")
def add_vehicle(db, policy_number: str, vin: str, year: int, make: str, model: str, premium_change: float) -> dict:
    """Add a vehicle to an active policy, effective today, and raise the annual premium by `premium_change`.

    Args:
        policy_number: The policy number, e.g. "PA-482915".
        vin: The vehicle identification number (17 characters).
        year: The model year.
        make: The maker, e.g. "Toyota".
        model: The model, e.g. "Camry".
        premium_change: Dollars added to the annual premium (see the endorsement rules).
    """
    row = _active_policy(db, policy_number)
    code = vin.strip().upper()
    if len(code) != 17 or any(ch not in VIN_ALPHABET for ch in code):
        raise ToolFailure(f"{vin!r} is not a VIN: 17 letters and digits, without I, O or Q")
    if not 1980 <= year <= TODAY.year + 1:
        raise ToolFailure(f"model year {year} is out of range")
    if db.execute(select(vehicles.c.id).where(vehicles.c.policy_id == row["id"], vehicles.c.vin == code)).first():
        raise ToolFailure(f"vehicle {code} is already on policy {row['policy_number']}")
    change = parse_money(premium_change, "premium_change", allow_zero=True)
    new_id = db.execute(insert(vehicles).values(
        policy_id=row["id"], vin=code, year=year, make=require_text(make, "make"), model=require_text(model, "model"),
        status="active")).inserted_primary_key[0]
    premium = _endorse(db, row, "add_vehicle", change, vehicle_id=new_id)
    _log(db, f"add_vehicle policy={row['id']} vehicle={new_id}")
    return {"vehicle_id": new_id, "annual_premium": premium}


@tool("write", free_args=("reason",))
def cancel_policy(db, policy_number: str, cancellation_date: str, reason: str) -> dict:
    """Cancel an active policy as of a date inside its term. Money is not moved: refund separately.

    Args:
        policy_number: The policy number, e.g. "PA-482915".
        cancellation_date: The day the cancellation takes effect, YYYY-MM-DD.
        reason: Why the policyholder cancels, in a few words.
    """
    row = _active_policy(db, policy_number)
    when = parse_date(cancellation_date, "cancellation_date")
    if not row["effective_date"] <= when < row["expiration_date"]:
        raise ToolFailure(f"{when} is outside the policy term {row['effective_date']} to {row['expiration_date']}")
    db.execute(update(policies).where(policies.c.id == row["id"]).values(status="cancelled", cancellation_date=when,
                                                                         updated_at=MODIFIED))
    _log(db, f"cancel_policy policy={row['id']} reason={reason[:80]}")
    return {"policy_number": row["policy_number"], "status": "cancelled", "cancellation_date": when}


@tool("write", free_args=("reason",))
def issue_premium_refund(db, policy_number: str, amount: float, reason: str) -> dict:
    """Refund premium on a cancelled policy to the policyholder's payment method.

    The refunds of a policy never add up to more than its annual premium.

    Args:
        policy_number: The policy number, e.g. "PA-482915".
        amount: Dollars to refund, greater than zero, at most two decimals.
        reason: Why the refund is made, in a few words.
    """
    value = parse_money(amount)
    row = _policy(db, policy_number)
    if row["status"] != "cancelled":
        raise ToolFailure(f"policy {row['policy_number']} is {row['status']}; only a cancelled policy is refunded")
    refunded = db.execute(select(func.coalesce(func.sum(premium_refunds.c.amount), 0))
                          .where(premium_refunds.c.policy_id == row["id"])).scalar_one()
    available = Decimal(str(row["annual_premium"])) - Decimal(str(refunded))
    if value > available:
        raise ToolFailure(f"refund of {value} exceeds the {available} of premium still refundable")
    new_id = db.execute(insert(premium_refunds).values(policy_id=row["id"], amount=value, status="issued",
                                                       reason=reason)).inserted_primary_key[0]
    _log(db, f"issue_premium_refund policy={row['id']} refund={new_id}")
    return {"refund_id": new_id, "amount": value}


@tool("write")
def update_contact(db, policy_number: str, field: str, value: str) -> dict:
    """Change one contact detail of a policy's policyholder.

    Args:
        policy_number: The policy number, e.g. "PA-482915".
        field: One of "phone", "email", "street".
        value: The new value, exactly as the policyholder gave it.
    """
    if field not in CONTACT_FIELDS:
        raise ToolFailure(f"field must be one of {', '.join(CONTACT_FIELDS)}, not {field!r}")
    row = _policy(db, policy_number)
    value = require_text(value, "value")
    if field == "email" and "@" not in value:
        raise ToolFailure(f"{value!r} is not an email address")
    db.execute(update(policyholders).where(policyholders.c.id == row["policyholder_id"])
               .values({field: value, "updated_at": MODIFIED}))
    _log(db, f"update_contact policyholder={row['policyholder_id']} field={field}")
    return {"policy_number": row["policy_number"], field: value}


@tool("write", free_args=("summary",))
def open_support_case(db, policy_number: str, category: str, summary: str) -> dict:
    """Open a support case on a policy for the service team to follow up.

    Args:
        policy_number: The policy number, e.g. "PA-482915".
        category: One of "claim_late_report", "claim_not_covered", "identity_verification_failed", "other".
        summary: What happened and what the caller wants, in a sentence or two.
    """
    if category not in CASE_CATEGORIES:
        raise ToolFailure(f"category must be one of {', '.join(CASE_CATEGORIES)}, not {category!r}")
    row = _policy(db, policy_number)
    new_id = db.execute(insert(support_cases).values(policyholder_id=row["policyholder_id"], policy_id=row["id"],
                                                     category=category, status="open", summary=summary)
                        ).inserted_primary_key[0]
    _log(db, f"open_support_case case={new_id}")
    return {"case_id": new_id, "status": "open"}
