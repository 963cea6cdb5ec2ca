"""The speaker-turns benchmark (mags_lib.bench.speaker_turns): rows from the generated test worlds, every form
observed with write_speaker off and on, scored by exact triplets and subject accuracy."""

from __future__ import annotations

import re

from fakes import TableBackend

from mags_lib import protocol as P
from mags_lib.backends.base import Generation
from mags_lib.bench import speaker_turns as S


class FirstNameWriter(TableBackend):
    """Writes each first-person fact of the turn with the first name the text holds (else "it") as its subject:
    the habit of a writer that does not know who speaks."""

    def __init__(self, rows):
        super().__init__({})
        self.facts = {r["plain"]: r["gold"] for r in rows}
        self.names = {r["speaker"] for r in rows} | {r["addressed"].split()[1].strip(",!") for r in rows}

    def _generate(self, prompts, *, max_new_tokens, temperature, grammar, stop, seed):
        out = []
        for prompt in prompts:
            text = prompt[-1]["content"]
            gold = next(g for plain, g in self.facts.items() if plain in text)
            names = [w for w in re.findall(r"\w+", text) if w in self.names]
            subject = names[0] if names else "it"
            reply = P.writes_to_text([(subject, rel, obj) for _, rel, obj in gold])
            out.append(Generation(reply, 1, 1, 0.0))
        return out


def test_forms_and_settings_are_scored():
    rows = S.dialogue_rows(12)
    assert len(rows) == 12 and len({r["speaker"] for r in rows}) > 1
    w = FirstNameWriter(rows)
    res = S.run(rows, progress=False, backends={r: w for r in ("ask", "write", "answer", "router")})
    f1 = {k: v["f1"] for k, v in res.items()}
    subj = {k: v["subject_accuracy"] for k, v in res.items()}
    # the introduction names the speaker first; with write_speaker the speaker's name comes first too
    assert f1["introduced"] == f1["plain, write_speaker=on"] == f1["addressed, write_speaker=on"] == 1.0
    assert subj["plain, write_speaker=on"] == subj["addressed, write_speaker=on"] == 1.0
    # without it: no name ("it": not grounded in the text, dropped), another person named in the text, or the
    # addressee -- never the speaker
    for k in ("plain, write_speaker=off", "addressed, write_speaker=off"):
        assert f1[k] == 0.0 and subj[k] == 0.0 and res[k]["n_written"] > 0
    assert res["addressed, write_speaker=off"]["n_written"] == res["addressed, write_speaker=on"]["n_written"]


class GoldWriter(TableBackend):
    """Writes the gold facts a game event states, each with the first person name its input holds (else "it")
    as the subject."""

    def __init__(self, scenarios):
        super().__init__({})
        self.facts = {}
        for sc in scenarios:
            for g in sc.gold:
                self.facts.setdefault(sc.events[g.stated].text, []).append((g.relation, g.object))
        self.names = {e.name for sc in scenarios for e in sc.entities}

    def _generate(self, prompts, *, max_new_tokens, temperature, grammar, stop, seed):
        out = []
        for prompt in prompts:
            text = prompt[-1]["content"]
            facts = next((f for said, f in self.facts.items() if text.endswith(said)), [])
            names = [n for n in self.names if n in text]
            subject = min(names, key=text.index) if names else "it"
            out.append(Generation(P.writes_to_text([(subject, r, o) for r, o in facts]), 1, 1, 0.0))
        return out


def test_game_persona_quality_scores_both_settings():
    from mags_lib.game.generate import evaluation_scenarios

    scs = [sc for sc in evaluation_scenarios("default", n_scenarios=8, examples=False)
           if sc.meta.get("family") == "persona"]
    assert scs
    w = GoldWriter(scs)
    res = S.game_persona_quality(8, backends={r: w for r in ("ask", "write", "answer", "router")}, progress=False)
    assert res["n_scenarios"] == len(scs)
    on, off = res["write_speaker=on"], res["write_speaker=off"]
    # the speaker's name first: the speaker's facts stored under the speaker (the scenarios' few facts about
    # other people, "Cherky is the pet of Chaseaproxo", get the speaker too from this writer)
    assert on["rates"]["stored_rate"] > 0.8 and on["counts"]["n_wrong_subject"] <= 0.2 * on["counts"]["n_matched"]
    # the text alone names the speaker nowhere: "it" (dropped) or another person
    assert off["rates"]["stored_rate"] < 0.5 and off["counts"]["n_gold_stored"] < on["counts"]["n_gold_stored"]


class NamedTalker(TableBackend):
    """Turns a turn into a fact about its speaker (the object: the turn's last word) only when the turn comes
    with the speaker's name ("Jon: ..."): the habit the small-talk rows measure."""

    def _generate(self, prompts, *, max_new_tokens, temperature, grammar, stop, seed):
        out = []
        for prompt in prompts:
            text = prompt[-1]["content"]
            named = re.match(r"[A-Z]\w+: ", text)
            last = re.findall(r"\w+", text)[-1]
            out.append(Generation(P.writes_to_text([("I", "feels", last)]) if named else "", 1, 1, 0.0))
        return out


def test_small_talk_rows_are_held_out_and_scored():
    from mags_lib.data.templates import CHIT_CHAT, DIALOGUE_INTROS, SMALL_TALK

    rows = S.small_talk_rows(S.dialogue_rows(12))
    assert len(rows) == 12 and all(not r["gold"] for r in rows)
    trained = set(CHIT_CHAT) | set(SMALL_TALK) | {d.split(": ", 1)[1].format(A="") for d in DIALOGUE_INTROS}
    assert not any(t in r["text"] for r in rows for t in trained if len(t) > 8)
    w = NamedTalker({})
    res = S.small_talk_quality(rows, progress=False, backends={r: w for r in ("ask", "write", "answer", "router")})
    assert res["write_speaker=off"]["turns_storing_anything"] == 0.0 and res["write_speaker=off"]["triplets"] == 0
    on = res["write_speaker=on"]
    assert on["turns_storing_anything"] == 1.0 and on["triplets"] == 12 and len(on["examples"]) == 5
    assert all(e["stored"][0][0] == e["speaker"] for e in on["examples"])  # "I" resolved to the speaker
