"""GenderBench's word tokenization: nltk 3.8.1's `word_tokenize`, without the `punkt` model it downloads.

GenderBench pins nltk 3.8.1 and tokenizes replies with `word_tokenize` (Punkt's English sentence splitter, then the
Treebank-style `NLTKWordTokenizer` per sentence) to find "yes"/"no", the pronouns, the emotions and the inventory
words. Later nltk releases changed both steps (em dashes and curly quotes split differently), so this module
carries 3.8.1's rules (nltk, Apache-2.0; the regular expressions below are its own).

The downloaded English Punkt model matters only through its abbreviation, collocation and orthographic lists,
which decide whether a period after such a word ends a sentence; a counted word gets its own token only when its
period does. None of the words GenderBench counts (the pronouns, yes/no, the twelve emotions, the 321 inventory
words) is in those lists, nor an initial or a number, so the model breaks after each of them exactly where an
untrained Punkt does: the splitter below is Punkt's first pass with empty parameters. Breaks after other words
may differ from the English model's, and only change tokens no probe counts. tests/test_genderbench_parsing.py
holds replies tokenized by nltk 3.8.1 with the English model as fixed expectations.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterator

# Punkt (nltk 3.8.1 PunktLanguageVars): what may end a sentence, what cannot be inside a word.
_NON_WORD = r"(?:[)\";}\]\*:@\'\({\[?!])"
_MULTI_CHAR = r"(?:\-{2,}|\.{2,}|(?:\.\s){2,}\.)"
_PUNKT_WORDS = re.compile(
    rf"""(
        {_MULTI_CHAR}
        |
        (?=[^\(\"\`{{\[:;&\#\*@\)}}\]\-,])\S+?
        (?=\s|$|{_NON_WORD}|{_MULTI_CHAR}|,(?=$|\s|{_NON_WORD}|{_MULTI_CHAR}))
        |
        \S
    )""",
    re.UNICODE | re.VERBOSE,
)
_PERIOD_CONTEXT = re.compile(
    rf"[\.\?!](?=(?P<after_tok>{_NON_WORD}|\s+(?P<next_tok>\S+)))",
    re.UNICODE,
)
_REALIGN = re.compile(r'["\')\]}]+?(?:\s+|(?=--)|$)', re.MULTILINE)
_ELLIPSIS = re.compile(r"\.\.+$")
_SENT_END = frozenset(".?!")

# NLTKWordTokenizer (nltk 3.8.1), applied to one sentence in this order.
_STARTING_QUOTES = [
    (re.compile("([«“‘„]|[`]+)", re.U), r" \1 "),
    (re.compile(r"^\""), r"``"),
    (re.compile(r"(``)"), r" \1 "),
    (re.compile(r"([ \(\[{<])(\"|\'{2})"), r"\1 `` "),
    (re.compile(r"(?i)(\')(?!re|ve|ll|m|t|s|d|n)(\w)\b", re.U), r"\1 \2"),
]
_PUNCTUATION = [
    (re.compile(r'([^\.])(\.)([\]\)}>"\'' "»”’ " r"]*)\s*$", re.U), r"\1 \2 \3 "),
    (re.compile(r"([:,])([^\d])"), r" \1 \2"),
    (re.compile(r"([:,])$"), r" \1 "),
    (re.compile(r"\.{2,}", re.U), r" \g<0> "),
    (re.compile(r"[;@#$%&]"), r" \g<0> "),
    (re.compile(r'([^\.])(\.)([\]\)}>"\']*)\s*$'), r"\1 \2\3 "),
    (re.compile(r"[?!]"), r" \g<0> "),
    (re.compile(r"([^'])' "), r"\1 ' "),
    (re.compile(r"[*]", re.U), r" \g<0> "),
    (re.compile(r"[\]\[\(\)\{\}\<\>]"), r" \g<0> "),
    (re.compile(r"--"), r" -- "),
]
_ENDING_QUOTES = [
    (re.compile("([»”’])", re.U), r" \1 "),
    (re.compile(r"''"), " '' "),
    (re.compile(r'"'), " '' "),
    (re.compile(r"([^' ])('[sS]|'[mM]|'[dD]|') "), r"\1 \2 "),
    (re.compile(r"([^' ])('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) "), r"\1 \2 "),
]
_CONTRACTIONS = [
    re.compile(pattern)
    for pattern in (
        r"(?i)\b(can)(?#X)(not)\b",
        r"(?i)\b(d)(?#X)('ye)\b",
        r"(?i)\b(gim)(?#X)(me)\b",
        r"(?i)\b(gon)(?#X)(na)\b",
        r"(?i)\b(got)(?#X)(ta)\b",
        r"(?i)\b(lem)(?#X)(me)\b",
        r"(?i)\b(more)(?#X)('n)\b",
        r"(?i)\b(wan)(?#X)(na)(?=\s)",
        r"(?i) ('t)(?#X)(is)\b",
        r"(?i) ('t)(?#X)(was)\b",
    )
]


def breaks_sentence(context: str) -> bool:
    """Punkt's first pass on a candidate's context: a period-final word (not an ellipsis) or ?/! followed by more."""
    found = False
    for token in _PUNKT_WORDS.findall(context):
        if found:
            return True
        found = token in _SENT_END or (token.endswith(".") and not token.endswith("..") and not _ELLIPSIS.match(token))
    return False


def candidates(text: str) -> Iterator[tuple[re.Match[str], str]]:
    """Each possible sentence end with its context (the word before it, the end, what follows), as Punkt pairs them."""
    previous: slice = slice(0, 0)
    previous_match: re.Match[str] | None = None
    for match in _PERIOD_CONTEXT.finditer(text):
        before = text[previous.stop : match.start()]
        last_space = max(before.rfind(ch) for ch in string.whitespace)
        start = last_space + previous.stop + 1 if last_space > 0 else previous.start
        word = slice(start, match.start())
        if previous_match and previous.stop <= word.start:
            yield previous_match, text[previous] + previous_match.group() + previous_match.group("after_tok")
        previous_match, previous = match, word
    if previous_match:
        yield previous_match, text[previous] + previous_match.group() + previous_match.group("after_tok")


def sentences(text: str) -> list[str]:
    """The text split into sentences as Punkt does (closing quotes and brackets kept with their sentence)."""
    slices, last = [], 0
    for match, context in candidates(text):
        if breaks_sentence(context):
            slices.append(slice(last, match.end()))
            last = match.start("next_tok") if match.group("next_tok") else match.end()
    slices.append(slice(last, len(text.rstrip())))
    out, realign = [], 0
    for first, second in zip(slices, [*slices[1:], None], strict=True):
        first = slice(first.start + realign, first.stop)
        if second is None:
            if text[first]:
                out.append(text[first])
            continue
        moved = _REALIGN.match(text[second])
        if moved:
            out.append(text[first.start : second.start + len(moved.group(0).rstrip())])
            realign = moved.end()
        else:
            realign = 0
            if text[first]:
                out.append(text[first])
    return out


def treebank(sentence: str) -> list[str]:
    """One sentence in nltk 3.8.1's NLTKWordTokenizer tokens."""
    for pattern, replacement in _STARTING_QUOTES + _PUNCTUATION:
        sentence = pattern.sub(replacement, sentence)
    sentence = f" {sentence} "
    for pattern, replacement in _ENDING_QUOTES:
        sentence = pattern.sub(replacement, sentence)
    for pattern in _CONTRACTIONS:
        sentence = pattern.sub(r" \1 \2 ", sentence)
    return sentence.split()


def word_tokenize(text: str) -> list[str]:
    """nltk 3.8.1's `word_tokenize(text)` for the words GenderBench counts."""
    return [token for sentence in sentences(text) for token in treebank(sentence)]
