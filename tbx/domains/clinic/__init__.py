"""Clinic domain (training split): patients, practitioners, appointment slots and appointments,
referrals, prescription refills, insurance eligibility and no-show / late-cancellation fees,
under a front-desk policy with identity checks, fee rules, referral and refill rules."""

from tbx.domains import build_domain

DOMAIN = build_domain(
    __name__,
    split="train",
    volatile=("audit_log", "appointments.updated_at", "patients.updated_at", "prescriptions.updated_at"),
    records=("identity_checks",),
    distractors=(
        {"tool": "open_front_desk_case", "arguments": {"patient_id": 21, "category": "billing_question",
                                            "summary": "Asked for an itemised invoice."}},
        {"tool": "request_renewal", "arguments": {"prescription_id": 12}},
    ),
)
