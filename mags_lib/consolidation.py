"""Parametric consolidation ("sleep"): the memory's solidified facts written into a LoRA of the reader.

The graph is the episodic and working memory; the semantic block's long-term knowledge can also live
in the weights of the answer model, as a LoRA adapter trained on the facts the graph has solidified.
One consolidation step on a :class:`~mags_lib.agent.MAGS` memory:

1. **select** the solidified facts (:func:`select_facts`): live, valid, strong, often used, optionally
   permanent (:class:`ConsolidationConfig` thresholds);
2. **render** them as training rows of the answer role (:func:`render_examples`): question/answer and
   statement forms from varied templates (the worlds' own question templates when the relation is one
   of :mod:`mags_lib.data.templates`, generic ones otherwise) with an **empty memory block** (the
   closed-book prompt), negatives -- questions about what was not consolidated -- that must answer
   exactly :data:`mags_lib.protocol.ABSTAIN_ANSWER`, and open-book rehearsals (the fact, or a newer
   value of it, in the memory block) so that recalled memory keeps overriding the adapter;
3. **train** a PEFT LoRA for the answer model, loss on the answer tokens only: by default with
   :func:`mags_lib.training.prefix.train_lora`, which runs each batch's shared prompt prefix once (the
   same loss and gradient as a per-row trainer, a fraction of the compute: the rows are short questions
   behind one long prefix), or with the training package's SFT stage (``trainer="trl"``:
   :func:`mags_lib.training.train_stage`, TRL ``SFTTrainer``). On a trained answer model (``models="trained"``)
   the trained adapter is merged into the base weights first and the new LoRA learns on top of that model
   (:func:`answer_adapter`; shared-prefix trainer); the adapter records which model it was trained on, and
   serving it on another answer model is refused (:func:`check_adapter_fits`). The prefix trainer batches rows of
   similar length together and, every ``anchor_every`` steps, adds the KL divergence from the model without the
   adapter on general text (:data:`ANCHOR_TEXT`): the held-out perplexity stays where it was (README);
4. **serve** it: the agent's answer model runs with the adapter (:meth:`MAGS.set_consolidated`), and
   ``MAGS.ask(question, recall=False)`` answers closed-book; with ``MAGSConfig(consolidated_when="closed_book")``
   the adapter answers only when the memory block is empty (recalled facts are read by the model alone), with
   ``"fallback"`` also when the model alone abstains over the recalled facts (a demoted or pruned fact);
5. **demote**, **prune** or **keep** the consolidated facts in the graph (logged graph operations
   :meth:`~mags_lib.graph.LiquidGraph.demote` / :meth:`~mags_lib.graph.LiquidGraph.forget`), then take a
   snapshot: :meth:`MAGS.rollback` to any snapshot restores the graph *and* the adapter it was taken
   with (a snapshot from before the consolidation restores the previous adapter, or none).

Adapters are versioned on disk, ``<root>/v<k>/`` (the PEFT adapter, the stage ``meta.json`` and
``consolidation.json``: the facts with their sources, the snapshot id, the config, wall time, size).

>>> cfg = ConsolidationConfig(min_strength=0.6, after="prune")
>>> cfg.after, cfg.every_n_observations
('prune', 0)
>>> ConsolidationConfig(after="delete")
Traceback (most recent call last):
...
ValueError: after must be one of ('demote', 'prune', 'keep'), got 'delete'
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import protocol as P

__all__ = ["AFTER", "ConsolidationConfig", "ConsolidationResult", "Consolidator", "answer_adapter",
           "check_adapter_fits", "closed_book_accuracy", "consolidate", "eval_questions", "fact_questions",
           "render_examples", "runtime_adapter", "select_facts", "train_config"]

AFTER = ("demote", "prune", "keep")
TRAINERS = ("prefix", "trl")
FORMAT = "mags-consolidation"

_QUESTIONS = ("What does {S} {R}?", "{S} {R} what?", "Tell me what {S} {R}.", "Do you know what {S} {R}?")
_STATEMENTS = ("Complete the fact: {S} {R} ...", "What do you remember about {S}?")

ANCHOR_TEXT = (
    "We walked along the beach until the sun went down and the air turned cold.",
    "The recipe calls for two eggs, a cup of flour and a pinch of salt.",
    "Please remember to switch off the lights when you leave the room.",
    "The museum opens at nine in the morning and is free on the first Sunday of the month.",
    "My neighbour plays the piano every evening, and I have come to enjoy it.",
    "It rained all weekend, so we stayed inside and played board games.",
    "The train was late again, and the passengers waited on the cold platform.",
    "A healthy breakfast gives you energy for the rest of the day.",
    "The teacher explained the lesson twice, but some students were still confused.",
    "He painted the fence white and planted roses along the path to the door.",
    "The shop on the corner sells fresh bread, cheese and vegetables from local farms.",
    "After the storm, the streets were covered with leaves and broken branches.",
    "She keeps a small notebook in her bag to write down ideas before she forgets them.",
    "The football match ended in a draw after both teams scored in the last ten minutes.",
    "Our flight was delayed by two hours because of heavy fog at the airport.",
    "The cat slept on the windowsill, warm in the afternoon light.",
    "Water boils at a lower temperature high in the mountains than it does at sea level.",
    "The city council voted to build a new park near the river.",
    "I usually read a few pages of a book before going to sleep.",
    "They repaired the roof before winter so that the house would stay dry.",
    "The doctor said he should drink more water and walk every day.",
    "At the market, prices rise in winter when fewer vegetables are in season.",
    "The orchestra tuned their instruments while the audience found their seats.",
    "Learning a new language takes patience, practice and a little courage.",
)
"""General text for the anchor regulariser (``ConsolidationConfig.anchor_weight``): everyday English, none of it
in :data:`mags_lib.bench.consolidation.HELD_OUT_TEXT` (the perplexity measurement's text)."""


def _f(default: Any, help: str) -> Any:
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda d=default: type(d)(d), metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class ConsolidationConfig:
    """What a consolidation selects, how it renders and trains, and what the graph does afterwards."""

    # selection
    require_permanent: bool = _f(False, "select only permanent (solidified) fact edges")
    min_strength: float = _f(0.5, "select facts whose edge strength is at least this (0..1]")
    min_uses: int = _f(1, "select facts used (rewarded recalls, repeated statements) at least this often")
    valid_only: bool = _f(True, "select only facts still valid (superseded ones never); False is refused")
    max_facts: int = _f(200, "most facts per consolidation (the strongest first)")
    # schedule
    every_n_observations: int = _f(0, "Consolidator.observe consolidates every N observations (0: on demand only)")
    # rendering
    questions_per_fact: int = _f(6, "question/answer training rows per fact (templates without repeats)")
    statements_per_fact: int = _f(2, "statement-form training rows per fact (0: none): the completion, then the "
                                     "recollection (one per subject: all its consolidated facts)")
    question_templates: tuple[str, ...] = _f(_QUESTIONS, "generic question templates ({S} subject, {R} relation) "
                                                         "for relations without world templates")
    statement_templates: tuple[str, ...] = _f(_STATEMENTS, "statement-form prompts: a completion ('{S} {R} ...' "
                                                           "-> object) and a recollection (all facts of {S})")
    world_templates: bool = _f(True, "use mags_lib.data.templates' questions for relations it knows")
    holdout_template: bool = _f(True, "keep one question template per relation out of training (evaluation "
                                      "asks with it: paraphrase, not memorised string)")
    generic_too: bool = _f(True, "train on the generic question templates as well as a known relation's world "
                                  "templates (more paraphrases per fact; the held-out one stays a world template)")
    negatives_ratio: float = _f(0.1, "abstention rows per positive row: questions about what was not "
                                     "consolidated, answered with the 'not in memory' string")
    open_book_ratio: float = _f(0.25, "open-book rehearsal rows per fact, at most 1 (the fact, or a newer value, in the memory "
                                      "block): recalled memory keeps overriding the adapter")
    # LoRA and training (the SFT stage of mags_lib.training)
    lora_r: int = _f(32, "LoRA rank")
    lora_alpha: int = _f(64, "LoRA alpha")
    target_modules: tuple[str, ...] = _f(("gate_proj", "up_proj", "down_proj"),
                                         "linear layers that get the adapter (the MLPs: measured against every linear "
                                         "layer, higher closed-book accuracy and a quarter of the perplexity rise)")
    layers: tuple[int, ...] = _f((), "decoder layers that get the adapter (empty: all); the backward pass stops at "
                                     "the lowest one, so upper layers only train faster (trainer='prefix' only)")
    max_steps: int = _f(260, "optimizer steps (260 of 8 rows: ~2.5 epochs of 100 facts' rows; with the anchor "
                               "297-344 s measured on 2 cores computing in bf16, README)")
    batch_size: int = _f(8, "rows per step")
    batching: str = _f("shuffled_length", "random | shuffled_length: rows of similar length batched together, the batches in "
                                 "random order (closed-book rows share one long prefix, open-book rows their own "
                                 "batches: less padding, a longer shared prefix)")
    learning_rate: float = _f(2e-3, "peak learning rate")
    anchor_weight: float = _f(3.0, "weight of the anchor regulariser (0: off): every anchor_every-th step adds the KL divergence from "
                                   "the model without the adapter on anchor_per_step sentences of general text "
                                   "(ANCHOR_TEXT), holding the model's general ability (trainer='prefix' only)")
    anchor_per_step: int = _f(2, "anchor sentences per anchored step (when anchor_weight > 0)")
    anchor_every: int = _f(3, "the anchor runs every this many steps (each run costs about half a training step)")
    max_length: int = _f(256, "longest row in tokens (prompt + answer); longer rows are dropped")
    threads: int | None = _f(1, "torch threads while training (1 is fastest on a shared machine)")
    trainer: str = _f("prefix", "prefix: mags_lib.training.prefix (each batch's shared prompt prefix run once, the "
                                "same loss and gradient) | trl: TRL's SFTTrainer through training.train_stage")
    # afterwards
    after: str = _f("demote", "what the graph does with consolidated facts: demote | prune | keep")
    demote_factor: float = _f(0.5, "demote: strength *= this factor (and no longer permanent)")
    seed: int = _f(0, "one seed: template choice, negatives, data order, LoRA init")

    def __post_init__(self) -> None:
        for name in ("min_uses", "every_n_observations", "statements_per_fact"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{name} must be an int >= 0, got {v!r}")
        if isinstance(self.anchor_weight, bool) or not isinstance(self.anchor_weight, (int, float)) \
                or not 0 <= self.anchor_weight <= 100:
            raise ValueError(f"anchor_weight must be a number in [0, 100], got {self.anchor_weight!r}")
        if self.anchor_weight and self.trainer != "prefix":
            raise ValueError("anchor_weight > 0 (the anchor regulariser, on by default) needs trainer='prefix'; "
                             "with trainer='trl' pass anchor_weight=0")
        for name in ("anchor_per_step", "anchor_every", "max_facts", "questions_per_fact", "lora_r", "lora_alpha", "max_steps", "batch_size",
                     "max_length"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        if not isinstance(self.min_strength, (int, float)) or not 0 <= self.min_strength <= 1:
            raise ValueError(f"min_strength must be in [0, 1] (edge strengths are in (0, 1]), got {self.min_strength!r}")
        if self.valid_only is not True:
            raise ValueError("valid_only must be True: a superseded fact must never be written into the weights")
        for name, top in (("negatives_ratio", 4), ("open_book_ratio", 1)):  # open book: at most one row per fact
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= top:
                raise ValueError(f"{name} must be a number in [0, {top}], got {v!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be an int >= 0, got {self.seed!r}")
        if not 0 < self.learning_rate < 1:
            raise ValueError(f"learning_rate must be in (0, 1), got {self.learning_rate!r}")
        if self.threads is not None and (not isinstance(self.threads, int) or self.threads < 1):
            raise ValueError(f"threads must be None or an int >= 1, got {self.threads!r}")
        if self.after not in AFTER:
            raise ValueError(f"after must be one of {AFTER}, got {self.after!r}")
        from .training.prefix import BATCHINGS

        if self.batching not in BATCHINGS:
            raise ValueError(f"batching must be one of {BATCHINGS}, got {self.batching!r}")
        if self.trainer not in TRAINERS:
            raise ValueError(f"trainer must be one of {TRAINERS}, got {self.trainer!r}")
        if not isinstance(self.demote_factor, (int, float)) or not 0 < self.demote_factor <= 1:
            raise ValueError(f"demote_factor must be in (0, 1], got {self.demote_factor!r}")
        if isinstance(self.layers, (str, bytes)) or not isinstance(self.layers, (list, tuple)) or any(
                isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in self.layers):
            raise ValueError(f"layers must be a sequence of layer indices >= 0, got {self.layers!r}")
        object.__setattr__(self, "layers", tuple(sorted(set(self.layers))))
        if self.layers and self.trainer != "prefix":
            raise ValueError("layers (an adapter on some decoder layers only) needs trainer='prefix'")
        for name in ("question_templates", "statement_templates", "target_modules"):
            v = getattr(self, name)
            if isinstance(v, str) or not isinstance(v, (list, tuple)):
                raise TypeError(f"{name} must be a sequence of strings, got {type(v).__name__}")
            object.__setattr__(self, name, tuple(v))
        if not self.question_templates or not self.target_modules:
            raise ValueError("question_templates and target_modules must not be empty")
        for t in self.question_templates + self.statement_templates:
            if not isinstance(t, str) or "{S}" not in t:
                raise ValueError(f"template {t!r} must be a string with a {{S}} (subject) placeholder")
            try:
                t.format(S="s", R="r")
            except (KeyError, IndexError, ValueError) as exc:
                raise ValueError(f"template {t!r} may only use {{S}} and {{R}}: {exc}") from None
        for t in self.question_templates:  # without the relation, one question has every fact's object as answer
            if "{R}" not in t:
                raise ValueError(f"question template {t!r} must name the relation with {{R}} (a question about the "
                                 f"subject alone has as many right answers as the subject has facts)")
        if self.statements_per_fact > len(self.statement_templates):
            raise ValueError(f"statements_per_fact={self.statements_per_fact} needs as many statement_templates, "
                             f"got {len(self.statement_templates)}")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


# ------------------------------------------------------------------------------------------------
# selection
def select_facts(graph: Any, config: ConsolidationConfig | None = None) -> list[dict]:
    """The solidified facts of ``graph``: live, valid, strong and used enough, strongest first.

    Parameters
    ----------
    graph : LiquidGraph
    config : ConsolidationConfig, optional

    Returns
    -------
    list of dict
        Edge dicts (:meth:`LiquidGraph.edge`), at most ``config.max_facts``, by decreasing strength
        then uses then edge id.
    """
    cfg = config or ConsolidationConfig()
    out = [f for f in graph.facts()
           if f["strength"] >= cfg.min_strength and f["uses"] >= cfg.min_uses
           and (f["permanent"] or not cfg.require_permanent)]
    out.sort(key=lambda f: (-f["strength"], -f["uses"], f["id"]))
    return out[: cfg.max_facts]


# ------------------------------------------------------------------------------------------------
# rendering
def _norm(text: str) -> str:
    return " ".join(str(text).lower().split())


def _world_relation(label: str):
    """The :class:`mags_lib.data.templates.Relation` whose gold label is ``label`` (None: unknown)."""
    from .data.templates import RELATIONS

    key = _norm(label)
    for rel in RELATIONS:
        if _norm(rel.label) == key:
            return rel
    return None


def _fill(template: str, s: str, r: str) -> str:
    from .data.templates import sentence_case

    text = template.format(S=s, R=r)
    return sentence_case(re.sub(r"\s+([?.!,])", r"\1", " ".join(text.split())))


def fact_questions(subject: str, relation: str, config: ConsolidationConfig | None = None) -> list[str]:
    """Every question template for ``(subject, relation)``, filled: the world's own for a known relation
    (when ``config.world_templates``), else the generic ``config.question_templates``.

    >>> fact_questions("blorps", "eat")[:2]
    ['What do blorps eat?', 'What is the diet of blorps?']
    >>> fact_questions("Zarn", "guards")[0]
    'What does Zarn guards?'
    """
    cfg = config or ConsolidationConfig()
    rel = _world_relation(relation) if cfg.world_templates else None
    templates = rel.questions if rel is not None else cfg.question_templates
    return list(dict.fromkeys(_fill(t, subject, relation) for t in templates))


def _split_questions(qs: list[str], cfg: ConsolidationConfig) -> tuple[list[str], str]:
    """Training questions and the evaluation one (the held-out last template when there are >= 2)."""
    if cfg.holdout_template and len(qs) >= 2:
        return qs[:-1], qs[-1]
    return qs, qs[-1]


def _train_eval_questions(subject: str, relation: str, cfg: ConsolidationConfig) -> tuple[list[str], str]:
    """A fact's training questions and its evaluation question: :func:`fact_questions` split by
    :func:`_split_questions`, plus the generic templates for training when ``cfg.generic_too``."""
    train, held = _split_questions(fact_questions(subject, relation, cfg), cfg)
    if cfg.generic_too and cfg.world_templates and _world_relation(relation) is not None:
        generic = fact_questions(subject, relation, dataclasses.replace(cfg, world_templates=False))
        train = list(dict.fromkeys(train + [q for q in generic if q != held]))
    return train, held


def eval_questions(facts: Sequence[dict], config: ConsolidationConfig | None = None) -> list[dict]:
    """One evaluation question per fact (the held-out template when ``holdout_template``):
    ``{"question", "aliases", "subject", "relation", "object", "edge"}``."""
    cfg = config or ConsolidationConfig()
    out = []
    for f in facts:
        _, q = _train_eval_questions(f["subject"], f["relation"], cfg)
        out.append({"question": q, "aliases": [f["object"]], "subject": f["subject"], "relation": f["relation"],
                    "object": f["object"], "edge": f.get("id")})
    return out


def _negative_pairs(facts: Sequence[dict], others: Sequence[dict], rng) -> list[tuple[str, str]]:
    """(subject, relation) pairs the adapter must not claim to know: a consolidated subject with a relation
    it does not have, and the graph's facts that were not consolidated."""
    have = {(_norm(f["subject"]), _norm(f["relation"])) for f in facts}
    subjects = list(dict.fromkeys(f["subject"] for f in facts))
    relations = list(dict.fromkeys(f["relation"] for f in list(facts) + list(others)))
    cross = [(s, r) for s in subjects for r in relations if (_norm(s), _norm(r)) not in have]
    rest = [(f["subject"], f["relation"]) for f in others if (_norm(f["subject"]), _norm(f["relation"])) not in have]
    # alternate the two sources, each shuffled: the graph's other facts are the likeliest confusions
    a = [rest[i] for i in rng.permutation(len(rest))] if rest else []
    b = [cross[i] for i in rng.permutation(len(cross))] if cross else []
    mixed = [p for pair in zip(a, b) for p in pair] + a[len(b):] + b[len(a):]
    return list(dict.fromkeys(mixed))


def render_examples(facts: Sequence[dict], config: ConsolidationConfig | None = None, *,
                    others: Sequence[dict] = (), seed: int | None = None) -> dict:
    """Training rows of the answer role for consolidating ``facts``.

    Parameters
    ----------
    facts : list of dict
        The selected facts (edge dicts with ``subject``, ``relation``, ``object``, ``id``).
    others : list of dict
        Live facts that are *not* consolidated: their questions become negatives (closed-book, they
        are not known; the graph answers them).
    seed : int, optional
        Default ``config.seed``.

    Returns
    -------
    dict
        ``{"rows": [...], "eval": [...], "negatives_eval": [...]}``. A row has ``id``, ``kind``
        (``question``, ``statement``, ``recollection``, ``negative``, ``open_book``), ``input``,
        ``response`` and ``memory`` (empty for closed-book rows). ``eval`` holds one held-out question
        per fact (:func:`eval_questions`); ``negatives_eval`` questions about pairs that no training
        row used, whose answer is the abstention.
    """
    import numpy as np

    cfg = config or ConsolidationConfig()
    rng = np.random.default_rng([cfg.seed if seed is None else seed, 14])
    rows: list[dict] = []

    def add(kind: str, question: str, response: str, memory: list | None = None) -> None:
        rows.append({"id": f"c{len(rows)}", "kind": kind, "input": question, "response": response,
                     "memory": memory or []})

    by_subject: dict[str, list[dict]] = {}
    for f in facts:
        by_subject.setdefault(f["subject"], []).append(f)
    for f in facts:
        train_qs, _ = _train_eval_questions(f["subject"], f["relation"], cfg)
        pick = rng.permutation(len(train_qs))[: cfg.questions_per_fact]
        for i in pick:
            add("question", train_qs[int(i)], f["object"])
        for t in cfg.statement_templates[: cfg.statements_per_fact]:
            q = _fill(t, f["subject"], f["relation"])
            if "{R}" in t:
                add("statement", q, f["object"])
            else:  # a recollection: every consolidated fact about the subject
                add("recollection", q, "; ".join(f"{g['subject']} {g['relation']} {g['object']}"
                                                 for g in by_subject[f["subject"]]))
    rows = [r for i, r in enumerate(rows) if r["kind"] != "recollection"
            or r["input"] not in {x["input"] for x in rows[:i]}]  # one recollection per subject
    n_pos = len(rows)
    pairs = _negative_pairs(facts, others, rng)
    n_neg = min(len(pairs), int(round(cfg.negatives_ratio * n_pos)))
    n_eval_neg = min(len(pairs) - n_neg, max(1, len(facts) // 2)) if pairs else 0
    for s, r in pairs[:n_neg]:
        qs = fact_questions(s, r, cfg)
        add("negative", qs[int(rng.integers(len(qs)))], P.ABSTAIN_ANSWER)
    neg_eval = []
    for s, r in pairs[n_neg:n_neg + n_eval_neg]:
        qs = fact_questions(s, r, cfg)
        neg_eval.append({"question": qs[-1], "aliases": [], "subject": s, "relation": r, "object": None,
                         "edge": None})
    # open-book rehearsal: recalled memory wins, whether it repeats the consolidated value or holds a newer one
    n_open = int(round(cfg.open_book_ratio * len(facts)))
    if n_open and facts:
        values: dict[str, list[str]] = {}
        for f in list(facts) + list(others):
            values.setdefault(_norm(f["relation"]), []).append(f["object"])
        for j in rng.permutation(len(facts))[:n_open]:
            f = facts[int(j)]
            train_qs, _ = _train_eval_questions(f["subject"], f["relation"], cfg)
            alt = [v for v in dict.fromkeys(values[_norm(f["relation"])]) if _norm(v) != _norm(f["object"])]
            value = alt[int(rng.integers(len(alt)))] if alt and rng.random() < 0.5 else f["object"]
            memory = [{"text": f"{f['subject']} {f['relation']} {value}", "time": None, "current": None,
                       "speaker": None}]
            others_mem = [g for g in facts if g is not f]
            for k in rng.permutation(len(others_mem))[: int(rng.integers(0, 3))]:
                g = others_mem[int(k)]
                memory.append({"text": f"{g['subject']} {g['relation']} {g['object']}", "time": None,
                               "current": None, "speaker": None})
            order = rng.permutation(len(memory))
            add("open_book", train_qs[int(rng.integers(len(train_qs)))], value, [memory[int(i)] for i in order])
    for i, r in enumerate(rows):  # ids were given before the recollections were deduplicated: one id per row
        r["id"] = f"c{i}"
    order = rng.permutation(len(rows))
    return {"rows": [rows[int(i)] for i in order], "eval": eval_questions(facts, cfg), "negatives_eval": neg_eval}


# ------------------------------------------------------------------------------------------------
# adapters at run time
def _key(f: Mapping) -> tuple[str, str, str]:
    return _norm(f["subject"]), _norm(f["relation"]), _norm(f["object"])


def carried_facts(m: Any, selected: Sequence[dict]) -> list[dict]:
    """The facts the consolidation adapter in use (``m.consolidated``) was trained on that the next version
    must keep: a version trains one new LoRA, so without them it forgets what earlier versions took in (with
    ``after="prune"`` those facts are gone from the graph too; with ``"demote"`` they were rendered as
    negatives, "not known"). Left out: facts ``selected`` again, and facts the graph now contradicts (a valid
    fact with the same subject and relation and another object: the value changed since).
    """
    if m.consolidated is None:
        return []
    record = Path(m.consolidated) / "consolidation.json"
    try:
        old = json.loads(record.read_text())
        if not isinstance(old, dict) or not isinstance(old.get("facts", []), list):
            raise ValueError("not a consolidation record (a JSON object with a list of facts)")
        old = old.get("facts") or []
        for f in old:
            if not isinstance(f, dict) or not all(isinstance(f.get(k), str) for k in ("subject", "relation", "object")):
                raise ValueError(f"a fact of the record is not {{subject, relation, object}}: {f!r}")
    except (OSError, ValueError) as exc:  # training on would silently drop what the served adapter holds
        raise ValueError(f"cannot read the facts of the consolidation adapter in use from {record} ({exc}): a new "
                         f"version must carry them. Restore the record, roll back to a snapshot taken before that "
                         f"version, or serve no adapter (m.set_consolidated(None)) to start afresh") from None
    have = {_key(f) for f in selected}
    now: dict[tuple[str, str], set[str]] = {}
    for f in m.graph.facts():
        s, r, o = _key(f)
        now.setdefault((s, r), set()).add(o)
    stale = {_key(f) for f in m.graph.facts(include_invalid=True) if not f["valid"]} - {
        (s, r, o) for (s, r), os_ in now.items() for o in os_}  # held only as superseded: never written back
    out, seen = [], set()
    for f in old:
        k = _key(f)
        if k in have or k in seen or k in stale or (k[:2] in now and k[2] not in now[k[:2]]):
            continue
        seen.add(k)
        out.append({**f, "id": f"carried-{f['id']}"})
    return out


def answer_adapter(m: Any) -> Path | None:
    """The trained PEFT adapter inside agent ``m``'s answer model (None: the embedded base model).

    A consolidation LoRA learns on the model the agent serves: the base model, or the base with this adapter
    merged. The answer model must be served merged: a PEFT folder (the transformers backend merges it at load)
    or a merged GGUF export (``model-<quant>.gguf`` beside its ``manifest.json``, whose source adapter must
    still be there, unchanged). A GGUF LoRA file served over the base, or a model without a known source
    adapter, raises ``ValueError`` saying what to serve instead.
    """
    return _answer_adapter(m)[0]


def _answer_adapter(m: Any) -> tuple[Path | None, str | None]:
    """:func:`answer_adapter` and the adapter's sha256 where finding it computed one (a merged GGUF export's
    source adapter, checked against its manifest), else None: :func:`_adapter_identity` hashes only then."""
    from .export.layout import _adapter_sha256

    spec = m.model_paths.get("answer")
    if spec is None:
        return None, None
    path = Path(spec)
    if path.is_dir() and (path / "adapter_config.json").is_file():
        return path, None
    fix = ("serve the trained answer model merged (backend='transformers' with its PEFT folder, or the merged "
           "GGUF export's model-q8_0.gguf), or answer_model=None for the base model")
    manifest = path.parent / "manifest.json"
    if path.suffix != ".gguf" or not manifest.is_file():
        raise ValueError(f"consolidation needs the adapter the answer model {spec} was trained as, and cannot "
                         f"tell it (not a PEFT folder, not a GGUF export with a manifest.json): {fix}")
    man = json.loads(manifest.read_text())
    entry = next((e for e in (man.get("files") or {}).values() if e.get("file") == path.name), None)
    if entry is None or entry.get("kind") != "merged":
        raise ValueError(f"the answer model {spec} is {'not in its manifest' if entry is None else 'a LoRA file'}"
                         f": a consolidation LoRA stacks only on a merged model; {fix}")
    src = Path((man.get("source_adapter") or {}).get("path", ""))
    if not (src / "adapter_config.json").is_file():
        raise FileNotFoundError(f"the answer model {spec} was exported from {src}, which holds no PEFT adapter "
                                "now: consolidation trains on the unquantised weights; restore that folder")
    sha = _adapter_sha256(src)
    if sha != man["source_adapter"].get("sha256"):
        raise ValueError(f"{src} changed since {spec} was exported from it: export again "
                         "(python -m mags_lib.export) before consolidating")
    return src, sha


def _adapter_identity(adapter: Path | None, sha: str | None = None) -> dict | None:
    """``{"path", "sha256"}`` of a trained adapter (hashed unless ``sha`` is given), None for the base model."""
    from .export.layout import _adapter_sha256

    return None if adapter is None else {"path": str(adapter), "sha256": sha or _adapter_sha256(adapter)}


def check_adapter_fits(adapter_dir: str | Path, m: Any) -> None:
    """Raise ``ValueError`` when the consolidation adapter in ``adapter_dir`` was trained on another answer model
    than the one agent ``m`` serves (a LoRA learned on the base model means nothing on a trained model, and the
    reverse). Adapters written before this record existed were all trained on the base model."""
    record = Path(adapter_dir) / "consolidation.json"
    if not record.is_file():
        return
    try:
        info = json.loads(record.read_text())
        if not isinstance(info, dict):
            raise ValueError(f"a JSON object was expected, got {type(info).__name__}")
    except ValueError as e:  # JSONDecodeError is a ValueError
        raise ValueError(f"{record} is not a consolidation record ({e}): the adapter folder is damaged; "
                         "consolidate again, or restore the folder from a copy") from None
    was = info.get("answer_adapter")
    now, sha = _answer_adapter(m)
    same = (was is None and now is None) or (was is not None and now is not None
                                             and was.get("sha256") == _adapter_identity(now, sha)["sha256"])
    if not same:
        trained_on = "the base answer model" if was is None else f"the trained answer adapter {was.get('path')}"
        serves = "the base answer model" if now is None else f"the trained answer adapter {now}"
        raise ValueError(f"the consolidation adapter {adapter_dir} was trained on {trained_on}, but this agent "
                         f"serves {serves}: serve the model it was trained on, or consolidate again")


def runtime_adapter(adapter_dir: str | Path, backend: str) -> Path:
    """What ``backend`` loads for a consolidation adapter: the PEFT folder (transformers) or its GGUF
    LoRA (llama.cpp; exported once into ``<adapter_dir>/gguf/`` by :mod:`mags_lib.export`)."""
    adapter_dir = Path(adapter_dir)
    if not (adapter_dir / "adapter_config.json").is_file():
        raise FileNotFoundError(f"{adapter_dir} is not a consolidation adapter (no adapter_config.json): it was "
                                "moved or deleted; roll back to a snapshot whose adapter exists, or consolidate again")
    name = backend.lower().replace(".", "").replace("_", "")
    if name in ("transformers", "hf"):
        return adapter_dir
    if name == "llamacpp":
        from .export import ExportConfig, export_adapter

        manifest = export_adapter(adapter_dir, adapter_dir / "gguf", ExportConfig(variants=("lora",),
                                  verify_tokenizer=False, default="lora"), progress=False)
        return adapter_dir / "gguf" / manifest["files"]["lora"]["file"]
    raise ValueError(f"consolidation adapters run on the transformers or llama.cpp backends, not {backend!r}")


def train_config(cfg: ConsolidationConfig, *, max_steps: int | None = None, batch_size: int | None = None,
                 threads: int | None = None) -> Any:
    """The :class:`~mags_lib.training.TrainConfig` a consolidation trains with (either trainer): the answer role's
    LoRA and a warm-start stage sized by ``cfg``; ``max_steps`` / ``batch_size`` / ``threads`` override it (the
    trainer comparison of :mod:`mags_lib.bench.consolidation`)."""
    from .training import LoraSpec, SFTConfig, TrainConfig

    steps = cfg.max_steps if max_steps is None else max_steps
    return TrainConfig(role="answer", profile="default", seed=cfg.seed,
                       lora=LoraSpec(r=cfg.lora_r, alpha=cfg.lora_alpha, target_modules=cfg.target_modules),
                       sft=SFTConfig(max_steps=steps, batch_size=cfg.batch_size if batch_size is None else batch_size,
                                     learning_rate=cfg.learning_rate, max_length=cfg.max_length, n_generated=0,
                                     save_steps=max(steps, 1), save_total_limit=1, warmup_ratio=0.0,
                                     batching=cfg.batching),
                       grpo=None, n_eval=0, threads=cfg.threads if threads is None else threads)


def _train_shared_prefix(tcfg: Any, rows: Sequence[dict], folder: Path, *, base_dir: Path, prompt: Any,
                         layers: Sequence[int] = (), merge: Path | None = None, progress: bool,
                         note: Callable[[str], None], anchor_weight: float = 0.0, anchor_per_step: int = 2,
                         anchor_every: int = 1) -> dict:
    """Train the consolidation LoRA with :func:`mags_lib.training.prefix.train_lora` into ``folder`` (the PEFT
    adapter, ``log.csv`` and a stage ``meta.json``, written last); ``merge``: the trained answer adapter merged
    into the base first."""
    import torch

    from .training.prefix import train_lora
    from .training.run import STAGE_FORMAT, _bf16_ok, _finish_adapter, _load_model, rows_hash, sft_examples

    if tcfg.threads:
        torch.set_num_threads(tcfg.threads)
    model, tok = _load_model(base_dir, tcfg, "torch", layers=layers, merge=merge)
    folder.mkdir(parents=True, exist_ok=True)
    bf16 = _bf16_ok(tcfg.sft.bf16)
    metrics = train_lora(model, tok, sft_examples(rows, prompt), steps=tcfg.sft.max_steps,
                         batch_size=tcfg.sft.batch_size, learning_rate=tcfg.sft.learning_rate,
                         warmup_ratio=tcfg.sft.warmup_ratio, weight_decay=tcfg.sft.weight_decay, seed=tcfg.seed,
                         bf16=bf16, max_length=tcfg.sft.max_length, log_path=folder / "log.csv", progress=progress,
                         batching=tcfg.sft.batching, anchor=ANCHOR_TEXT,
                         anchor_weight=anchor_weight, anchor_per_step=anchor_per_step, anchor_every=anchor_every)
    if metrics["n_dropped"]:
        note(f"consolidation: {metrics['n_dropped']} of {len(rows)} rows are longer than "
             f"max_length={tcfg.sft.max_length} tokens and were left out")
    meta = {"format": STAGE_FORMAT, "role": "answer", "stage": "consolidation", "trainer": "shared-prefix",
            "lora": dataclasses.asdict(tcfg.lora), "layers": list(layers), "sft": dataclasses.asdict(tcfg.sft), "seed": tcfg.seed,
            "prompt": prompt.to_dict(), "n_rows": len(rows) - metrics["n_dropped"], "rows": rows_hash(rows), "bf16": bf16,
            "merged_under": None if merge is None else str(merge), "anchor_weight": anchor_weight,
            "anchor_per_step": anchor_per_step, "anchor_every": anchor_every,
            "train_metrics": metrics, "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    _finish_adapter(model, folder, meta)
    return metrics


# ------------------------------------------------------------------------------------------------
@dataclass
class ConsolidationResult:
    """What one :func:`consolidate` did."""

    version: int | None
    adapter: Path | None
    snapshot: str | None
    previous_snapshot: str | None  # None: nothing trained (skipped), or the graph's snapshot limits dropped it
    facts: list[dict]
    n_rows: dict[str, int]
    seconds: float
    train_seconds: float
    adapter_bytes: int
    graph_changed: int
    eval: list[dict] = field(default_factory=list)
    negatives_eval: list[dict] = field(default_factory=list)
    skipped: str | None = None
    train_metrics: dict = field(default_factory=dict)

    def summary(self) -> dict:
        return {"version": self.version, "adapter": None if self.adapter is None else str(self.adapter),
                "snapshot": self.snapshot, "previous_snapshot": self.previous_snapshot,
                "n_facts": len(self.facts), "n_rows": self.n_rows, "seconds": round(self.seconds, 2),
                "train_seconds": round(self.train_seconds, 2), "adapter_bytes": self.adapter_bytes,
                "graph_changed": self.graph_changed, "skipped": self.skipped}


def _next_version(root: Path) -> int:
    vs = [int(p.name[1:]) for p in root.glob("v*") if p.is_dir() and p.name[1:].isdigit()]
    return max(vs, default=0) + 1


def _dir_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("adapter_model.*") if p.is_file())


def consolidate(m: Any, config: ConsolidationConfig | None = None, *, root: str | Path,
                progress: bool = False, note: Callable[[str], None] = print) -> ConsolidationResult:
    """One consolidation of agent ``m``'s memory into a new LoRA of its answer model (see module docstring).

    Parameters
    ----------
    m : MAGS
        Its answer model: the embedded base model, or a trained one served merged (:func:`answer_adapter`;
        the new LoRA is trained on top of it, with the shared-prefix trainer).
    config : ConsolidationConfig, optional
    root : str or Path
        Folder of the adapter versions (``<root>/v<k>/``).
    progress : bool
        Show the trainer's progress bar.

    Returns
    -------
    ConsolidationResult
        With ``snapshot``: the snapshot taken after the graph was demoted / pruned, which
        :meth:`MAGS.rollback` restores together with this adapter; ``previous_snapshot``: the one taken
        before (rolling back to it restores the previous adapter and the facts as they were; None when the
        graph's snapshot limits left room for one snapshot only, said in a note).
        When no fact qualifies nothing is trained (``skipped`` says why; the memory is unchanged and no snapshot
        is taken). A failure or an interruption (``KeyboardInterrupt``) at any point leaves the memory, its
        snapshots and the adapter in use as they were, and no version folder.
    """
    import shutil

    from .models import base_model_dir
    from .training import train_stage
    from .training.run import rows_hash

    cfg = config or ConsolidationConfig()
    t0 = time.perf_counter()
    if m.config.memory == "none":  # before any training: set_consolidated would refuse the adapter at the end
        raise ValueError("memory='none' is the baseline without memory: there is no memory to consolidate, and it "
                         "cannot answer through an adapter that holds a memory's facts; use memory='graph'")
    under, under_sha = _answer_adapter(m)
    if under is not None and cfg.trainer != "prefix":
        raise ValueError(f"consolidating on a trained answer model ({under}) needs trainer='prefix' (the TRL "
                         f"trainer learns on the base model only), got trainer={cfg.trainer!r}")
    root = Path(root)
    facts = select_facts(m.graph, cfg)
    if not facts:  # nothing changes: no snapshot either (one would push an older one out under the limits)
        return ConsolidationResult(None, None, None, None, [], {}, time.perf_counter() - t0, 0.0, 0, 0,
                                   skipped=f"no fact passes the selection (min_strength={cfg.min_strength}, "
                                           f"min_uses={cfg.min_uses}, require_permanent={cfg.require_permanent})")
    chosen = {f["id"] for f in facts}
    carried = carried_facts(m, facts)  # what the adapter in use holds: the new version must not forget it
    held = {_key(f) for f in carried}
    others = [f for f in m.graph.facts() if f["id"] not in chosen and _key(f) not in held]
    data = render_examples(facts + carried, cfg, others=others)
    rows = data["rows"]
    version = _next_version(root)
    folder = root / f"v{version}"
    tcfg = train_config(cfg)
    prompt = m.prompt_spec("answer")
    try:  # all or nothing: a failure or an interruption anywhere from here (training, a full disk writing the
        # record) leaves memory, snapshots and adapter as they were (one transaction: the limits on snapshots may
        # push `before` out when `after` is taken), and no version folder: never one without its record (a later
        # run starts its own version; an unfinished one is not resumed)
        with m.transaction():
            t_train = time.perf_counter()
            if cfg.trainer == "prefix":
                metrics = _train_shared_prefix(tcfg, rows, folder, base_dir=base_model_dir(m.config.models_root),
                                               prompt=prompt, layers=cfg.layers, merge=under, progress=progress,
                                               note=note, anchor_weight=cfg.anchor_weight,
                                               anchor_per_step=cfg.anchor_per_step, anchor_every=cfg.anchor_every)
            else:
                metrics = train_stage("sft", tcfg, rows, folder, base_dir=base_model_dir(m.config.models_root),
                                      prompt=prompt, data_hashes={"consolidation": rows_hash(rows)},
                                      progress=progress, note=note).metrics
            train_seconds = time.perf_counter() - t_train
            shutil.rmtree(folder / "checkpoints", ignore_errors=True)  # a finished adapter needs no resume point
            eids = sorted(chosen)
            before = m.snapshot()
            if cfg.after == "demote":
                changed = m.graph.demote(eids, cfg.demote_factor)
            elif cfg.after == "prune":
                changed = m.graph.forget(eids)
            else:
                changed = 0
            m.set_consolidated(folder)
            after = m.snapshot()
            if before not in m.graph.snapshots:  # LimitsConfig.max_snapshots / max_snapshot_bytes dropped it
                note(f"consolidation v{version}: the snapshot before it ({before}) was dropped by the graph's "
                     f"snapshot limits (config.graph.limits): rolling back to the previous version needs room for two")
                before = None
            kinds: dict[str, int] = {}
            for r in rows:
                kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
            result = ConsolidationResult(version, folder, after, before, facts, kinds, time.perf_counter() - t0,
                                         train_seconds, _dir_bytes(folder), changed, data["eval"],
                                         data["negatives_eval"], train_metrics=metrics)
            from . import repro

            record = {"format": FORMAT, "version": version, "config": cfg.to_dict(), "prompt": prompt.to_dict(),
                      "answer_adapter": _adapter_identity(under, under_sha),
                      "facts": [{k: f[k] for k in ("id", "subject", "relation", "object", "strength", "uses",
                                                   "sources")} for f in facts + carried], "carried": len(carried),
                      "eval": data["eval"], "negatives_eval": data["negatives_eval"],
                      "train_metrics": metrics, **result.summary(), "git_sha": repro.git_sha(),
                      "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
            repro.atomic_write_text(folder / "consolidation.json", json.dumps(record, indent=1, default=str))
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)  # never served: no version without its record
        raise
    return result


class Consolidator:
    """Consolidation on a schedule: ``observe`` through it, and every ``config.every_n_observations``
    observations it consolidates (``step()`` consolidates on demand)."""

    def __init__(self, m: Any, config: ConsolidationConfig | None = None, *, root: str | Path,
                 note: Callable[[str], None] = print) -> None:
        self.m, self.config, self.root, self.note = m, config or ConsolidationConfig(), Path(root), note
        self.last_at = m.n_observations
        self.results: list[ConsolidationResult] = []
        self.errors: list[str] = []  # scheduled consolidations that failed (see observe)

    @property
    def due(self) -> bool:
        n = self.config.every_n_observations
        return bool(n) and self.m.n_observations - self.last_at >= n

    def step(self) -> ConsolidationResult:
        res = consolidate(self.m, self.config, root=self.root, note=self.note)
        self.last_at = self.m.n_observations
        self.results.append(res)
        return res

    def observe(self, text: str, **kw: Any) -> Any:
        """``m.observe``, then a consolidation when one is due. The observation is stored whatever the
        consolidation does: a failed one (it changed nothing: :func:`consolidate` is all or nothing) is noted,
        kept in ``errors`` and tried again ``every_n_observations`` later, and the observation is returned."""
        obs = self.m.observe(text, **kw)
        if self.due:
            try:
                self.step()
            except Exception as exc:  # noqa: BLE001 -- the turn is stored: raising would lose its Observation
                self.last_at = self.m.n_observations  # the next try after another every_n_observations
                self.errors.append(f"after observation {self.m.n_observations}: {type(exc).__name__}: {exc}")
                self.note(f"consolidation failed and changed nothing ({type(exc).__name__}: {exc}); the next try "
                          f"comes after {self.config.every_n_observations} more observations")
        return obs


def closed_book_accuracy(m: Any, questions: Sequence[dict], *, recall: bool = False, progress: bool = False,
                         desc: str = "closed-book") -> dict:
    """Accuracy of ``m.ask(q, recall=recall)`` on questions ``{"question", "aliases"}`` (empty aliases: the
    answer must abstain), with the answers (``progress``: a tqdm bar)."""
    from tqdm.auto import tqdm

    from .metrics import answer_correct

    answers, ok = [], []
    for q in tqdm(questions, desc=desc, disable=not progress, leave=False):
        a = m.ask(q["question"], recall=recall).answer
        answers.append(a)
        ok.append(bool(answer_correct(a, q["aliases"])))
    return {"accuracy": sum(ok) / len(ok) if ok else float("nan"), "n": len(ok), "answers": answers, "correct": ok}
