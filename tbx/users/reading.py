"""How the scripted user reads an agent message: sentences, what each one does, and whether the
message ends the conversation.

Pure, deterministic rules (no model): a sentence is an *ask* when it is a question, a polite or
imperative request ("Please share your staff number."), a form field ("Employee ID:"), or an item
of a list that follows an ask; a *confirmation* is a yes/no question about going ahead; a *closing
offer* is "anything else I can help with?". A message *ends* the conversation only when, apart
from closing offers, it asks nothing and reports the work done (`completed`) or refuses or says it
cannot be done (`cannot_help`). Departure from the reference system: there the LLM user decides
when to stop; here a fixed classifier does, so a verdict never depends on a sampled stop.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_OPENERS = r"(?:(?:and|also|so|ok|okay|great|thanks|thank you|first|firstly|next|now|then|lastly|finally|sure|" \
           r"perfect|alright|lovely|got it|understood|one more thing|to start|to get started)[,!.:]?\s+)*"
_WH = re.compile(rf"^{_OPENERS}(?:what|which|when|where|who|whose|how)\b")
_IMPERATIVE = re.compile(rf"^{_OPENERS}(?:please\s+)?(?:provide|share|give|send|tell|confirm|verify|enter|type|"
                         r"spell|state|list|include|read|supply|let me know|kindly|reply)\b")
_REQUEST = re.compile(
    r"\b(?:kindly|could you|can you|would you|will you|(?:may|can|could|might) (?:i|we) (?:have|get|ask|"
    r"see|grab|take|know|confirm|verify|please)|let me know|tell me|i(?:'ll| will|'d| would)? need|"
    r"we(?:'ll| will)? need|need (?:your|the|their|you to|to know)|(?:i|we) require|"
    r"you(?:'ll| will)? need to (?:provide|give|share|confirm|send)|do you have|do you know)\b")
_CONFIRM = re.compile(
    rf"^{_OPENERS}(?:(?:shall|should|can|may|could) (?:i|we)\b|(?:do|would) you (?:like|want|prefer|wish)\b|"
    r"(?:is|are) (?:it|that|this) (?:ok|okay|alright|all right|fine|correct|right)\b|"
    r"(?:is|are) (?:that|this|these|those) (?:the|your)\b|are you (?:ok|okay|happy|fine|sure|comfortable|good)\b|"
    r"(?:ok|okay) (?:to|if)\b|(?:proceed|go ahead)\b|(?:just )?to (?:confirm|be sure|double-check)\b|"
    r"(?:want|would like) me to\b|does (?:that|this) (?:work|sound)\b)"
    r"|\b(?:correct|right|ok|okay|sound good|is that okay|is that ok)\s*\?*$")
_CLOSING = re.compile(r"\b(?:anything|something) else\b|\bfurther (?:help|assistance|questions)\b|"
                      r"\bother questions\b|\bhelp with anything\b|\banything more\b|\bfeel free\b|"
                      r"\b(?:don't|do not) hesitate\b|\blet (?:me|us) know if you (?:need|have)\b|\breach out\b")
# "please" asks when it closes a request ("DOB, please.") or opens one to tell us something; not in
# "please upload them in the app" or "please allow 3 days".
_PLEASE = re.compile(r"\bplease\s*(?:[,.!?]|$|(?:provide|share|give|send|tell|confirm|verify|enter|type|spell|state|"
                     r"list|include|read|supply|let me know|reply|answer|specify|clarify|advise|indicate|repeat|"
                     r"write|double-check)\b)")
# A request written as a bare noun phrase: "Your policy number and the date you want it cancelled.",
# "Patient ID first, then the member ID." (no verb of its own before a relative clause).
_FRAGMENT = re.compile(r"^(?![^!?]*[\d$])(?:your|and your|then your|(?:[a-z]+ )+first, then)\b(?!(?:(?! so | because | to )[^,.])*\b(?:is|are|was|were|has|have|"
                       r"had|will|been|can|may|should|must|'s|'re|'ve|'ll)\b)[^!?]*\.?$")
_LIST_ITEM = re.compile(r"^\s*(?:[-*•·]|\d+[.)]|[a-z][.)])\s+")
_SPLIT = re.compile(r"(?<!\bno\.)(?<!\be\.g\.)(?<!\bi\.e\.)(?<=[.!?])\s+")  # not after "invoice no."

_CANNOT = re.compile(
    r"\b(?:can't|cannot|can not|couldn't|unable to|not able to|won't be able to|(?:am|are|is) not allowed|"
    r"not permitted|(?:not|isn't|is not|no longer) possible|impossible|not eligible|ineligible|"
    r"have not (?:sent|made|changed|done)|must decline|(?:doesn't|does not|don't|do not) allow)\b")
_CANNOT_LOOKUP = re.compile(r"\b(?:can't|cannot|can not|couldn't|unable to|not able to) (?:seem to )?"
                            r"(?:find|locate|see|access|pull up|look up)\b")
_DONE_WORDS = (
    "opened|filed|logged|updated|changed|cancell?ed|canceled|processed|submitted|sent|applied|added|escalated|"
    "assigned|booked|moved|reserved|recorded|created|issued|refunded|referred|asked|made|set up|completed|placed|"
    "scheduled|switched|rebooked|frozen|froze|unlocked|disabled|enrolled|approved|removed|saved|corrected|"
    "credited|initiated|raised|requested|forwarded|taken care|gone ahead|arranged|replaced|ordered|reset|"
    "reversed|disputed|transferred|paid|withdrawn|withdrew|staffed|granted|checked (?:you )?in|closed|resolved|"
    "settled|confirmed|activated|renewed|redirected|shipped|deleted|revoked|upgraded|downgraded|registered|"
    "rescheduled|noted|marked|flagged|lodged|routed|reassigned|posted|released|finalized|finalised")
_COMPLETED = re.compile(
    rf"^(?:done|all done|all set|completed|finished|success|recorded|confirmed)\b|"
    rf"\b(?:you're|you are|it's|it is|we're|we are|that's) all set\b|"
    rf"\b(?:has|have) (?:now )?been (?:\w+ed|\w+en|sent|set|made|paid|put|done|taken care of)\b|"
    rf"\b(?:is|are|was|were|'s|'re) (?:now )?(?:{_DONE_WORDS}|active|on its way|on their way|complete)\b|"
    rf"\b(?:is|are|'s|'re) now\b|\bnow (?:shows|carries|has|have|includes|reads|lists)\b|"
    rf"\b(?:i|we)(?:'ve| have)? (?:also |now |just |successfully )?(?:{_DONE_WORDS})\b|"
    rf"\b(?:successfully|went through|gone through|taken care of|is done|is finished)\b|"
    rf"\byou(?:'ll| will)? (?:get|receive) .+ back\b|\b(?:effective|from) (?:today|now|immediately)\b")


@dataclass(frozen=True)
class Sentence:
    """One sentence (or list item, or line) of an agent message."""

    text: str  # lower-cased, apostrophes straightened
    ask: bool  # asks the user for something (information or a decision)
    question: bool  # ends with a question mark
    confirmation: bool  # a yes/no question about going ahead
    closing: bool  # an offer of further help ("anything else?")


def normalize(text: str) -> str:
    """Lower case, straight apostrophes, `e-mail` -> `email`, hyphenated words split."""
    text = text.replace("\u2019", "'").replace("\u2018", "'").lower()
    text = re.sub(r"\be-mail", "email", text)
    text = re.sub(r"\bd\.o\.b\.?", "dob", text)
    return re.sub(r"(?<=[a-z])-(?=[a-z])", " ", text)


def _fragment(text: str) -> bool:
    """A bare noun phrase that asks ("Your policy number and your birth date."), not a report ("Your
    refund went through.") or a refusal."""
    return bool(_FRAGMENT.match(text)) and not _COMPLETED.search(text) and not _CANNOT.search(text)


def read_sentences(message: str) -> list[Sentence]:
    """Split `message` and say what each sentence does; list items after an ask are asks."""
    sentences, asking = [], False
    pieces = [(bool(_LIST_ITEM.match(line)) and n == 0, piece) for line in normalize(message).splitlines()
              for n, piece in enumerate(_SPLIT.split(_LIST_ITEM.sub("", line) if _LIST_ITEM.match(line) else line))]
    for item, raw in pieces:
        text = raw.strip()
        if not text:
            continue
        question = text.rstrip(" *)\"'").endswith("?")
        closing = bool(_CLOSING.search(text))
        own_ask = question or text.endswith(":") or bool(
            _WH.match(text) or _IMPERATIVE.match(text) or _fragment(text) or _REQUEST.search(text) or _PLEASE.search(text))
        ask = own_ask or (item and asking)
        asking = asking or (own_ask and not closing)
        confirmation = question and not closing and bool(_CONFIRM.search(text.rstrip("?! .")))
        sentences.append(Sentence(text, ask, question, confirmation, closing))
    return sentences


def ending_of(sentences: list[Sentence]) -> str | None:
    """`completed` or `cannot_help` when the message ends the conversation, else None.

    Anything asked (other than a closing offer) keeps the conversation going, whatever else the
    message says; a refusal outranks a report of work done in the same message ("I cannot cancel
    it, so I opened a case")."""
    if any(s.ask and not s.closing for s in sentences):
        return None
    statements = [s.text for s in sentences if not s.closing]
    if any(_CANNOT.search(t) and not _CANNOT_LOOKUP.search(t) for t in statements):
        return "cannot_help"
    if any(_COMPLETED.search(t) for t in statements):
        return "completed"
    return None
