"""The shared lexicon of the scripted user: how agents name the things a user knows.

Data only; `tbx.users.facts` reads it. A private fact's name is split into words (`employee_id` ->
employee, id). A word that names a *kind* (id, date, email, ...) says what sort of value it is; the
other words are its *subject* (employee), widened here with the synonyms and abbreviations agents
use (staff, personnel, badge). Phrases are lower-case and matched as whole words; `'s` is dropped
before matching, so "driver's" reads as "driver".

Add a row here when a new domain's facts use a word agents say in other ways; the phrasing corpus
in `tests/users/` measures what the table buys.
"""

from __future__ import annotations

# Words in a fact's name that give its kind (a fact may have several kinds: `missing_time` whose
# value is "2026-04-29: 8 hours" is a date and an amount of hours).
NAME_KINDS: dict[str, str] = {
    "id": "identifier", "number": "identifier", "no": "identifier", "num": "identifier", "code": "identifier",
    "reference": "identifier", "ref": "identifier", "last4": "identifier", "vin": "identifier",
    "license": "identifier", "licence": "identifier",
    "date": "date", "day": "date", "dob": "date", "birthday": "date",
    "name": "name", "surname": "name", "nickname": "name",
    "amount": "amount", "estimate": "amount", "estimated": "amount", "cost": "amount", "price": "amount",
    "total": "amount", "fee": "amount",
    "hours": "hours", "time": "time", "email": "email", "phone": "phone", "mobile": "phone",
    "address": "address", "zip": "postal", "postcode": "postal", "postal": "postal",
    "choice": "choice", "if": "choice",
}

# How a request names a kind. A noun cue ("number") takes its subject from the words beside it
# ("employee number", "number of your policy"); a question cue ("when", "how much") from anywhere in
# its sentence. The longest phrase wins, so "email address" is an email, not an address.
NOUN_CUES: dict[str, tuple[str, ...]] = {
    "identifier": ("id", "ids", "identifier", "number", "numbers", "no", "num", "#", "code", "codes",
                   "reference", "ref", "digits", "id number"),
    "date": ("date", "dates", "day", "days"),
    "name": ("name", "names", "full name"),
    "amount": ("amount", "cost", "costs", "price", "estimate", "quote", "total", "figure", "sum", "dollars"),
    "hours": ("hours", "hour", "hrs", "time", "entries", "entry"),
    "time": ("time", "departure", "morning", "evening", "afternoon", "early", "later", "late", "time of day",
             "departure time"),
    "email": ("email", "emails", "email address", "mail address"),
    "phone": ("phone", "telephone", "mobile", "cell", "cellphone", "phone number", "mobile number",
              "cell number", "contact number", "callback number"),
    "address": ("address", "street", "street address", "shipping address", "delivery address"),
    "postal": ("zip", "zipcode", "zip code", "postcode", "post code", "postal code"),
}
QUESTION_CUES: dict[str, tuple[str, ...]] = {
    "date": ("when", "what day", "which day", "what date", "which date", "which days", "what dates"),
    "name": ("who", "whose name"),
    "amount": ("how much",),
    "hours": ("how many hours", "how long", "how many"),
    "time": ("what time", "which time"),
    "phone": ("reach you", "call you", "text you", "contact you"),
    "address": ("where",),
}

# Subject words of fact names -> the phrases agents use for them (the word itself always counts).
SUBJECTS: dict[str, tuple[str, ...]] = {
    "employee": ("staff", "personnel", "worker", "badge", "emp"),
    "customer": ("client",),
    "patient": ("medical record", "mrn", "chart", "record", "medical"),
    "member": ("membership", "subscriber", "insurance", "plan", "insurance card", "policy"),
    "confirmation": ("booking", "reservation", "trip", "pnr", "record locator", "locator", "itinerary"),
    "order": ("purchase",),
    "ticket": ("case", "support", "request", "incident", "support ticket"),
    "policy": ("insurance", "coverage", "insurance policy", "contract"),
    "claim": ("claims",),
    "invoice": ("bill", "billing"),
    "client": ("company", "customer", "firm", "organization", "organisation"),
    "consultant": ("employee", "staff", "personnel", "consulting"),
    "engagement": ("project", "matter", "job", "assignment"),
    "routing": ("aba", "sort code", "transit", "bank code", "routing transit"),
    "account": ("bank account",),
    "card": ("debit card", "credit card", "bank card"),
    "frequent": ("airline", "miles", "mileage", "frequent flyer", "frequent flier", "ff", "airline loyalty"),
    "flyer": ("flier", "airline", "frequent flyer", "frequent flier", "ff"),
    "hotel": ("hotels", "hotel rewards"),
    "loyalty": ("rewards", "membership", "member", "loyalty program"),
    "incident": ("accident", "collision", "crash", "loss", "damage", "flood", "flooding", "happen", "happened",
                 "occur", "occurred", "event", "theft"),
    "estimated": ("estimate", "quote", "quoted", "repair", "repairs", "fix", "body shop", "garage"),
    "damage": ("damages", "repair", "repairs", "fix"),
    "cancellation": ("cancel", "cancelled", "canceled", "end", "ends", "terminate", "termination",
                     "effective", "last", "stop"),
    "disputed": ("dispute", "error", "wrong", "wrongly", "incorrect", "incorrectly", "overbilled", "overcharged",
                 "mistake", "mistaken", "credit", "credited", "never worked", "billed in error"),
    "corrections": ("correct", "corrected", "correction", "fix", "fixed", "right", "actual", "should be",
                    "wrong", "changed", "amend", "amended"),
    "missing": ("forgot", "forgotten", "unlogged", "not logged", "aren't logged", "left out", "worked",
                "didn't log"),
    "work": ("company", "office", "business", "corporate", "at work"),
    "owner": ("holder", "account holder", "owns"),
    "nickname": ("call it", "call account", "call the account", "name it", "label"),
    "departure": ("leave", "depart", "fly out", "flight"),
    "new": ("instead", "different", "updated", "rebook", "move", "moved"),
}
# Things that go with a subject but are not it: they place a date or an amount ("the account's
# closing date") but never name the subject's identifier, since they have their own ("account number"
# is not the customer number, and an account number asked of a user who holds only a customer number
# is not answered with it).
RELATED: dict[str, tuple[str, ...]] = {
    "customer": ("account", "account holder"),
    "client": ("account",),
}
# Kinds whose value belongs to one thing alone: a related word does not reach them.
OWN_KINDS = frozenset({"identifier"})
# Subject words that narrow too little to pick a fact on their own ("the new date").
WEAK_SUBJECTS = frozenset({"new", "preferred", "preference", "current", "updated", "old", "full"})

# Phrases that name one subject so plainly that they need no kind cue beside them.
STRONG: dict[str, tuple[str, ...]] = {
    "birth": ("born", "dob", "birthday", "birthdate", "date of birth", "birth date", "d.o.b"),
    "vin": ("vin", "vehicle identification number", "chassis", "chassis number", "vehicle id",
            "vehicle id number", "frame number"),
    "zip": ("zip", "zipcode", "zip code", "postcode", "post code", "postal code"),
    "last4": ("last four", "last 4", "final four", "final 4", "last digits", "last four digits", "last 4 digits",
              "ends in", "end in", "ending in", "ends with", "ending with", "card ending"),
    "last": ("last name", "surname", "family name"),
    "frequent": ("frequent flyer", "frequent flier", "airline loyalty", "airline miles", "mileage"),
    "routing": ("routing", "aba", "sort code"),
    "confirmation": ("pnr", "record locator", "booking reference", "booking ref"),
    "nickname": ("nickname", "call it", "call account", "call the account"),
    "unpaid": ("unpaid", "without pay", "no pay", "unpaid leave"),
    "unavailable": ("out of stock", "sold out", "unavailable", "not available", "isn't available",
                    "not in stock", "no longer available"),
    "limit": ("limit", "maximum", "max", "remaining", "remainder", "what's left", "left", "allowed",
              "cap", "the rest"),
}

# Name words that make a fact somebody else's (the driver's date of birth, not the user's).
THIRD_PARTY: dict[str, tuple[str, ...]] = {
    "driver": ("driver", "drivers", "new driver", "additional driver", "person you're adding", "family member"),
    "leaver": ("leaver", "leaving", "departing", "outgoing", "offboarding", "offboarded", "exiting",
               "person who is leaving", "team member"),
    "payee": ("payee", "recipient", "beneficiary", "receiver", "new payee"),
}
THIRD_PRONOUNS = ("their", "them", "they", "his", "her", "he", "she", "theirs")
FIRST_PRONOUNS = ("your", "you", "yours", "yourself")

# A yes/no question that offers an alternative is about the user's standing choice.
# A kind asked together with a larger whole is part of it: "the new address, city and postal code"
# asks for one address, not for the postal code the user holds apart (unless it says "billing").
PART_OF = {"postal": "address"}
STANDS_APART = ("billing",)
SELECTORS = ("which",)  # "Which ticket is it?" asks for the ticket's number
ALTERNATIVES = ("instead", "rather", "alternatively", "prefer", "otherwise", "option")

STOPWORDS = frozenset(
    "a an the of for on in at to from by with and or your my our their his her its this that these those "
    "is are was were be been it me i we you us please could can would will may might should shall "
    "what what's which who whose when where how do does did have has had there here as so if over "
    "just also any some".split()
)
CONJUNCTIONS = frozenset({"and", "or", "&", "+", "/", ",", "plus"})
LINKS = frozenset({"of", "for", "on", "from", "in", "to", "with", "the", "your", "their", "this", "that", "my",
                   "its", "his", "her", "a", "an", "associated", "linked", "printed", "attached"})

# Labels for the user's answers ("My employee ID is 3577.").
LABELS = {"id": "ID", "vin": "VIN", "zip": "ZIP", "last4": "last four digits", "dob": "date of birth",
          "ff": "frequent flyer"}

# Actions, grouped: a yes/no question proposing an action the goal does not mention ("Shall I
# cancel the room?" when the goal is a room change) is not answered "yes".
ACTIONS: dict[str, tuple[str, ...]] = {
    "change": ("change", "switch", "move", "modify", "update", "amend", "rebook", "reschedule", "swap",
               "exchange", "correct", "fix", "upgrade", "downgrade", "redirect"),
    "cancel": ("cancel", "cancellation", "terminate", "termination", "void", "withdraw", "end", "close"),
    "refund": ("refund", "return", "reimburse", "credit", "compensate", "compensation"),
    "add": ("add", "enrol", "enroll", "join", "register", "staff", "assign", "give", "grant", "raise"),
    "remove": ("remove", "delete", "disable", "offboard", "revoke", "deactivate"),
    "send": ("send", "transfer", "pay", "payment", "wire"),
    "book": ("book", "reserve", "schedule", "file", "submit", "open", "log", "request", "take", "report"),
    "freeze": ("freeze", "lock", "block", "suspend"),
    "unlock": ("unlock", "reset", "reactivate", "restore"),
    "replace": ("replace", "replacement", "reissue"),
    "dispute": ("dispute", "chargeback"),
}
# Words of a confirmation that say nothing about what is confirmed ("Shall I go ahead?").
CONFIRM_WORDS = frozenset(
    "go ahead proceed confirm continue okay ok like want would shall should now right correct sure fine "
    "alright happy please just let get also with make process need that then want okay done way".split()
)
