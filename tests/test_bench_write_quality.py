"""The write-quality benchmark (mags_lib.bench.write_quality): the game's says observed, the memory scored
against the generator's ground truth, overall and per family."""

from __future__ import annotations

from fakes import TableBackend

from mags_lib import protocol as P
from mags_lib.backends.base import Generation
from mags_lib.bench import write_quality as W


class GoldWriter(TableBackend):
    """Writes exactly the gold facts a say states (``wrong``: every fact under one made-up subject)."""

    def __init__(self, scenarios, wrong: bool = False, skip_updates: bool = False):
        super().__init__({})
        self.facts = {}
        for sc in scenarios:
            changed = {g.superseded for g in sc.gold if g.superseded is not None}
            for g in sc.gold:
                if skip_updates and g.stated in changed:
                    self.facts.setdefault(sc.events[g.stated].text, [])
                    continue
                self.facts.setdefault(sc.events[g.stated].text, []).append(
                    ("Zorblat" if wrong else g.subject, g.relation, g.object))

    def _generate(self, prompts, *, max_new_tokens, temperature, grammar, stop, seed):
        out = []
        for prompt in prompts:
            text = prompt[-1]["content"]
            facts = next((f for said, f in self.facts.items() if text.endswith(said)), [])
            out.append(Generation(P.writes_to_text(facts), 1, 1, 0.0))
        return out


def test_every_family_is_scored_and_adds_up():
    from mags_lib.game.generate import evaluation_scenarios

    scs = evaluation_scenarios("smoke", n_scenarios=4, examples=False)
    res = {}
    for wrong in (False, True):
        w = GoldWriter(scs, wrong=wrong)
        res[wrong] = W.observe_scenarios(scs, progress=False, backends={r: w for r in ("ask", "write", "answer", "router")})
    good, bad = res[False], res[True]
    assert set(good["families"]) == {sc.meta["family"] for sc in scs}
    for k, v in good["overall"]["counts"].items():
        assert v == sum(f["counts"].get(k, 0) for f in good["families"].values()), k
    c = good["overall"]["counts"]
    assert c["n_wrong_invalidations"] == len(good["wrong_invalidations"]) == 0
    assert good["missed_invalidations"] == []
    assert c["n_correct_invalidations"] == c["n_superseded"] > 0 and c["n_missed_invalidations"] == 0
    assert good["overall"]["rates"]["stored_rate"] >= 0.9 and good["overall"]["rates"]["wrong_subject_rate"] == 0.0
    assert good["triplets"] == sum(len(sc.gold) for sc in scs)
    assert bad["overall"]["rates"]["wrong_subject_rate"] == 1.0 and bad["overall"]["rates"]["stored_rate"] == 0.0


def test_missed_invalidations_are_listed_with_the_update_that_was_not_stored():
    from mags_lib.game.generate import evaluation_scenarios

    scs = evaluation_scenarios("smoke", n_scenarios=4, examples=False)
    w = GoldWriter(scs, skip_updates=True)
    res = W.observe_scenarios(scs, progress=False, backends={r: w for r in ("ask", "write", "answer", "router")})
    missed = res["missed_invalidations"]
    assert len(missed) == res["overall"]["counts"]["n_missed_invalidations"] > 0
    golds = {sc.name: sc for sc in scs}
    for m in missed:
        sc = golds[m["scenario"]]
        g = next(g for g in sc.gold if f"{g.subject} | {g.relation} | {g.object}" == m["gold"] and g.superseded)
        assert m["update"] == sc.events[g.superseded].text
        assert [g.subject, g.relation, g.object] in m["still_valid"]
        assert m["new_value"] == []  # the writer stored nothing for the change
