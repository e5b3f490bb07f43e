"""The singular-"they" control of a professional-bias prompt: the same frame with "they" for the pronoun.

Without a gendered pronoun, which occupation a model picks shows only its position and wording
preferences; the gender effect is the difference to the she/he prompt of the same frame and order.
"""

from __future__ import annotations

import re

_PROMPT = re.compile(r"^(?P<head>In the sentence: ')(?P<sentence>.*)(?P<tail>', who .*)$", re.DOTALL)
# The verb right after the pronoun agrees with "they" ("she was late" -> "they were late").
_AGREEMENT = {"was": "were", "is": "are", "has": "have", "does": "do", "wasn't": "weren't", "isn't": "aren't"}


def they_prompt(prompt: str, pronoun: str) -> str | None:
    """The prompt with its sentence's (last) `pronoun` replaced by singular "they"; None where it has none.

    Only the quoted sentence changes; the question ("who was late?") stays word for word.
    """
    match = _PROMPT.match(prompt)
    if match is None:
        return None
    sentence = match["sentence"]
    found = list(re.finditer(rf"\b{re.escape(pronoun)}\b(\s+)?(\S+)?", sentence, re.IGNORECASE))
    if not found:
        return None
    last = found[-1]
    word = last.group(2) or ""
    they = "They" if last.group(0)[0].isupper() else "they"
    fixed = _AGREEMENT.get(word.lower(), word) if word else ""
    replacement = they + (last.group(1) or "") + fixed
    return match["head"] + sentence[: last.start()] + replacement + sentence[last.end() :] + match["tail"]
