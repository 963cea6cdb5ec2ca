"""Answer-role examples in the register of TextWorld games (training games only).

The reader trained on :mod:`mags_lib.data.answer` sees memory blocks of short facts and one-sentence
narrations. A TextWorld game's memory is its observations: multi-paragraph room descriptions
(``-= Launderette =- Well I'll be, you are in a place we're calling a launderette...``) and command
echoes (``> insert sock into locker You put the sock into the locker.``). Shown those, the reader of
the default run abstained on 54 % of the state questions although recall put the answer first
(README, notebook 55). These rows teach the register: each is a question of
:func:`mags_lib.textworld.questions_at`, asked at a step of a seeded play, with a memory block of the
observations that answer it (the evidence) among other observations of the same play, in play order, as
:meth:`mags_lib.MAGS.ask` shows them (the step's date first, whitespace collapsed).

Evidence per question family (what the player saw that decides the answer):

* ``where`` X: the last two observations that name X, and the last one (not later than those) that
  names X's holder, so "You drop the sock on the ground." comes with the room the player stood in;
* ``contents`` Y: the last observation naming Y and, for each thing in Y, the last that names it;
* ``exit`` (room, direction): the ``go <direction>`` observation that crossed it and the last one
  before it naming the room it started from;
* ``inventory``: the last two observations of ``take`` / ``drop`` / ``put`` / ``insert`` /
  ``inventory`` commands and the last one naming each thing carried (empty hands: the last three).

Abstentions (gold :data:`mags_lib.protocol.ABSTAIN_ANSWER`): the game's ``abstain`` questions (objects
never seen); ``where`` questions whose every observation naming the object was left out of the
block (``drop_evidence`` of them): the reader must not guess from a room description that does not
name the object; and exits the block cannot decide, as :class:`mags_lib.textworld.MemoryAgent` asks
about every exit of the room it stands in: "Which room lies D of the R?" for an exit of a visited
room that the player never crossed (``unseen_exits``: the chance of one per round; the block holds
R's last description, which names the exit but not where it leads), and witnessed exits whose
crossings, both ways, were left out of the block (``drop_exit_evidence`` of them). Without these the
reader named a room for every exit question the agent asked, wrongly 80 % of the time (notebook 55,
2026-11-29).

With ``move_notes`` each move's observation is headed by the note the agent writes of its own moves
(:func:`mags_lib.textworld.move_note`: "Going west from the cookery leads to the pantry."), so a note
of another direction from the same room is a hard negative for an exit question.

Games come from TextWorld's ``custom`` generator with seeds from :data:`TRAIN_SEED_OFFSET` up, far from
the seeds the evaluation uses (notebook 55 plays seeds ``seed .. seed + n_games - 1``); the builder
refuses a seed below the offset. TextWorld is optional: :func:`build_textworld_answer` raises
:class:`mags_lib.textworld.TextWorldMissingError` (with the install command) when it is missing.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .. import protocol

__all__ = ["TRAIN_SEED_OFFSET", "TextWorldAnswerConfig", "build_textworld_answer", "dataset_name_tw",
           "game_answer_rows"]

TRAIN_SEED_OFFSET = 100_000  # training games' TextWorld seeds start here (evaluation: small seeds)
GENERATOR_VERSION = "tw-answer-4"  # 3: no row whose evidence alone breaks the item or character cap
# 4: an abstain row's block holds no observation naming its object (1 of 49 "where" abstain rows did)


@dataclass(frozen=True)
class TextWorldAnswerConfig:
    """How many training games, of which sizes, played how long, and how the memory blocks look."""

    n_games: int = 120  # games (seeds TRAIN_SEED_OFFSET + seed * 10_000 + i)
    sizes: tuple[int, ...] = (2, 3, 4, 5, 6, 7)  # rooms, cycled over the games
    steps: tuple[int, int] = (10, 30)  # commands played per game, drawn in this range
    ask_every: int = 3  # candidate questions every this many steps
    per_round: int = 4  # questions kept per round
    max_items: int = 6  # most observations in a memory block
    max_chars: int = 1000  # the block's characters (the agent's default 256-token budget holds about this)
    drop_evidence: float = 0.12  # share of 'where' questions turned into abstentions by removing the evidence
    unseen_exits: float = 1.0  # chance per round of a question on a visited room's exit never crossed
    drop_exit_evidence: float = 0.12  # share of 'exit' questions made abstentions by removing the crossings
    move_notes: bool = False  # head each move's observation with the agent's note (textworld.move_note)
    test_games: int = 10  # of n_games, the last ones form the test split
    seed: int = 0

    def __post_init__(self) -> None:
        if self.n_games < 1 or self.test_games < 0 or self.test_games >= self.n_games:
            raise ValueError(f"need n_games >= 1 and 0 <= test_games < n_games, got {self.n_games}, {self.test_games}")
        if not self.sizes or min(self.sizes) < 1:
            raise ValueError(f"sizes must be room counts >= 1, got {self.sizes}")
        if not 1 <= self.steps[0] <= self.steps[1]:
            raise ValueError(f"steps must be a range (lo, hi) with 1 <= lo <= hi, got {self.steps}")
        if self.ask_every < 1 or self.per_round < 1 or self.max_items < 1 or self.max_chars < 100:
            raise ValueError("ask_every, per_round, max_items must be >= 1 and max_chars >= 100")
        for name in ("drop_evidence", "drop_exit_evidence"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        if not 0 <= self.unseen_exits <= 1:
            raise ValueError(f"unseen_exits must be in [0, 1], got {self.unseen_exits}")

    def seeds(self) -> list[int]:
        return [TRAIN_SEED_OFFSET + self.seed * 10_000 + i for i in range(self.n_games)]


def dataset_name_tw(profile: str = "default") -> str:
    """Folder of the TextWorld answer rows under ``data/processed``.

    >>> dataset_name_tw(), dataset_name_tw("smoke")
    ('gen_answer_textworld', 'gen_answer_textworld_smoke')
    """
    return "gen_answer_textworld" if profile == "default" else f"gen_answer_textworld_{profile}"


def _where_entity(q: dict) -> str:
    """The object of a "Where is the X?" question."""
    return q["ask"][len("Where is the "):-1]


def _last(idx: Sequence[int], n: int) -> list[int]:
    return list(idx[-n:]) if n else []


def _evidence(q: dict, obs: list[tuple[int, str]], witness, mentions) -> list[int]:
    """Indices into ``obs`` of the observations that decide ``q`` (see the module docstring)."""
    fam = q["family"]

    def naming(name: str) -> list[int]:
        return [i for i, (_, t) in enumerate(obs) if mentions(t, name)]

    if fam == "where":
        ev = _last(naming(_where_entity(q)), 2)
        if ev and q["answer"]:
            holder = [i for i in naming(q["answer"][0]) if i <= ev[-1]]
            ev += _last(holder, 1)
        return sorted(set(ev))
    if fam == "contents":
        y = q["ask"].split(" the ", 1)[1][:-1]
        ev = _last(naming(y), 1)
        for c in q["answer"]:
            ev += _last(naming(c), 1)
        return sorted(set(ev))
    if fam == "exit":  # the crossing the witness recorded, and where the player stood before it
        d, room = q["ask"][len("Which room lies "):-1].split(" of the ", 1)
        dest, when = witness.edges.get((room, d), (None, None))
        at = [i for i, (step, _) in enumerate(obs) if step == when]
        if dest is None or not at:
            return []
        i = at[0]
        # the step's command: its first "> " line (with move notes the observation begins with the note)
        command = next((ln for ln in obs[i][1].split("\n") if ln.startswith("> ")), "")
        departure = room if command == f"> go {d}" else dest
        before = [j for j in naming(departure) if j < i]
        return sorted({before[-1], i}) if before else []
    if fam == "inventory":
        moves = [i for i, (_, t) in enumerate(obs) if t.startswith(("> take ", "> drop ", "> put ", "> insert ",
                                                                       "> inventory"))]
        ev = _last(moves, 2)
        if q["answer"] != ["nothing", "empty handed"]:  # and the last word of each thing carried
            for c in q["answer"]:
                ev += _last(naming(c), 1)
        else:
            ev = _last(moves, 3)
        return sorted(set(ev))
    return []


def _response(q: dict) -> str:
    ans = list(q["answer"])
    if not ans:
        return protocol.ABSTAIN_ANSWER
    if q["family"] == "inventory" and ans[0] == "nothing":
        return "nothing"
    if len(ans) == 1:
        return f"the {ans[0]}"
    return ", ".join(f"the {a}" for a in ans[:-1]) + f" and the {ans[-1]}"


def _block(evidence: list[int], obs: list[tuple[int, str]], rng: np.random.Generator, cfg: TextWorldAnswerConfig,
           avoid: Sequence[str], mentions) -> list[int] | None:
    """The evidence plus other observations (none naming ``avoid``), within the item and character caps; None
    when the evidence alone breaks a cap (no row: it would show more than a block may hold)."""
    if len(evidence) > cfg.max_items:
        return None
    n_total = int(rng.integers(max(1, len(evidence)), cfg.max_items + 1))
    chosen = list(evidence)
    used = sum(len(" ".join(obs[i][1].split())) for i in chosen)
    too_long = used > cfg.max_chars
    others = [i for i in range(len(obs)) if i not in chosen and not any(mentions(obs[i][1], a) for a in avoid)]
    for i in rng.permutation(len(others)):
        if len(chosen) >= n_total:
            break
        j = others[int(i)]
        cost = len(" ".join(obs[j][1].split()))
        if used + cost <= cfg.max_chars:
            chosen.append(j)
            used += cost
    return None if too_long else sorted(chosen)


def game_answer_rows(game, cfg: TextWorldAnswerConfig, *, seed: int) -> list[dict]:
    """The answer rows of one training game (a :class:`mags_lib.textworld.GameFile`), played with ``seed``."""
    from .. import textworld as T

    rng = np.random.default_rng([cfg.seed, seed, 7])
    n_steps = int(rng.integers(cfg.steps[0], cfg.steps[1] + 1))
    play_cfg = T.PlayConfig(n_steps=n_steps, questions=T.QuestionConfig(ask_every=cfg.ask_every,
                                                                        per_round=cfg.per_round))
    steps, entities = T.play(game, play_cfg, seed=seed)
    crossed = {s.index: frozenset(c[1:]) for p, s in itertools.pairwise(steps) if (c := T.crossing(p, s))}
    witness, asked = T.Witness(), set()
    obs: list[tuple[int, str]] = []
    rows: list[dict] = []
    last = len(steps) - 1

    def exit_block(room: str, dest: str) -> list[tuple[int, str]] | None:
        """A block for an exit of ``room`` that cannot decide it: the last observation naming ``room`` among
        others, none of them a crossing between ``room`` and ``dest`` (either way); None if none names it."""
        keep = [o for o in obs if crossed.get(o[0]) != frozenset((room, dest))]
        ev = _last([i for i, (_, t) in enumerate(keep) if T._mentions(t, room)], 1)
        items = _block(ev, keep, rng, cfg, [], T._mentions) if ev else None
        return None if items is None else [keep[i] for i in items]

    def row(q: dict, block: list[tuple[int, str]], kind: str, answer: list[str], date: str) -> dict:
        texts = [" ".join(t.split()) for _, t in block]
        texts = [t for i, t in enumerate(texts) if t not in texts[i + 1:]]  # a repeat shows once (its latest)
        memory = [{"text": t, "time": date, "current": None, "speaker": None, "until": None} for t in texts]
        return {"role": "answer", "kind": f"tw_{q['family']}_{kind}", "input": q["ask"],
                "response": _response({**q, "answer": answer}), "ops": [], "n_ops": 0,
                "world_id": game.name, "template_ids": [f"tw.{q['family']}"], "context": [],
                "gold_facts": [], "source": "textworld", "memory": memory, "aliases": answer}

    for prev, step in zip([None, *steps], steps, strict=False):
        witness.update(step, entities)
        text = T.agent_observation(prev, step, cfg.move_notes)
        if text:
            obs.append((step.index, text))
        if not step.index or not (step.index % cfg.ask_every == 0 or step.index == last):
            continue
        date = play_cfg.time_of(step.index)[:10]  # the agent shows the date of an ISO time stamp
        cands = T.questions_at(witness, step.state, entities=entities, config=play_cfg.questions)
        for q in T._pick(cands, asked, play_cfg.questions, rng):
            kind, answer = q["kind"], list(q["answer"])
            if q["family"] == "where":  # the direct holder (the scorer also takes the rooms around it)
                answer = answer[:1]
            if q["family"] == "where" and answer and rng.random() < cfg.drop_evidence:
                entity = _where_entity(q)
                keep = [o for o in obs if not T._mentions(o[1], entity)]
                items = _block([], keep, rng, cfg, [entity], T._mentions) or []  # no evidence: never None
                block, kind, answer = [keep[i] for i in items], "missing_evidence", []
            elif q["family"] == "exit" and rng.random() < cfg.drop_exit_evidence:
                block = exit_block(q["ask"].split(" of the ", 1)[1][:-1], answer[0])
                if block is None:
                    continue
                kind, answer = "missing_evidence", []
            else:
                # an abstain row shows nothing naming its object (the witness can miss a mention, e.g. in the
                # echo of the agent's own command: "> unlock the box with the latchkey")
                ev = [] if kind == "abstain" else _evidence(q, obs, witness, T._mentions)
                if answer and not ev:
                    continue  # the evidence rule found nothing to show: no honest row
                avoid = [_where_entity(q)] if kind == "abstain" else []
                items = _block(ev, obs, rng, cfg, avoid, T._mentions)
                if items is None:
                    continue  # its evidence alone is more than a block holds
                block = [obs[i] for i in items]
            rows.append(row(q, block, kind, answer, date))
        unseen = sorted((r, d, dest) for (r, d), dest in step.state.exits.items()
                        if r in witness.room_seen and (r, d) not in witness.edges)
        if unseen and rng.random() < cfg.unseen_exits:  # the agent asks this of every exit of its room
            room, d, dest = unseen[int(rng.integers(len(unseen)))]
            block = exit_block(room, dest)
            if block is not None:
                q = {"ask": f"Which room lies {d} of the {room}?", "family": "exit", "answer": []}
                rows.append(row(q, block, "unseen", [], date))
    return rows


def build_textworld_answer(profile: str = "default", *, config: TextWorldAnswerConfig | None = None,
                           root: str | Path | None = None, cache_dir: str | Path | None = None,
                           progress: bool = True) -> Path:
    """Generate and play the training games, save their answer rows as ``data/processed/<dataset_name_tw>``.

    Rows get ids ``tw-<game>-<n>``; the last ``test_games`` games form the ``test`` split. Saving is
    skipped when the folder already holds the same rows. Returns the dataset folder.
    """
    from tqdm.auto import tqdm

    from .. import textworld as T
    from .store import save_dataset

    T.require_textworld()
    cfg = config or TextWorldAnswerConfig()
    seeds = cfg.seeds()
    if min(seeds) < TRAIN_SEED_OFFSET:
        raise ValueError(f"training games need seeds >= {TRAIN_SEED_OFFSET} (evaluation uses the small ones)")
    splits: dict[str, list[dict]] = {"train": [], "test": []}
    for i, s in enumerate(tqdm(seeds, desc="textworld answer games", disable=not progress)):
        spec = T.GameSpec(kind="custom", n_rooms=cfg.sizes[i % len(cfg.sizes)],
                          n_objects=cfg.sizes[i % len(cfg.sizes)] + 3, quest_length=2, seed=s)
        gf = T.make_game(spec, cache_dir=cache_dir)
        split = "test" if i >= cfg.n_games - cfg.test_games else "train"
        for n, r in enumerate(game_answer_rows(gf, cfg, seed=s)):
            splits[split].append({"id": f"tw-{gf.name}-{n}", **r})
    return save_dataset(splits, dataset_name_tw(profile), source="generated", seed=cfg.seed,
                        generator_version=GENERATOR_VERSION, params=asdict(cfg), root=root,
                        description="Answer-role examples in TextWorld's register: questions from the engine's "
                                    "state over observations of seeded training games (mags_lib.data.textworld).")
