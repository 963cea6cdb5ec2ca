"""One prompt and decoding specification per role, shared by training, evaluation and the agent.

Every table of the workbench measures the system that runs: the "before" row
(:mod:`mags_lib.evaluate`), the training data (:mod:`mags_lib.training`) and the agent
(:meth:`mags_lib.agent.MAGS.extract_many`, :meth:`~mags_lib.agent.MAGS.ask`) build a role's prompt
and decode it from :data:`ROLE_SPECS`, nowhere else.

A role has two prompts:

* ``base`` -- for a model that was not trained on the role (the embedded SmolLM2): the long system
  prompt of :data:`mags_lib.protocol.SYSTEM_PROMPTS` and a few-shot block;
* ``trained`` -- what the training data uses: the short system prompt of
  :data:`mags_lib.protocol.TRAINED_SYSTEM_PROMPTS` and **no few-shot block**.

A trained model's ``meta.json`` records the :class:`PromptSpec` it was trained with
(``{"prompt": {...}}``, see :mod:`mags_lib.training`); :func:`prompt_for_model` reads it back, so the
agent prompts a trained model exactly as it was trained, and a base model with the base prompt.

Examples
--------
>>> spec = ROLE_SPECS["write"]
>>> spec.base.few_shot, spec.trained.few_shot, spec.base.max_ops, spec.trained.max_ops
(2, 0, 4, 16)
>>> [m["role"] for m in spec.trained.messages("Blorps eat lemons.")]
['system', 'user']
>>> PromptSpec.from_dict(spec.trained.to_dict()) == spec.trained
True
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from . import protocol

__all__ = ["ROLE_NAMES", "ROLE_SPECS", "PromptSpec", "RoleSpec", "prompt_for_model", "trained_meta"]

ROLE_NAMES = ("ask", "write", "answer")
"""The trained roles (the router is not trained)."""


def _is_int(x: object) -> bool:
    """An int that is not a bool (``True`` from a hand-edited meta.json is not a budget of 1 token)."""
    return isinstance(x, int) and not isinstance(x, bool)


@dataclass(frozen=True)
class PromptSpec:
    """How a role's model is prompted and decoded.

    Attributes
    ----------
    role : str
        ``"ask"``, ``"write"``, ``"answer"`` or ``"router"``.
    system : str
        The system prompt, verbatim.
    few_shot : int
        How many of :data:`mags_lib.protocol.FEW_SHOT` ``[role]`` precede the input.
    name : str
        ``"base"`` or ``"trained"`` (a label for tables; the fields are what count).
    max_new_tokens : int
        Generation budget per output (room for ``max_ops`` bounded tags for ask / write).
    stop : tuple of str
        Strings that end an output (the reader answers in one line).
    max_ops, max_field_chars, max_object_chars : int or None
        Bounds of the role's GBNF grammar (``None`` for roles without one).
    """

    role: str
    system: str
    few_shot: int = 0
    name: str = "base"
    max_new_tokens: int = 64
    stop: tuple[str, ...] = ()
    max_ops: int | None = None
    max_field_chars: int | None = None
    max_object_chars: int | None = None

    def __post_init__(self) -> None:
        if self.role not in protocol.SYSTEM_PROMPTS:
            raise ValueError(f"unknown role {self.role!r}: use one of {sorted(protocol.SYSTEM_PROMPTS)}")
        if not isinstance(self.system, str) or not self.system.strip():
            raise ValueError("a prompt needs a non-empty system prompt")
        if not _is_int(self.few_shot) or self.few_shot < 0:
            raise ValueError(f"few_shot must be an int >= 0, got {self.few_shot!r}")
        if not _is_int(self.max_new_tokens) or self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an int >= 1, got {self.max_new_tokens!r}")
        if isinstance(self.stop, str) or not all(isinstance(x, str) and x for x in self.stop):
            raise ValueError(f"stop must be a sequence of non-empty strings, got {self.stop!r}")
        object.__setattr__(self, "stop", tuple(self.stop))
        bounds = (self.max_ops, self.max_field_chars, self.max_object_chars)
        if self.role in protocol.ROLES:
            if any(not _is_int(b) or b < 1 for b in bounds):
                raise ValueError(f"the {self.role} role needs grammar bounds >= 1, got {bounds}")
        elif any(b is not None for b in bounds):
            raise ValueError(f"the {self.role} role has no grammar: leave its bounds None")

    def messages(self, text: str, *, facts: Sequence | None = None) -> list[dict[str, str]]:
        """Chat messages for one input (for ``answer``: the question and the recalled ``facts``)."""
        return protocol.build_messages(self.role, text, few_shot=self.few_shot, facts=facts,
                                       system=self.system)

    @property
    def has_grammar(self) -> bool:
        return self.role in protocol.ROLES

    @property
    def stop_repeats(self) -> bool:
        """Whether decoding ends at the first repeated tag (``Backend.generate(stop_repeats=...)``): the tag
        roles, ask and write, where a repeated tag adds no operation. A warm-started writer loops one triplet
        until the budget runs out on some long inputs (28-34 of the 67 seed test rows, README), and the
        output cut off mid-tag fails the strict format."""
        return self.has_grammar

    def grammar(self, *, nonempty: bool = False) -> str | None:
        """The role's GBNF grammar with these bounds (``None`` without one); ``nonempty``: >= 1 tag."""
        if not self.has_grammar:
            return None
        return protocol.grammar(self.role, min_ops=1 if nonempty else 0, max_ops=self.max_ops,
                                max_field_chars=self.max_field_chars, max_object_chars=self.max_object_chars)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["stop"] = list(self.stop)
        return d

    @classmethod
    def from_dict(cls, d: Mapping) -> PromptSpec:
        """Inverse of :meth:`to_dict`; a missing or unknown key is a ``ValueError``."""
        need = set(cls.__dataclass_fields__)
        if not isinstance(d, Mapping) or set(d) != need:
            got = sorted(d) if isinstance(d, Mapping) else type(d).__name__
            raise ValueError(f"a prompt spec has exactly the keys {sorted(need)}, got {got}")
        if isinstance(d["stop"], str):  # tuple("</s>") would stop at any "<", "/", "s" or ">"
            raise ValueError(f"a prompt spec's stop is a list of strings, got the string {d['stop']!r}")
        return cls(**{**d, "stop": tuple(d["stop"])})


@dataclass(frozen=True)
class RoleSpec:
    """The two prompts of a role: for an untrained model (``base``) and for training (``trained``)."""

    role: str
    base: PromptSpec
    trained: PromptSpec

    def __post_init__(self) -> None:
        if self.base.role != self.role or self.trained.role != self.role:
            raise ValueError(f"prompts of role {self.role!r} must be for that role")
        if self.trained.few_shot:
            raise ValueError("a trained prompt carries no few-shot block")

    def prompt(self, trained: bool = False) -> PromptSpec:
        return self.trained if trained else self.base


def _spec(role: str, base: dict, trained: dict) -> RoleSpec:
    return RoleSpec(role=role,
                    base=PromptSpec(role, protocol.SYSTEM_PROMPTS[role], name="base", **base),
                    trained=PromptSpec(role, protocol.TRAINED_SYSTEM_PROMPTS[role], 0, "trained", **trained))


# Base prompts: 2 few-shot examples and 4 tags of bounded fields, the agent's measured configuration
# (100 % grammar adherence; typical outputs: ask 15-30 tokens, write 20-60). Trained prompts: no
# few-shot block, and room for what the training data holds (the seed datasets: p95 16 asks / 12
# writes, p99 of a query 99 characters, of an object 56, of a response 371 tokens).
_TRAINED_BOUNDS = {"max_ops": 16, "max_field_chars": 96, "max_object_chars": 128, "max_new_tokens": 384}
ROLE_SPECS: dict[str, RoleSpec] = {
    "ask": _spec("ask", dict(few_shot=2, max_new_tokens=64, max_ops=4, max_field_chars=40, max_object_chars=64),
                 _TRAINED_BOUNDS),
    "write": _spec("write", dict(few_shot=2, max_new_tokens=128, max_ops=4, max_field_chars=40,
                                 max_object_chars=64), _TRAINED_BOUNDS),
    "answer": _spec("answer", dict(few_shot=0, max_new_tokens=48, stop=("\n",)),
                    dict(max_new_tokens=48, stop=("\n",))),
}


def trained_meta(model_path: str | Path | None) -> dict | None:
    """The training ``meta.json`` of a trained model, or ``None`` for a model that is not one.

    ``model_path`` may be the run folder ``models/<role>/<run_tag>/``, a stage folder inside it
    (``sft/``, ``grpo/``) or a file below it (``gguf/model-q8_0.gguf``): the nearest ``meta.json``
    at most two levels up that says ``"format": "mags-trained-model"`` is returned.
    """
    if model_path is None:
        return None
    p = Path(model_path)
    start = p if p.is_dir() else p.parent
    for folder in (start, start.parent, start.parent.parent):
        meta = folder / "meta.json"
        if meta.is_file():
            try:
                d = json.loads(meta.read_text())
            except ValueError:
                continue
            if isinstance(d, dict) and d.get("format") == "mags-trained-model":
                return d
    return None


def prompt_for_model(role: str, model_path: str | Path | None) -> PromptSpec:
    """The prompt to use for ``role`` on ``model_path``: the one it was trained with, else the base one.

    Raises
    ------
    ValueError
        When the model was trained for another role, or its meta.json holds a malformed prompt.
    """
    if role not in ROLE_SPECS:
        raise ValueError(f"no prompt spec for role {role!r}: roles are {ROLE_NAMES}")
    meta = trained_meta(model_path)
    if meta is None:
        return ROLE_SPECS[role].base
    if meta.get("role") != role:
        raise ValueError(f"{model_path} was trained for the {meta.get('role')!r} role, not {role!r}")
    try:
        return PromptSpec.from_dict(meta["prompt"])
    except (KeyError, ValueError, TypeError) as exc:
        raise ValueError(f"the meta.json of {model_path} has no valid 'prompt' ({exc}); re-run the training "
                         "notebook (20_train_ask_write) for this role") from exc
