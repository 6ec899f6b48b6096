"""Auto insurance domain tables: policyholders, policies with coverages, vehicles and drivers,
claims with payouts and adjuster reviews, endorsements, underwriting referrals, premium refunds
and support cases.

Dates are ISO strings (YYYY-MM-DD), money is `Numeric(12, 2)`. `updated_at` columns and
`audit_log` are bookkeeping the checks ignore (the domain declares them volatile); `identity_checks`
is a record the checks require where a task verifies its caller.
"""

from sqlalchemy import Column, ForeignKey, Integer, MetaData, Numeric, String, Table

from tbx.domains.kit import audit_log_table, identity_checks_table, support_cases_table

metadata = MetaData()

policyholders = Table(
    "policyholders", metadata,
    Column("id", Integer, primary_key=True),
    Column("first_name", String(40), nullable=False),
    Column("last_name", String(40), nullable=False),
    Column("date_of_birth", String(10), nullable=False),
    Column("email", String(120), nullable=False),
    Column("phone", String(20)),
    Column("street", String(80)),
    Column("city", String(40), nullable=False),
    Column("state", String(2), nullable=False),  # sets the claims adjuster (policy.md)
    Column("updated_at", String(32)),
)

policies = Table(
    "policies", metadata,
    Column("id", Integer, primary_key=True),
    Column("policy_number", String(12), nullable=False, unique=True),
    Column("policyholder_id", Integer, ForeignKey("policyholders.id"), nullable=False),
    Column("status", String(10), nullable=False),  # active | cancelled | lapsed
    Column("effective_date", String(10), nullable=False),
    Column("expiration_date", String(10), nullable=False),
    Column("annual_premium", Numeric(12, 2), nullable=False),  # paid in full at the start of the term
    Column("cancellation_date", String(10)),
    Column("updated_at", String(32)),
)

coverages = Table(
    "coverages", metadata,
    Column("id", Integer, primary_key=True),
    Column("policy_id", Integer, ForeignKey("policies.id"), nullable=False),
    Column("coverage_type", String(20), nullable=False),  # liability | collision | comprehensive | rental
    Column("limit_amount", Numeric(12, 2), nullable=False),
    Column("deductible", Numeric(12, 2), nullable=False),
)

vehicles = Table(
    "vehicles", metadata,
    Column("id", Integer, primary_key=True),
    Column("policy_id", Integer, ForeignKey("policies.id"), nullable=False),
    Column("vin", String(17), nullable=False),
    Column("year", Integer, nullable=False),
    Column("make", String(20), nullable=False),
    Column("model", String(20), nullable=False),
    Column("status", String(10), nullable=False),  # active | removed
)

drivers = Table(
    "drivers", metadata,
    Column("id", Integer, primary_key=True),
    Column("policy_id", Integer, ForeignKey("policies.id"), nullable=False),
    Column("first_name", String(40), nullable=False),
    Column("last_name", String(40), nullable=False),
    Column("date_of_birth", String(10), nullable=False),
    Column("license_number", String(20), nullable=False),
    Column("status", String(10), nullable=False),  # active | excluded
)

claims = Table(
    "claims", metadata,
    Column("id", Integer, primary_key=True),
    Column("policy_id", Integer, ForeignKey("policies.id"), nullable=False),
    Column("vehicle_id", Integer, ForeignKey("vehicles.id"), nullable=False),
    Column("incident_type", String(20), nullable=False),
    Column("coverage_type", String(20), nullable=False),
    Column("incident_date", String(10), nullable=False),
    Column("reported_date", String(10), nullable=False),
    Column("estimated_damage", Numeric(12, 2), nullable=False),
    Column("reserve", Numeric(12, 2), nullable=False),
    Column("assessed_damage", Numeric(12, 2)),  # set by the appraiser; settlement uses it
    Column("status", String(12), nullable=False),  # open | under_review | paid | closed
    Column("description", String(400)),
    Column("updated_at", String(32)),
)

payouts = Table(
    "payouts", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("claim_id", Integer, ForeignKey("claims.id"), nullable=False),
    Column("amount", Numeric(12, 2), nullable=False),
    Column("status", String(10), nullable=False),  # issued
    Column("note", String(200)),
)

adjusters = Table(
    "adjusters", metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(80), nullable=False),
    Column("state", String(2), nullable=False),
    Column("status", String(10), nullable=False),  # active | on_leave
)

adjuster_reviews = Table(
    "adjuster_reviews", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("claim_id", Integer, ForeignKey("claims.id"), nullable=False),
    Column("adjuster_id", Integer, ForeignKey("adjusters.id"), nullable=False),
    Column("amount", Numeric(12, 2), nullable=False),  # the payout the adjuster is asked to review
    Column("status", String(10), nullable=False),  # pending | approved
    Column("reason", String(200)),
)

endorsements = Table(
    "endorsements", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("policy_id", Integer, ForeignKey("policies.id"), nullable=False),
    Column("kind", String(12), nullable=False),  # add_driver | add_vehicle
    Column("driver_id", Integer, ForeignKey("drivers.id")),
    Column("vehicle_id", Integer, ForeignKey("vehicles.id")),
    Column("effective_date", String(10), nullable=False),
    Column("premium_change", Numeric(12, 2), nullable=False),
)

underwriting_referrals = Table(
    "underwriting_referrals", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("policy_id", Integer, ForeignKey("policies.id"), nullable=False),
    Column("first_name", String(40), nullable=False),
    Column("last_name", String(40), nullable=False),
    Column("date_of_birth", String(10), nullable=False),
    Column("license_number", String(20), nullable=False),
    Column("status", String(10), nullable=False),  # pending
    Column("reason", String(200)),
)

premium_refunds = Table(
    "premium_refunds", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("policy_id", Integer, ForeignKey("policies.id"), nullable=False),
    Column("amount", Numeric(12, 2), nullable=False),
    Column("status", String(10), nullable=False),  # issued
    Column("reason", String(200)),
)

support_cases = support_cases_table(
    metadata,
    Column("policyholder_id", Integer, ForeignKey("policyholders.id"), nullable=False),
    Column("policy_id", Integer, ForeignKey("policies.id"), nullable=False),
    autoincrement=True,
)

# one row per policyholder the agent verified (policy.md)
identity_checks = identity_checks_table(
    metadata,
    Column("policyholder_id", Integer, ForeignKey("policyholders.id"), nullable=False),
)

audit_log = audit_log_table(metadata)
