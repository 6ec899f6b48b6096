"""Clinic domain tables: patients, practitioners, appointment slots and appointments, referrals,
prescriptions and refill orders, insurance plans and their member rosters, charges (fees) and
front-desk cases.

Dates are ISO strings (YYYY-MM-DD), times HH:MM. Money is `Numeric(12, 2)`. `updated_at` columns
and `audit_log` are bookkeeping the checks ignore (the domain declares them volatile); `identity_checks`
is a record the checks require where a task verifies its caller.
"""

from sqlalchemy import Column, ForeignKey, Integer, MetaData, Numeric, String, Table

from tbx.domains.kit import audit_log_table, identity_checks_table

metadata = MetaData()

practitioners = Table(
    "practitioners", metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(80), nullable=False),
    Column("specialty", String(20), nullable=False),  # general | cardiology | dermatology | orthopedics | neurology
)

insurance_plans = Table(
    "insurance_plans", metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(60), nullable=False, unique=True),
    Column("copay", Numeric(12, 2), nullable=False),
)

insurance_members = Table(  # the insurers' rosters that check_eligibility reads
    "insurance_members", metadata,
    Column("id", Integer, primary_key=True),
    Column("plan_id", Integer, ForeignKey("insurance_plans.id"), nullable=False),
    Column("member_id", String(20), nullable=False),
    Column("status", String(10), nullable=False),  # active | terminated
)

patients = Table(
    "patients", metadata,
    Column("id", Integer, primary_key=True),  # the patient number
    Column("first_name", String(40), nullable=False),
    Column("last_name", String(40), nullable=False),
    Column("date_of_birth", String(10), nullable=False),
    Column("phone", String(20)),
    Column("primary_practitioner_id", Integer, ForeignKey("practitioners.id"), nullable=False),
    Column("insurance_plan_id", Integer, ForeignKey("insurance_plans.id")),
    Column("insurance_member_id", String(20)),
    Column("updated_at", String(32)),
)

slots = Table(
    "slots", metadata,
    Column("id", Integer, primary_key=True),
    Column("practitioner_id", Integer, ForeignKey("practitioners.id"), nullable=False),
    Column("date", String(10), nullable=False),
    Column("start_time", String(5), nullable=False),
    Column("status", String(10), nullable=False),  # open | booked
)

referrals = Table(
    "referrals", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("patient_id", Integer, ForeignKey("patients.id"), nullable=False),
    Column("specialty", String(20), nullable=False),
    Column("referring_practitioner_id", Integer, ForeignKey("practitioners.id"), nullable=False),
    Column("status", String(10), nullable=False),  # requested | active | used
    Column("expires_on", String(10)),
)

appointments = Table(
    "appointments", metadata,
    Column("id", Integer, primary_key=True),  # the appointment number
    Column("patient_id", Integer, ForeignKey("patients.id"), nullable=False),
    Column("slot_id", Integer, ForeignKey("slots.id"), nullable=False),
    Column("practitioner_id", Integer, ForeignKey("practitioners.id"), nullable=False),
    Column("status", String(12), nullable=False),  # booked | checked_in | completed | cancelled | no_show
    Column("referral_id", Integer, ForeignKey("referrals.id")),
    Column("updated_at", String(32)),
)

prescriptions = Table(
    "prescriptions", metadata,
    Column("id", Integer, primary_key=True),
    Column("patient_id", Integer, ForeignKey("patients.id"), nullable=False),
    Column("practitioner_id", Integer, ForeignKey("practitioners.id"), nullable=False),
    Column("drug", String(60), nullable=False),
    Column("dosage", String(40), nullable=False),
    Column("refills_remaining", Integer, nullable=False),
    Column("controlled", Integer, nullable=False),  # 1: controlled substance
    Column("updated_at", String(32)),
)

refill_orders = Table(
    "refill_orders", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("prescription_id", Integer, ForeignKey("prescriptions.id"), nullable=False),
    Column("kind", String(16), nullable=False),  # refill | renewal_request
    Column("status", String(16), nullable=False),  # sent (to the pharmacy) | pending_review (by the prescriber)
)

charges = Table(
    "charges", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("patient_id", Integer, ForeignKey("patients.id"), nullable=False),
    Column("appointment_id", Integer, ForeignKey("appointments.id")),
    Column("kind", String(20), nullable=False),  # late_cancel_fee | no_show_fee
    Column("amount", Numeric(12, 2), nullable=False),
    Column("status", String(10), nullable=False),  # billed
)

cases = Table(
    "cases", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("patient_id", Integer, ForeignKey("patients.id"), nullable=False),
    Column("category", String(32), nullable=False),
    Column("status", String(10), nullable=False),  # open
    Column("summary", String(400)),
)

# one row per patient the agent verified (policy.md)
identity_checks = identity_checks_table(
    metadata,
    Column("patient_id", Integer, ForeignKey("patients.id"), nullable=False),
)

audit_log = audit_log_table(metadata)
