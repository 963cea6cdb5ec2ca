"""Bad and unusual input at the boundary of LiquidGraph and MAGS (issue 9, items 1 and 11).

Whatever the API accepts must be savable afterwards, and whatever it refuses is refused with a
clear error (a ``ValueError`` / ``TypeError`` / ``KeyError`` that names the argument), before
anything is changed. The misuse table at the end is the probe that found these gaps, kept.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math

import numpy as np
import pytest
from reliability_support import EMB, ScriptedBackend, scripted_agent

from mags_lib.agent import MAGS, MAGSConfig
from mags_lib.graph import LiquidGraph, tour
from mags_lib.graph.core import _state_differences


def graph() -> LiquidGraph:
    g = LiquidGraph(EMB)
    ep = g.add_episode("Blorps eat frozen lemons.", source="D1:1")
    g.engram([("blorps", "eat", "frozen lemons")], episode=ep)
    return g


def round_trip(g: LiquidGraph, path) -> LiquidGraph:
    g.save(path)
    h = LiquidGraph.load(path, EMB)
    assert _state_differences(g._state(), h._state()) == []
    assert h.oplog == g.oplog
    return h


# -- item 1: accepted input is always savable -------------------------------------------------------
@pytest.mark.parametrize("when,iso", [
    (dt.date(2023, 5, 8), "2023-05-08"),
    (dt.datetime(2023, 5, 8, 14, 30), "2023-05-08T14:30:00"),
    (np.datetime64("2023-05-08"), "2023-05-08"),
    ("2023-05-08", "2023-05-08"),
])
def test_dates_and_datetimes_become_iso_strings(tmp_path, when, iso):
    g = graph()
    ep = g.add_episode("Blorps moved.", source="D1:2", time=when)
    g.engram([("blorps", "live in", "trees")], episode=ep, time=when)
    assert g.node(ep)["time"] == iso
    assert g.oplog[-2]["time"] == iso and g.oplog[-1]["time"] == iso
    h = round_trip(g, tmp_path / "g")
    assert h.node(ep)["time"] == iso
    assert LiquidGraph.replay(h.oplog, EMB).equals(g)


def test_lone_surrogates_are_replaced_never_crash(tmp_path):
    g = graph()
    ep = g.add_episode("caf\udce9 au lait", source="S\ud800")
    g.engram([("caf\udce9", "serves", "lait\udfff")], episode=ep)
    g.recall("caf\udce9", k=3)
    texts = [g.node(ep)["text"]] + [f["subject"] + f["object"] for f in g.facts()] + [g.node(ep)["source"]]
    for t in texts:
        t.encode("utf-8")  # valid UTF-8 from now on
    assert g.node(ep)["text"] == "caf\ufffd au lait"
    assert g.find("caf\ufffd") is not None
    round_trip(g, tmp_path / "g")
    # a well-formed surrogate pair is one character, not two replacements
    ep2 = g.add_episode("smile \ud83d\ude00", source="S2")
    assert g.node(ep2)["text"] == "smile \U0001F600"


def test_numpy_scalars_and_node_ids(tmp_path):
    g = graph()
    ep = g.add_episode("Blorps moved.", source=np.int64(7), importance=np.float32(0.5))
    i = np.int64(int(ep[2:]))  # a node id given as a numpy int
    g.engram([("blorps", "live in", "trees")], episode=i, importance=np.float64(0.25))
    n = np.int32(g._entity_key["blorps"])
    g.set_permanent(n)
    assert g.node(n)["permanent"] is True
    res = g.recall("blorps", k=np.int64(3))
    g.reinforce(res, reward=np.float32(0.5))
    g.maintain()
    for op in g.oplog:  # the log holds plain Python values only
        json.dumps(op)
        assert all(not isinstance(v, np.generic) for v in op.values())
    assert g.oplog[2]["importance"] == 0.5 and type(g.oplog[2]["importance"]) is float
    assert g.oplog[2]["source"] == "7" and g.oplog[3]["episode"] == ep
    h = round_trip(g, tmp_path / "g")
    assert LiquidGraph.replay(h.oplog, EMB).equals(g)


def test_agent_observe_with_date_stays_savable(tmp_path):
    m = scripted_agent(["<memory_write>blorps,live in,trees</memory_write>"])
    m.observe("Blorps moved to the trees.", source="D1:3", time=dt.date(2023, 5, 8))
    m.observe("caf\udce9 blorps.", source=np.int64(4), time=dt.datetime(2023, 5, 9, 8))
    p = m.save(tmp_path / "m")
    m2 = MAGS.load(p, embedder=EMB, backends=m._role_backend)
    assert m2.graph.equals(m.graph)
    eps = [m2.graph.node(f"ep{i}") for i in np.flatnonzero(m2.graph.nodes.kind == 1)]
    assert [e["time"] for e in eps] == ["2023-05-08", "2023-05-09T08:00:00"]
    assert eps[1]["text"] == "caf\ufffd blorps." and eps[1]["source"] == "4"


# -- item 11: validation gaps -----------------------------------------------------------------------
@pytest.mark.parametrize("field,value,match", [
    ("recall_k", 2.5, "recall_k must be an integer"),
    ("recall_k", "3", "recall_k must be an integer"),
    ("recall_k", True, "recall_k must be an integer"),
    ("max_ops", 0, "max_ops must be >= 1"),
    ("n_ctx", 10, "n_ctx"),
    ("temperature", float("nan"), "temperature"),
    ("temperature", "hot", "temperature must be a number"),
    ("maintain_every", -1, "maintain_every must be >= 0"),
    ("write_nonempty", "yes", "write_nonempty must be True or False"),
])
def test_mags_config_rejects_bad_values(field, value, match):
    with pytest.raises((ValueError, TypeError), match=match):
        MAGSConfig(embedder="hash", **{field: value})


def test_mags_config_accepts_numpy_ints_as_plain_ints():
    c = MAGSConfig(embedder="hash", recall_k=np.int64(5), temperature=np.float32(0.5))
    assert type(c.recall_k) is int and type(c.temperature) is float
    json.dumps(c.to_dict())


def test_mags_config_takes_a_path_as_models_root(tmp_path):
    c = MAGSConfig(embedder="hash", models_root=tmp_path)
    assert c.models_root == str(tmp_path) and MAGSConfig.from_dict(json.loads(json.dumps(c.to_dict()))) == c


@pytest.mark.parametrize("k", ["3", None, 2.5, 0, -1, True])
def test_recall_k_must_be_a_positive_int(k):
    g = graph()
    n = len(g.oplog)
    with pytest.raises((ValueError, TypeError), match="k must be"):
        g.recall("blorps", k=k)
    assert len(g.oplog) == n
    m = scripted_agent([])
    with pytest.raises((ValueError, TypeError), match="k must be"):
        m.recall("blorps", k=k)


def test_engram_without_provenance_is_refused():
    g = LiquidGraph(EMB)
    with pytest.raises(ValueError, match="provenance"):
        g.engram([("a", "b", "c")])
    assert g.stats()["n_nodes"] == 0 and g.oplog == []
    g.engram([("a", "b", "c")], source="manual")  # a source id is provenance enough
    assert g.facts()[0]["sources"] == ["manual"]


@pytest.mark.parametrize("kw,match", [
    ({"ticks": -5}, "ticks"),
    ({"ticks": 2.5}, "ticks"),
    ({"recall_prob": float("nan")}, "recall_prob"),
    ({"recall_prob": 1.5}, "recall_prob"),
    ({"reward_prob": -0.1}, "reward_prob"),
    ({"k": 0}, "k must be"),
    ({"snapshot_every": 0}, "snapshot_every"),
])
def test_tour_run_ticks_checks_its_arguments(kw, match):
    g = tour.build_story_memory(EMB)
    args = {"ticks": 3, **kw}
    with pytest.raises((ValueError, TypeError), match=match):
        tour.run_ticks(g, **args)


def test_pipeline_choices_with_parenthesised_help():
    from mags_lib.pipeline import _help_choices

    assert _help_choices("llamacpp (needed for grammar-constrained decoding) | transformers") == [
        "llamacpp", "transformers"]
    assert _help_choices("smoke | default | full") == ["smoke", "default", "full"]
    assert _help_choices("how many items (at most 10)") is None
    assert _help_choices("results/<run_tag>/") is None


# -- the misuse probe, kept: every call fails cleanly and leaves nothing behind ---------------------
MISUSE = [
    ("add_episode", (None,), {}),  # not text
    ("add_episode", (b"bytes",), {}),
    ("add_episode", ("   ",), {}),  # blank
    ("add_episode", ("x",), {"importance": float("nan")}),
    ("add_episode", ("x",), {"importance": 2}),
    ("add_episode", ("x",), {"importance": "high"}),
    ("add_episode", ("x",), {"time": object()}),
    ("add_episode", ("x",), {"source": ["a"]}),
    ("engram", ([("a", "b")],), {"source": "s"}),
    ("engram", ([("a", None, "c")],), {"source": "s"}),
    ("engram", ([("a", b"b", "c")],), {"source": "s"}),
    ("engram", ("abc",), {"source": "s"}),
    ("engram", ([("a", "b", "c")],), {"episode": "ep999"}),
    ("engram", ([("a", "b", "c")],), {"episode": "n1"}),
    ("engram", ([("a", "b", "c")],), {"source": "s", "importance": -1}),
    ("engram", ([("a", "b", "c")],), {"source": "s", "time": 3.5j}),
    ("recall", ("",), {}),
    ("recall", ([],), {}),
    ("recall", ([1, 2],), {}),
    ("recall", ("x",), {"query_embeddings": np.zeros((2, 5))}),
    ("reinforce", (None,), {}),
    ("maintain", (), {"steps": ["nope"]}),
    ("maintain", (), {"steps": "decay"}),
    ("set_permanent", ("n999",), {}),
    ("set_permanent", (object(),), {}),
    ("rollback", ("s99",), {}),
    ("drop_snapshot", ("s99",), {}),
    ("node", ("zz",), {}),
]


@pytest.mark.parametrize("name,args,kw", MISUSE, ids=[f"{m[0]}-{i}" for i, m in enumerate(MISUSE)])
def test_misuse_fails_cleanly_and_changes_nothing(tmp_path, name, args, kw):
    g = graph()
    before, log = g._state(), list(g.oplog)
    with pytest.raises((ValueError, TypeError, KeyError)) as info:
        getattr(g, name)(*args, **kw)
    assert str(info.value), "an error must say what was wrong"
    assert _state_differences(before, g._state()) == [] and g.oplog == log
    round_trip(g, tmp_path / "g")


def test_scripted_backend_matches_generation_fields():
    from mags_lib.backends.base import Generation

    names = {f.name for f in dataclasses.fields(Generation)}
    assert {"text", "n_prompt_tokens", "n_new_tokens", "seconds"} <= names
    assert math.isfinite(ScriptedBackend(["x"]).generate([[]])[0].seconds)


# -- found by an audit of the public API (2026-12-07): accepted must mean savable, refused must say why --
LINE_BREAKERS = "\u2028\u2029\x85\x1c\x1d\x1e\x0b\x0c"  # str.splitlines() splits on each; "\n" is not among them


def test_line_separator_characters_round_trip(tmp_path):
    """``json.dumps(ensure_ascii=False)`` leaves U+2028 / U+2029 / U+0085 raw in the operation log; a reader
    that splits it with ``splitlines()`` cut such a record in two, and the save no longer loaded."""
    g = graph()
    for i, ch in enumerate(LINE_BREAKERS):
        ep = g.add_episode(f"Eve moved to Paris.{ch}She loves it.", source=f"L{i}")
        g.engram([(f"Eve{ch}", "lives in", f"Par{ch}is")], episode=ep)
    h = round_trip(g, tmp_path / "g")
    assert sum(ch in h.node(f"ep{i}")["text"] for i in np.flatnonzero(h.nodes.kind == 1) for ch in LINE_BREAKERS) \
        == len(LINE_BREAKERS)
    m = scripted_agent(["<memory_write>blorps,live in,trees</memory_write>"] * 2)
    m.observe("Blorps eat frozen lemons.")
    m.save(tmp_path / "m")
    m.observe("Eve moved to Paris.\u2028She loves it.\x85")
    m2 = MAGS.load(m.save(tmp_path / "m"), embedder=EMB, backends=m._role_backend)
    assert m2.graph.equals(m.graph)


def test_jsonl_records_keep_their_line_separators():
    from mags_lib.repro import jsonl_lines

    recs = [{"output": f"a{ch}b"} for ch in LINE_BREAKERS] + [{"output": "c"}]
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs) + "\n"
    assert [json.loads(x) for x in jsonl_lines(text)] == recs


def test_dynamics_switches_take_plain_bools_only(tmp_path):
    c = MAGSConfig(embedder="hash", dynamics={"game_of_life": np.bool_(False)})
    assert c.dynamics == {"game_of_life": False} and type(c.dynamics["game_of_life"]) is bool
    assert c.graph_config().dynamics.game_of_life is False
    json.dumps(c.to_dict())
    assert MAGSConfig(embedder="hash", dynamics=np.bool_(False)).dynamics is False
    for bad in ("false", 0, None):  # bool("false") is True: the switch would silently turn on
        with pytest.raises(TypeError, match=r"dynamics\['game_of_life'\] must be True or False"):
            MAGSConfig(embedder="hash", dynamics={"game_of_life": bad})


def test_backend_kwargs_become_plain_json_or_are_refused_by_name(tmp_path):
    c = MAGSConfig(embedder="hash", backend_kwargs={"n_batch": np.int64(256), "lora_path": tmp_path,
                                                    "rope_freq_scale": np.float32(0.5), "flash": np.bool_(True)})
    assert c.backend_kwargs == {"n_batch": 256, "lora_path": str(tmp_path), "rope_freq_scale": 0.5, "flash": True}
    assert [type(v) for v in c.backend_kwargs.values()] == [int, str, float, bool]
    assert MAGSConfig.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    for bad in (float("nan"), object(), {1, 2}):
        with pytest.raises(TypeError, match=r"backend_kwargs\['x'\].*cannot be saved"):
            MAGSConfig(embedder="hash", backend_kwargs={"x": bad})
    with pytest.raises(TypeError, match="keys must be strings"):
        MAGSConfig(embedder="hash", backend_kwargs={1: 2})


def test_graph_config_string_sets_are_cleaned_like_every_text(tmp_path):
    from mags_lib.graph import GraphConfig
    from mags_lib.graph.config import RecallConfig

    cfg = GraphConfig(recall=RecallConfig(past_markers=frozenset({"b\udce9fore", "used to"})))
    assert cfg.recall.past_markers == frozenset({"b\ufffdfore", "used to"})
    m = scripted_agent(["<memory_write>blorps,eat,lemons</memory_write>"], graph=cfg)
    m.observe("Blorps eat lemons.")
    m2 = MAGS.load(m.save(tmp_path / "m"), embedder=EMB, backends=m._role_backend)
    assert m2.config.graph.recall.past_markers == cfg.recall.past_markers


def test_load_takes_an_embedder_name_as_the_config_field(tmp_path):
    b = ScriptedBackend(["<memory_write>blorps,eat,lemons</memory_write>"])
    m = MAGS(MAGSConfig(embedder="hash-32"), backends={r: b for r in ("ask", "write", "answer", "router")})
    m.observe("Blorps eat lemons.")
    p = m.save(tmp_path / "m")
    m2 = MAGS.load(p, embedder="hash-32", backends=m._role_backend)
    assert m2.config.embedder == "hash-32" and m2.graph.equals(m.graph)
    with pytest.raises(ValueError, match="saved with 32-d embeddings"):  # the name overrides the saved field
        MAGS.load(p, embedder="hash", backends=m._role_backend)


def _consolidated_save(tmp_path):
    """An agent that stored one fact and serves a (stand-in) consolidation adapter, its adapter folder and its save."""
    ad = tmp_path / "adapter"
    ad.mkdir()
    (ad / "adapter_config.json").write_text("{}")
    m = scripted_agent(["<memory_write>blorps,eat,lemons</memory_write>"])
    m.observe("Blorps eat lemons.")
    m.set_consolidated(ad)
    return m, ad, m.save(tmp_path / "m")


def test_a_save_whose_consolidation_adapter_moved_says_how_to_load_it(tmp_path):
    m, ad, p = _consolidated_save(tmp_path)
    (ad / "adapter_config.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"names the consolidation adapter .*consolidated=None"):
        MAGS.load(p, embedder=EMB, backends=m._role_backend)
    m2 = MAGS.load(p, embedder=EMB, backends=m._role_backend, consolidated=None)
    assert m2.consolidated is None and m2.graph.equals(m.graph)
    with pytest.raises(TypeError, match="consolidated must be"):
        MAGS.load(p, embedder=EMB, backends=m._role_backend, consolidated=3)
    (ad / "adapter_config.json").write_text("{}")
    (ad / "consolidation.json").write_text("{trunc")
    with pytest.raises(ValueError, match=r"consolidation\.json is not a consolidation record"):
        MAGS.load(p, embedder=EMB, backends=m._role_backend)


def test_the_no_memory_baseline_never_answers_through_a_consolidation_adapter(tmp_path):
    """A consolidated save loaded as ``memory="none"`` served the adapter it names, so the no-memory baseline
    answered from the memory's facts in the weights; ``set_consolidated`` on a "none" agent did the same."""
    m, ad, p = _consolidated_save(tmp_path)
    assert MAGS.load(p, embedder=EMB, backends=m._role_backend).consolidated == ad  # the saved memory's own mode
    none = MAGS.load(p, embedder=EMB, backends=m._role_backend, memory="none")
    assert none.consolidated is None and none.consolidated_adapter_name() is None
    with pytest.raises(ValueError, match="memory='none' is the baseline without memory"):
        none.set_consolidated(ad)
    with pytest.raises(ValueError, match="memory='none' is the baseline without memory"):
        MAGS.load(p, embedder=EMB, backends=m._role_backend, memory="none", consolidated=ad)
    none.set_consolidated(None)  # serving the model alone is always allowed
    assert none.consolidated is None


def test_feedback_and_ask_check_their_arguments():
    import datetime as dt

    import pandas as pd

    m = scripted_agent(["<memory_write>blorps,eat,lemons</memory_write>", "", "lemons", "lemons"])
    m.observe("Blorps eat lemons.")
    recalled = m.graph.recall("blorps", k=2)  # recall touches the memory: before it is taken
    before = m.graph.stats()
    for bad in ("lemons", recalled):
        with pytest.raises(TypeError, match="feedback needs the Answer returned by ask"):
            m.feedback(bad)
    with pytest.raises(ValueError, match="recalled nothing"):
        m.feedback(m.ask("What do blorps eat?", recall=False))
    with pytest.raises(TypeError, match="recall must be True or False"):
        m.ask("What do blorps eat?", recall="no")
    with pytest.raises(TypeError, match="time must be a date"):
        m.ask("What do blorps eat?", time=123)
    with pytest.raises(ValueError, match="NaT"):
        m.observe("Blorps moved.", time=pd.NaT)
    assert m.graph.stats() == before
    assert m.ask("What do blorps eat?", time=dt.date(2023, 5, 8)).time == "2023-05-08"


def test_atomic_text_writes_are_utf8_and_leave_nothing_when_they_fail(tmp_path):
    from mags_lib.repro import atomic_write_text

    p = atomic_write_text(tmp_path / "a.json", "caf\u00e9 \u2028")
    assert p.read_bytes() == "caf\u00e9 \u2028".encode("utf-8")
    with pytest.raises(UnicodeEncodeError):
        atomic_write_text(tmp_path / "a.json", "half an emoji \ud83d")
    assert sorted(x.name for x in tmp_path.iterdir()) == ["a.json"]  # no .a.json.tmp<pid> left behind
    assert p.read_bytes() == "caf\u00e9 \u2028".encode("utf-8")  # the earlier file kept
