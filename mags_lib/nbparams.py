"""Small helpers the notebooks call on their ``parameters`` cell's values.

papermill's own command line (``python -m papermill nb.ipynb out.ipynb -p force false``) turns only the
exact strings ``True`` / ``False`` into booleans: ``false``, ``no`` or ``0`` written otherwise reach the
notebook as the string ``"false"`` (truthy) or the int ``0``. The pipeline parses every value itself
(``mags_lib.pipeline.parse_value``), but a notebook run by papermill directly, as the README shows, gets
papermill's values: :func:`as_bool` makes a ``bool`` parameter mean what was written, or stops.
"""

from __future__ import annotations

from typing import Any

# the words of a bool parameter, here and in mags_lib.pipeline.parse_value (which imports them)
TRUE_WORDS = frozenset({"true", "1", "yes", "y", "on"})
FALSE_WORDS = frozenset({"false", "0", "no", "n", "off"})


def as_bool(name: str, value: Any) -> bool:
    """The boolean parameter ``name`` as written: ``True``/``False``, ``"true"``/``"false"`` (any case),
    ``yes``/``no``, ``on``/``off``, ``1``/``0``; anything else is a ``ValueError`` naming the parameter.

    >>> as_bool("force", "false"), as_bool("force", "True"), as_bool("force", 0), as_bool("force", True)
    (False, True, False, True)
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        low = value.strip().lower()
        if low in TRUE_WORDS:
            return True
        if low in FALSE_WORDS:
            return False
    raise ValueError(f"parameter {name} must be true or false, got {value!r}")
