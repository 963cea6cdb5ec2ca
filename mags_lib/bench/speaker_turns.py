"""Whose "I" is it: the write model on first-person dialogue turns, with and without the speaker's name.

Usage::

    python -m mags_lib.bench.speaker_turns --write-model models/write/default/gguf/model-q8_0.gguf \\
        --out results/bench/speaker_turns.json [--n 200] [--threads 2]

A dialogue turn reaches :meth:`MAGS.observe` as the text a person said and their name
(``observe("Hey Gina! I lost my job.", speaker="Jon")``). The write model was trained on generated
inputs where a person introduces themselves ("Hi, I'm Jon. I work as a banker.", or ``"Jon: I work as a
banker."``) and writes ``(Jon, works as, banker)``; a real turn carries no introduction, and often
names the person spoken to. :attr:`MAGSConfig.write_speaker` gives the write model the turn as
``"<speaker>: <text>"``; this benchmark measures what that changes.

Rows: the ``persona`` kind of the generated write data's **test** worlds (:mod:`mags_lib.data.render`,
the worlds of the real test split: same seed and name registry), each a person's introduction and one
to three first-person facts with their gold triplets (subject: the person). Each row is observed
without its introduction, the person given as ``speaker``, in two forms:

* ``plain`` -- the first-person sentences alone ("I play the harmonica. I earn my living as a pilot.");
* ``addressed`` -- the same after a greeting naming another person of the test worlds ("Thanks, Zekia! I
  play the harmonica. ..."), as dialogue turns are (greetings unlike the training data's dialogue rows,
  :data:`mags_lib.data.templates.DIALOGUE_INTROS`);

each with ``write_speaker`` off and on, plus the row's own input with its introduction and no speaker
(``introduced``, the form the model was trained on) for reference; and ``small_talk``: turns of the same
speakers that state no fact (phrases and greetings written for this benchmark, none in the training data's
:data:`mags_lib.data.templates.SMALL_TALK` / ``CHIT_CHAT``), gold: nothing, scored by the share of turns that
stored anything and the triplets stored. Figures per form and setting:
exact-triplet F1 of what ``observe`` stored against the gold (micro, :func:`mags_lib.metrics.exact_matches`:
normalised subject, relation and object), and **subject accuracy**: the share of stored triplets whose
subject is the speaker (every gold subject is). With ``--game-scenarios`` (default 40) the game's persona
scenarios are observed too, off and on, and scored by :func:`mags_lib.game.quality.operation_quality` (stored
gold facts, wrong subjects, wrong and missed invalidations). Written to ``--out`` (JSON), one line per figure
printed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["FORMS", "dialogue_rows", "game_persona_quality", "main", "run", "score", "small_talk_quality",
           "small_talk_rows"]

FORMS = ("introduced", "plain", "addressed")
# greetings of the "addressed" form: none of them is in the training data's (templates.DIALOGUE_INTROS)
GREETINGS = ("Hi {A}, good to see you.", "Thanks, {A}!", "Oh {A}, guess what?", "Sorry to hear that, {A}.")

# small talk of the "small_talk" rows: none of it is in the training data (templates.SMALL_TALK, CHIT_CHAT)
HELD_OUT_TALK = ("That's wonderful news!", "How was your day?", "I really appreciate it.", "You're doing great.",
                 "Talk to you soon!", "Sounds exciting, what happened next?", "I couldn't agree more.",
                 "Oh wow, really?", "That made me smile.", "Hope things get better soon.", "Lol, same here.",
                 "It's so nice to hear from you.", "Good for you!", "Let me know how it turns out.",
                 "That's so cool.", "Hang in there.", "Aww, that's adorable.", "What a lovely idea!")


def dialogue_rows(n: int = 200, *, seed: int = 0) -> list[dict]:
    """``n`` persona rows of the generated test worlds as dialogue turns: ``{"speaker", "introduced",
    "plain", "addressed", "gold"}`` (``gold``: the triplets; ``addressed`` greets another person).

    >>> rows = dialogue_rows(3)
    >>> all(r["gold"] and all(t[0] == r["speaker"] for t in r["gold"]) for r in rows)
    True
    >>> all(r["speaker"] not in r["plain"] and r["plain"] in r["addressed"] for r in rows)
    True
    """
    from ..data.render import GenerationConfig, generate_role_splits
    from ..data.templates import PERSONA_INTROS

    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    cfg = GenerationConfig(n_train=0, n_validation=0, n_test=3 * n, seed=seed, roles=("write",),
                           write_kinds={"persona": 1.0})
    rows, _ = generate_role_splits(cfg, progress=False)
    # rows that introduce their speaker, with their introduction's index (the data's dialogue-form rows greet
    # someone already)
    test = [(r, int(t.split(".")[1])) for r in rows["write"]["test"] for t in r["template_ids"]
            if t.startswith("intro.")][:n]
    if len(test) < n:
        raise ValueError(f"the test worlds gave {len(test)} persona rows with an introduction, fewer than n={n}")
    names = sorted({op["triplet"][0] for r, _ in test for op in r["ops"]})
    out = []
    for i, (r, intro_index) in enumerate(test):
        gold = [tuple(op["triplet"]) for op in r["ops"]]
        speaker = gold[0][0]
        intro = PERSONA_INTROS[intro_index].format(N=speaker).strip()
        if not r["input"].startswith(intro):
            raise ValueError(f"row {r['id']}: input does not start with its introduction {intro!r}")
        plain = r["input"][len(intro):].strip()
        other = names[(names.index(speaker) + 1 + i) % len(names)]
        if other == speaker:
            other = names[(names.index(speaker) + 1) % len(names)]
        greet = GREETINGS[i % len(GREETINGS)].format(A=other)
        out.append({"id": r["id"], "speaker": speaker, "introduced": r["input"], "plain": plain,
                    "addressed": f"{greet} {plain}", "gold": gold})
    return out


def small_talk_rows(rows: Sequence[dict]) -> list[dict]:
    """One small-talk turn per dialogue row: its speaker says one or two held-out phrases, every other turn
    after a held-out greeting naming someone else; ``gold`` is empty.

    >>> r = small_talk_rows([{"speaker": "Jon", "gold": []}, {"speaker": "Gina", "gold": []}])
    >>> [x["speaker"] for x in r], all(not x["gold"] and x["text"] for x in r)
    (['Jon', 'Gina'], True)
    """
    names = sorted({r["speaker"] for r in rows})
    out = []
    for i, r in enumerate(rows):
        said = HELD_OUT_TALK[i % len(HELD_OUT_TALK)]
        if i % 3 == 2:
            said += " " + HELD_OUT_TALK[(7 * i + 3) % len(HELD_OUT_TALK)]
        if i % 2 and len(names) > 1:
            other = names[(names.index(r["speaker"]) + 1 + i) % len(names)]
            other = other if other != r["speaker"] else names[(names.index(r["speaker"]) + 1) % len(names)]
            said = GREETINGS[i % len(GREETINGS)].format(A=other) + " " + said
        out.append({"speaker": r["speaker"], "text": said, "gold": []})
    return out


def small_talk_quality(rows: Sequence[dict], *, write_model: str | None = None, threads: int = 1,
                       progress: bool = True, backends: dict | None = None) -> dict:
    """Observe each small-talk row (:func:`small_talk_rows`) with its speaker, ``write_speaker`` off and on:
    the share of turns that stored any triplet, and the triplets stored (every one is a false fact)."""
    from tqdm.auto import tqdm

    from ..agent import MAGS, MAGSConfig

    out: dict[str, Any] = {"n_turns": len(rows)}
    for write_speaker in (False, True):
        cfg = MAGSConfig(write_model=write_model, n_threads=threads, write_speaker=write_speaker, maintain_every=0)
        n_any = n_trip = 0
        examples = []
        with MAGS(cfg, backends=backends) as m:
            for r in tqdm(rows, desc=f"small talk, write_speaker={write_speaker}", disable=not progress):
                trips = m.observe(r["text"], speaker=r["speaker"]).triplets
                n_any += bool(trips)
                n_trip += len(trips)
                if trips and len(examples) < 5:
                    examples.append({"speaker": r["speaker"], "text": r["text"], "stored": [list(t) for t in trips]})
        out[f"write_speaker={'on' if write_speaker else 'off'}"] = {
            "turns_storing_anything": round(n_any / len(rows), 4) if rows else None, "triplets": n_trip,
            "examples": examples}
    return out


def score(written: Sequence[Sequence[Sequence[str]]], rows: Sequence[dict]) -> dict:
    """Exact-triplet precision / recall / F1 and subject accuracy of ``written[i]`` against ``rows[i]``.

    >>> rows = [{"speaker": "Jon", "gold": [("Jon", "works as", "pilot")]}]
    >>> score([[("Jon", "works as", "a pilot"), ("Gina", "plays", "harp")]], rows)["subject_accuracy"]
    0.5
    >>> score([[("jon", "works as", "pilot")]], rows)["f1"]
    1.0
    """
    from ..metrics import exact_matches, prf
    from ..protocol import Op, normalize_text

    tp = n_pred = n_gold = n_subj = 0
    for trips, r in zip(written, rows, strict=True):
        pred = [Op("write", ",".join(t), tuple(t)) for t in trips]
        gold = [Op("write", ",".join(t), tuple(t)) for t in r["gold"]]
        tp += exact_matches(pred, gold)
        n_pred += len(pred)
        n_gold += len(gold)
        n_subj += sum(normalize_text(t[0]) == normalize_text(r["speaker"]) for t in trips)
    p = prf(tp, n_pred, n_gold)
    return {"precision": round(p.precision, 4), "recall": round(p.recall, 4), "f1": round(p.f1, 4),
            "n_written": n_pred, "n_gold": n_gold,
            "subject_accuracy": round(n_subj / n_pred, 4) if n_pred else None}


def run(rows: Sequence[dict], *, write_model: str | None = None, threads: int = 1,
        progress: bool = True, backends: dict | None = None) -> dict:
    """Observe every row in each form, ``write_speaker`` off and on (fresh agents), and score it
    (``backends``: role -> backend, instead of loading ``write_model``)."""
    from tqdm.auto import tqdm

    from ..agent import MAGS, MAGSConfig

    out: dict[str, Any] = {}
    settings = [("introduced", False, False), ("plain", True, False), ("plain", True, True),
                ("addressed", True, False), ("addressed", True, True)]
    bar = tqdm(total=len(settings) * len(rows), desc="speaker turns", unit="turn", disable=not progress)
    for form, with_speaker, write_speaker in settings:
        cfg = MAGSConfig(write_model=write_model, n_threads=threads, write_speaker=write_speaker, maintain_every=0)
        written = []
        t0 = time.perf_counter()
        with MAGS(cfg, backends=backends) as m:
            for r in rows:
                o = m.observe(r[form], speaker=r["speaker"] if with_speaker else None)
                written.append([list(t) for t in o.triplets])
                bar.update(1)
        key = form if form == "introduced" else f"{form}, write_speaker={'on' if write_speaker else 'off'}"
        out[key] = {**score(written, rows), "seconds_per_turn": round((time.perf_counter() - t0) / len(rows), 4)}
    bar.close()
    return out


def game_persona_quality(n_scenarios: int = 40, *, write_model: str | None = None, threads: int = 1,
                         backends: dict | None = None, progress: bool = True) -> dict:
    """The game's ``persona`` scenarios (:func:`mags_lib.game.generate.evaluation_scenarios`, default profile,
    the first ``n_scenarios`` generated, examples left out): every ``say`` observed with its speaker, with
    ``write_speaker`` off and on, then :func:`mags_lib.game.quality.operation_quality` of the memory
    against the scenario's gold, summed over the scenarios (counts and rates;
    :func:`mags_lib.bench.write_quality.observe_scenarios`)."""
    from ..game.generate import evaluation_scenarios
    from .write_quality import observe_scenarios

    scs = [sc for sc in evaluation_scenarios("default", n_scenarios=n_scenarios, examples=False)
           if sc.meta.get("family") == "persona"]
    out: dict[str, Any] = {"n_scenarios": len(scs), "n_says": sum(not e.is_ask for sc in scs for e in sc.events)}
    for write_speaker in (False, True):
        res = observe_scenarios(scs, write_model=write_model, threads=threads, backends=backends, progress=progress,
                                write_speaker=write_speaker)
        out[f"write_speaker={'on' if write_speaker else 'off'}"] = {"triplets": res["triplets"], **res["overall"]}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    from .. import repro

    p = argparse.ArgumentParser(prog="python -m mags_lib.bench.speaker_turns", description=__doc__.split("\n\n")[0])
    p.add_argument("--write-model", default=None, help="a GGUF (model or LoRA adapter); default: the embedded base")
    p.add_argument("--n", type=int, default=200, help="persona rows of the generated test worlds")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--game-scenarios", type=int, default=40,
                   help="generated game scenarios whose persona ones are also scored (0: none)")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    if a.n < 1 or a.threads < 1:
        p.error("--n and --threads must be >= 1")
    rows = dialogue_rows(a.n)
    res = {"what": "the write model on first-person dialogue turns, the speaker's name given or not "
                   "(MAGSConfig.write_speaker); persona rows of the generated test worlds",
           "write_model": a.write_model or "embedded base", "n_rows": len(rows), "threads": a.threads,
           "results": run(rows, write_model=a.write_model, threads=a.threads),
           "small_talk": small_talk_quality(small_talk_rows(rows), write_model=a.write_model, threads=a.threads)}
    if a.game_scenarios > 0:
        res["game_persona"] = game_persona_quality(a.game_scenarios, write_model=a.write_model, threads=a.threads)
    res["meta"] = repro.command_meta("mags_lib.bench.speaker_turns", argv)
    repro.atomic_write_text(Path(a.out), json.dumps(res, indent=1) + "\n")
    for k, v in res["results"].items():
        print(f"{k:>32}  exact F1 {v['f1']:.3f}  subject accuracy {v['subject_accuracy']}  "
              f"({v['n_written']} written, {v['n_gold']} gold)")
    for k, v in res["small_talk"].items():
        if isinstance(v, dict):
            print(f"small talk, {k}: {v['turns_storing_anything']} of turns stored anything ({v['triplets']} triplets)")
    for k, v in res.get("game_persona", {}).items():
        if isinstance(v, dict):
            print(f"game persona, {k}: {v['triplets']} triplets, " + ", ".join(
                f"{r} {x}" for r, x in v["rates"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
