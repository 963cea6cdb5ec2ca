"""Update semantics (issue 12, the rest): validity intervals in real time.

Each test failed on the code before its change; the mutation named in its docstring (break the
code that way, the test fails) is what it guards against."""

from __future__ import annotations

import hashlib
import json

from mags_lib.embed import HashEmbedder
from mags_lib.graph import LiquidGraph, persistence
from mags_lib.graph.atomic import json_checksum

EMB = HashEmbedder(dim=64)


def say(g, triplets, time, source):
    ep = g.add_episode(" ".join(" ".join(t) for t in triplets) + ".", source=source, time=time)
    g.engram(triplets, episode=ep)
    return ep


def interval(g, subject, relation):
    return [(h["object"], h["valid"], h["valid_from"], h["valid_to"]) for h in g.history(subject, relation)]


# -- 1. validity intervals in time ---------------------------------------------------------------------
def test_validity_interval_is_in_observation_time_and_ticks_only_without_one():
    """Mutations: ``_add_edge`` drops ``time`` (interval starts unset: ticks shown); ``supersede``
    drops ``time`` (the old fact's interval never closes in time); ``_first_said_after`` returns None
    (history read late stays open-ended); reinforcement keeps the first ``valid_from_time``."""
    g = LiquidGraph(EMB)
    g.maintain()
    g.maintain()  # tick 2: ticks and times differ
    say(g, [("Caroline", "lives in", "Denver")], "2023-04-01", "D1:1")
    say(g, [("Caroline", "lives in", "Boston")], "2023-05-08T13:56", "D2:1")
    assert interval(g, "Caroline", "lives in") == [("Denver", False, "2023-04-01", "2023-05-08T13:56"),
                                                   ("Boston", True, "2023-05-08T13:56", None)]
    # an older statement read later: history, true from when it was said until the next statement
    say(g, [("Caroline", "lives in", "Austin")], "2023-04-20", "D1:5")
    assert interval(g, "Caroline", "lives in")[2] == ("Austin", False, "2023-04-20", "2023-05-08T13:56")
    # the current fact said again, earlier than memory knew: it has held since then
    say(g, [("Caroline", "lives in", "Boston")], "2023-05-01", "D1:9")
    assert interval(g, "Caroline", "lives in")[1][2] == "2023-05-01"
    # a time given to engram itself (no episode) counts the same
    g.engram([("blorps", "eat", "moss")], source="S1", time="2022-01-02")
    g.engram([("blorps", "eat", "figs")], source="S2", time="2022-03-04")
    assert interval(g, "blorps", "eat") == [("moss", False, "2022-01-02", "2022-03-04"), ("figs", True, "2022-03-04", None)]
    # no time anywhere: the interval falls back to ticks
    g.engram([("ommar", "is", "referee")], source="S3")
    g.maintain()
    g.engram([("ommar", "is", "player")], source="S4")
    assert interval(g, "ommar", "is") == [("referee", False, 2, 3), ("player", True, 3, None)]
    assert g.edge(g.history("Caroline", "lives in")[0]["id"])["valid_from_tick"] == 2


def _without_interval_columns(files: dict) -> dict:
    """The files of a save as written before the interval columns existed (resealed)."""
    files = dict(files)
    body = json.loads(files["graph.json"])
    for col in ("valid_from_time", "valid_to_time"):
        del body["edges"][col]
    files["graph.json"] = json.dumps(body).encode()
    m = json.loads(files["manifest.json"])
    m.pop("checksum")
    m["files"]["graph.json"] = {"sha256": hashlib.sha256(files["graph.json"]).hexdigest(),
                                "bytes": len(files["graph.json"])}
    m["checksum"] = json_checksum(m)
    files["manifest.json"] = json.dumps(m).encode()
    return files


def test_intervals_are_saved_and_replayed_and_old_saves_load(tmp_path):
    """Mutations: the save leaves the interval columns out (loaded graph differs); the loader refuses
    a save without them (old saves stop loading)."""
    g = LiquidGraph(EMB)
    say(g, [("Caroline", "lives in", "Denver")], "2023-04-01", "D1:1")
    say(g, [("Caroline", "lives in", "Boston")], "2023-05-08", "D2:1")
    h = LiquidGraph.load(g.save(tmp_path / "mem"), EMB)
    assert h.equals(g) and g.replayed().equals(g)
    assert interval(h, "Caroline", "lives in") == interval(g, "Caroline", "lives in")
    old = persistence.graph_from_files(_without_interval_columns(persistence.graph_to_files(g)), EMB)
    assert interval(old, "Caroline", "lives in") == [("Denver", False, 0, 0), ("Boston", True, 0, None)]
    say(old, [("Caroline", "lives in", "Paris")], "2023-06-01", "D3:1")  # and it goes on in time
    assert interval(old, "Caroline", "lives in")[1][3] == "2023-06-01"
