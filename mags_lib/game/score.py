"""The game's scorer, exactly as DESIGN.md defines it.

A response is normalised like every text of the project (:func:`mags_lib.protocol.normalize_text`:
lower case, punctuation replaced by spaces, the articles a/an/the removed, whitespace collapsed), a
number's own punctuation kept (:func:`mags_lib.protocol.normalize_answer`: ``"380"`` is no word of
``"1,380"``, nor ``"5"`` of ``"3.5"``).
A question with aliases is answered correctly when one normalised alias occurs in the normalised
response as a **whole-word run** (``"cat"`` does not match ``"category"``; ``"teal bridge"`` matches
``"under the Teal Bridge."``). An ``abstain`` question (no aliases) is answered correctly when the
response says that the information is unknown or not in memory: one of :data:`ABSTAIN_PHRASES`,
normalised the same way, occurs as a whole-word run. The words of those phrases never count as an
answer: "I know nothing about it" does not answer "What are you carrying?" with "nothing".

>>> is_correct("They eat frozen lemons.", ["frozen lemons", "lemons"])
True
>>> is_correct("A category", ["cat"])
False
>>> is_correct("I don't know: that is not in my memory.", [])
True
"""

from __future__ import annotations

from collections.abc import Sequence

from ..protocol import ABSTAIN_PHRASES, matching_alias, normalize_answer
from ..protocol import abstains as _abstains

__all__ = ["ABSTAIN_PHRASES", "abstains", "contains_run", "is_correct", "matched_alias", "normalize"]

# ABSTAIN_PHRASES: the project's one list (mags_lib.protocol), shared with the reader's metrics and the rewards


def normalize(text: str) -> str:
    """The scorer's normalisation (:func:`~mags_lib.protocol.normalize_answer`: the project's
    :func:`~mags_lib.protocol.normalize_text`, a number's own punctuation kept, so that ``"380"`` is no
    word of ``"1,380"``).

    >>> normalize("  The Teal-Bridge!  "), normalize("1,380 points")
    ('teal bridge', '1380 points')
    """
    return normalize_answer(text)


def contains_run(haystack: str, needle: str) -> bool:
    """Whether normalised ``needle`` occurs in normalised ``haystack`` as a run of whole words.

    >>> contains_run("under the Teal Bridge", "teal bridge"), contains_run("category", "cat")
    (True, False)
    """
    n = normalize(needle)
    return bool(n) and f" {n} " in f" {normalize(haystack)} "


def abstains(response: str) -> bool:
    """Whether a response says the information is unknown or not in memory.

    >>> abstains("Sorry, I do not know."), abstains("They live in Porto.")
    (True, False)
    """
    return _abstains(response)


def matched_alias(response: str, aliases: Sequence[str]) -> str | None:
    """The first alias found in the response as a whole-word run, or None. The response's abstention
    phrases are no part of it: "I know nothing about it" does not say "nothing"
    (:func:`~mags_lib.protocol.matching_alias`).

    >>> matched_alias("Nothing.", ["nothing"]), matched_alias("I know nothing about it.", ["nothing"])
    ('nothing', None)
    """
    return matching_alias(response, aliases)


def is_correct(response: str, aliases: Sequence[str], kind: str | None = None) -> bool:
    """Score one response.

    Parameters
    ----------
    response : str
        What the system answered.
    aliases : sequence of str
        Accepted answers; empty for an ``abstain`` question.
    kind : str, optional
        The question's kind; ``"abstain"`` (or an empty alias list) scores abstention.
    """
    if kind == "abstain" or not aliases:
        return abstains(response)
    return matched_alias(response, aliases) is not None
