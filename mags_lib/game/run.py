"""Systems, the scenario runner and parallel evaluation.

**Systems are configurations.** A system is a plain dict of :class:`~mags_lib.agent.MAGSConfig`
keyword arguments (``graph`` may be a partial dict of :class:`~mags_lib.graph.GraphConfig` sections,
``{"recall": {"max_depth": 1}}``), so baselines, ablations and sweeps are data, never copies of
the pipeline. :data:`SYSTEMS` names the compared systems, :data:`ABLATIONS` switches one dynamic off
on top of a base system, and ``"field=value"`` sweeps one field (``"recall_k=5"``). A system that
cannot run (a memory mode ``MAGSConfig`` does not know yet, trained models missing) is reported as
skipped with the reason, never dropped.

**Runner.** :func:`run_scenario` feeds a scenario's events through a fresh ``MAGS``: ``say`` ->
``observe(text, source=, time=, speaker=)``, ``ask`` -> ``ask(text, time=)``, and records one row
per question (kind, correct, response, facts, memory tokens, latency, ``n_changes``, ``distance``)
and one row per turn (latency, graph size). A latency (``seconds``) is the turn's time without model
loading: every scenario starts a fresh agent whose models load on first use, inside its first say /
ask, which would otherwise put one model load per scenario into the latency tables (the loading time
is ``load_seconds`` of the scenario's result). Until ``observe`` takes ``speaker=``, a speaker is
written in front of the text (``"Lena: I live in Porto."``, the datasets' persona form).

**Parallel.** :func:`evaluate_systems` runs every (system, scenario) pair through
:class:`joblib.Parallel` (processes; ``n_jobs``). Results do not depend on the order or the
process: each pair starts from a fresh agent with the configuration's seed, and llama.cpp decodes
greedily with the configured threads (the named systems use ``n_threads=1``; parallelism comes from
the processes). The same code runs on a cluster through joblib's backend setting::

    from ray.util.joblib import register_ray            # pip install ray
    register_ray()
    with joblib.parallel_backend("ray"):
        res = evaluate_systems(["graph_base", "rag"], scenarios, n_jobs=-1)

    from dask.distributed import Client                 # pip install dask distributed
    client = Client("tcp://scheduler:8786")
    with joblib.parallel_backend("dask"):
        res = evaluate_systems(["graph_base", "rag"], scenarios, n_jobs=-1)

(or ``evaluate_systems(..., backend="ray")`` after ``register_ray()``). Every worker needs this
package and the models installed.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import inspect
import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .scenario import Scenario
from .score import is_correct

__all__ = [
    "ABLATIONS",
    "SYSTEMS",
    "GameResults",
    "ablation_systems",
    "evaluate_systems",
    "make_config",
    "profile_base",
    "resolve_systems",
    "run_scenario",
    "sweep_systems",
    "system_status",
]

SYSTEMS: dict[str, dict] = {
    "none": {"memory": "none"},  # the reader alone, same prompt, no memory
    "full_context": {"memory": "full_context"},  # as much history as fits the reader's window
    "rag": {"memory": "rag"},  # static RAG: top-k raw observations by embedding, never updated
    "graph_base": {},  # MAGS: the Liquid Knowledge Graph, embedded base models
    "graph_trained": {"models": "trained"},  # MAGS with the trained ask/write models
    # the baselines read by the trained answer model: graph_trained reads with it, so comparing graph_trained
    # with rag / full_context (base reader) mixes a better memory with a better reader; these isolate the memory
    "rag_trained": {"memory": "rag", "models": "trained"},
    "full_context_trained": {"memory": "full_context", "models": "trained"},
    "none_trained": {"memory": "none", "models": "trained"},  # the trained reader alone: graph_trained's "no memory"
}
"""Named systems compared by the game (plain ``MAGSConfig`` keyword dicts)."""

ABLATIONS: dict[str, dict] = {
    "no_hebbian": {"dynamics": {"hebbian": False}},
    "no_decay": {"dynamics": {"decay": False}},
    "no_pruning": {"dynamics": {"prune": False}},
    "no_solidification": {"dynamics": {"solidify": False}},
    "no_kcore": {"dynamics": {"kcore": False}},
    "no_scc": {"dynamics": {"scc": False}},
    "no_game_of_life": {"dynamics": {"game_of_life": False}},
    "no_promotion": {"dynamics": {"promote": False}},
    "no_dynamics": {"dynamics": False},  # no maintain() tick at all
    "no_reconciliation": {"graph": {"engram": {"reconcile": False}}},  # every object stays valid
    "no_coverage_anchors": {"graph": {"recall": {"coverage_weight": 0.0}}},  # pure similarity anchors
    # traversal off: the anchors' own edges only (a fact is an edge: the least recall can read), no walk
    "no_traversal": {"graph": {"recall": {"max_depth": 1}}},
    # episodic block off: episodes are neither linked to their facts nor recalled
    "no_episodic_block": {"graph": {"recall": {"include_episodes": False}, "engram": {"link_episodes": False}}},
}
"""One dynamic (or recall / engram mechanism) off, applied on top of a base system."""


def _merge(a: Mapping, b: Mapping) -> dict:
    """Deep merge of two config dicts (``b`` wins; nested dicts merge)."""
    out = copy.deepcopy(dict(a))
    for k, v in b.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def ablation_systems(base: str = "graph_base", names: Iterable[str] | None = None) -> dict[str, dict]:
    """``{base: spec, ablation: base spec + switch, ...}`` for :data:`ABLATIONS` (or ``names``)."""
    names = list(ABLATIONS) if names is None else list(names)
    bad = [n for n in names if n not in ABLATIONS]
    if bad:
        raise ValueError(f"unknown ablations {bad}; known: {sorted(ABLATIONS)}")
    out = {base: SYSTEMS[base]}
    out.update({n: _merge(SYSTEMS[base], ABLATIONS[n]) for n in names})
    return out


def sweep_systems(name: str, values: Iterable[Any], base: str = "graph_base") -> dict[str, dict]:
    """One system per value of a ``MAGSConfig`` field: ``{"recall_k=5": {..., "recall_k": 5}, ...}``."""
    return {f"{name}={v}": _merge(SYSTEMS[base], {name: v}) for v in values}


def resolve_systems(spec: str | Iterable[str] | Mapping[str, Mapping], base: str = "graph_base") -> dict[str, dict]:
    """Named systems from a ``|``-separated string, a list of names, or a ``{name: spec}`` dict.

    A name is a key of :data:`SYSTEMS`, of :data:`ABLATIONS` (on top of ``base``) or
    ``field=value`` (on top of ``base``; the value is a Python literal).

    >>> sorted(resolve_systems("none|graph_base|no_decay|recall_k=5"))
    ['graph_base', 'no_decay', 'none', 'recall_k=5']
    >>> resolve_systems("recall_k=5")["recall_k=5"]
    {'recall_k': 5}
    """
    if isinstance(spec, Mapping):
        return {str(k): dict(v) for k, v in spec.items()}
    names = [s.strip() for s in spec.split("|")] if isinstance(spec, str) else [str(s).strip() for s in spec]
    names = [n for n in names if n]
    if not names:
        raise ValueError("no systems given: name some of " + ", ".join(list(SYSTEMS) + list(ABLATIONS)))
    out = {}
    for n in names:
        if n in SYSTEMS:
            out[n] = copy.deepcopy(SYSTEMS[n])
        elif n in ABLATIONS:
            out[n] = _merge(SYSTEMS[base], ABLATIONS[n])
        elif "=" in n:
            k, v = n.split("=", 1)
            try:
                val = ast.literal_eval(v.strip())
            except (ValueError, SyntaxError):
                val = v.strip()
            out[n] = _merge(SYSTEMS[base], {k.strip(): val})
        else:
            raise ValueError(f"unknown system {n!r}: use one of {sorted(SYSTEMS)}, an ablation "
                             f"{sorted(ABLATIONS)} or field=value")
    return out


def make_config(spec: Mapping, base: Mapping | None = None):
    """The :class:`~mags_lib.agent.MAGSConfig` of a system spec merged over ``base`` (shared settings).

    Raises ``ValueError`` / ``TypeError`` for an unknown field or a bad value.
    """
    from ..agent import MAGSConfig

    return MAGSConfig.from_dict(_merge(base or {}, spec))


def system_status(spec: Mapping, base: Mapping | None = None) -> str | None:
    """None when the system can run here, else the reason it cannot (models are checked, not loaded)."""
    from ..agent import MAGS
    from ..embed import HashEmbedder

    try:
        cfg = make_config(spec, base)
    except (ValueError, TypeError) as e:
        msg = str(e)
        if "memory" in msg and "unknown MAGSConfig keys" in msg:
            return "memory modes are not in MAGSConfig yet (issue 12, second part): " + msg.split(";")[0]
        return f"invalid configuration: {msg}"
    try:
        MAGS(cfg, embedder=HashEmbedder(dim=16)).close()
    except FileNotFoundError as e:  # ModelNotFoundError: says what to train or install
        return f"models missing: {e}"
    return None


# ------------------------------------------------------------------------------------ the runner
def _safe(name: str) -> str:
    """A folder name for a system or scenario name (``recall_k=5`` stays readable)."""
    return "".join(c if c.isalnum() or c in "-_=." else "_" for c in name) or "_"


def profile_base(profile: str = "default", **overrides: Any) -> dict:
    """Settings shared by every system of a game run (1 llama.cpp thread per process; smoke: short outputs).

    >>> profile_base("smoke")["max_new_tokens_write"]
    48
    """
    base: dict[str, Any] = {"n_threads": 1}
    if profile == "smoke":
        base.update(max_new_tokens_write=48, max_new_tokens_ask=24, max_new_tokens_answer=16)
    elif profile not in ("default", "full"):
        raise ValueError(f"unknown profile {profile!r}: smoke | default | full")
    base.update(overrides)
    return base


def _graph_stats(m) -> dict:
    g = getattr(m, "graph", None)
    if g is None:
        return {}
    s = g.stats()
    return {k: s[k] for k in ("n_nodes", "n_entities", "n_episodes", "n_facts", "n_invalidated", "n_valid_edges")}


def run_scenario(system: Mapping | str, scenario: Scenario, *, base: Mapping | None = None,
                 name: str | None = None, quality: bool = True, progress: bool = False,
                 save_dir: str | Path | None = None, return_agent: bool = False) -> dict:
    """Run one scenario through a fresh ``MAGS`` of ``system`` and record everything.

    Parameters
    ----------
    system : dict or str
        ``MAGSConfig`` keyword dict, or a name for :func:`resolve_systems`.
    scenario : Scenario
    base : dict, optional
        Settings shared by every system (embedder, threads, answer length), under ``system``'s.
    name : str, optional
        The system's name in the records.
    quality : bool
        Compute :func:`~mags_lib.game.quality.operation_quality` when the scenario has ground truth
        and the system has a graph memory.
    save_dir : path, optional
        Save the final memory there (``MAGS.save``: reload it with ``MAGS.load`` for pictures).
    return_agent : bool
        Also return the agent (key ``"agent"``; not closed, not picklable).

    Returns
    -------
    dict
        ``system``, ``scenario``, ``asks`` (one dict per question), ``turns`` (one per event),
        ``quality`` (dict or None), ``seconds`` (wall time, all of it), ``load_seconds`` (model loading
        during the turns, left out of every turn's ``seconds``).
    """
    from tqdm.auto import tqdm

    from ..agent import MAGS

    if isinstance(system, str):
        name = name or system
        system = resolve_systems(system)[system]
    name = name or json.dumps(system, sort_keys=True)
    cfg = make_config(system, base)
    t_start = time.perf_counter()
    m = MAGS(cfg)
    takes_speaker = "speaker" in inspect.signature(m.observe).parameters
    family = scenario.meta.get("family", "file")
    asks, turns = [], []
    loading = [0.0]  # seconds spent in MAGS.backend (loads a role's model on first use), left out of latencies
    backend = m.backend

    def timed_backend(role):
        t = time.perf_counter()
        try:
            return backend(role)
        finally:
            loading[0] += time.perf_counter() - t

    m.backend = timed_backend
    memory = getattr(cfg, "memory", "graph")
    scored = quality and scenario.gold and memory == "graph" and getattr(m, "graph", None) is not None
    removals = m.graph.record_removed_facts() if scored else contextlib.nullcontext([])
    try:
        with removals as removed:  # what maintenance prunes during the scenario is scored too
            for i, ev in enumerate(tqdm(scenario.events, desc=f"{name}/{scenario.name}", disable=not progress,
                                        leave=False)):
                t0 = time.perf_counter()
                load0 = loading[0]
                if ev.type == "say":
                    text, kw = ev.text, {"source": ev.source or f"{scenario.name}:{i}", "time": ev.time}
                    if ev.speaker:
                        if takes_speaker:
                            kw["speaker"] = ev.speaker
                        else:
                            text = f"{ev.speaker}: {text}"
                    m.observe(text, **kw)
                    mem_tokens = None
                else:
                    ans = m.ask(ev.text, time=ev.time)
                    mem_tokens = int(ans.memory_tokens)
                    asks.append({"system": name, "scenario": scenario.name, "family": family, "event": i,
                                 "kind": ev.kind, "question": ev.text, "answer": list(ev.answer),
                                 "response": ans.answer,
                                 "correct": bool(is_correct(ans.answer, ev.answer, ev.kind)),
                                 "facts": list(ans.facts), "n_facts": len(ans.facts), "memory_tokens": mem_tokens,
                                 "seconds": time.perf_counter() - t0 - (loading[0] - load0),
                                 "n_changes": ev.n_changes, "distance": ev.distance})
                turns.append({"system": name, "scenario": scenario.name, "event": i, "type": ev.type,
                              "seconds": time.perf_counter() - t0 - (loading[0] - load0),
                              "memory_tokens": mem_tokens, **_graph_stats(m)})
        q = None
        if scored:
            from .quality import operation_quality

            q = {"system": name, "scenario": scenario.name, "family": family,
                 **operation_quality(m.graph, scenario, removed=removed)}
        if save_dir is not None:
            m.save(save_dir)
    except BaseException:
        m.close()
        raise
    del m.backend  # the agent's own method again
    out = {"system": name, "scenario": scenario.name, "asks": asks, "turns": turns, "quality": q,
           "seconds": time.perf_counter() - t_start, "load_seconds": loading[0]}
    if return_agent:
        out["agent"] = m
    else:
        m.close()
    return out


def _task(name: str, spec: dict, scenario: Scenario, base: dict | None, quality: bool,
          save_dir: str | None) -> dict:
    try:
        return run_scenario(spec, scenario, base=base, name=name, quality=quality, save_dir=save_dir)
    except Exception as e:  # noqa: BLE001 -- recorded and reported: one crashed pair must not hide the others
        return {"system": name, "scenario": scenario.name, "asks": [], "turns": [], "quality": None,
                "seconds": 0.0, "error": f"{type(e).__name__}: {e}"}


def _scenario_task(names_specs: list[tuple[str, dict]], scenario: Scenario, base: dict | None, quality: bool,
                   save_dirs: list[str | None]) -> list[dict]:
    """Every system on one scenario, in this process, greedy generations shared through one memo."""
    from ..backends import generation_memo

    with generation_memo() as memo:
        out = [_task(n, spec, scenario, base, quality, d) for (n, spec), d in zip(names_specs, save_dirs)]
    for r in out:
        r["memo"] = memo.stats()
    return out


@dataclass
class GameResults:
    """Everything :func:`evaluate_systems` measured, as tables.

    ``asks``: one row per question; ``turns``: one row per event; ``quality``: one row per
    (system, scenario) with ground truth; ``skipped``: system -> reason it could not run;
    ``errors``: (system, scenario, error) of pairs that crashed.
    """

    asks: Any
    turns: Any
    quality: Any
    systems: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)
    errors: list = field(default_factory=list)
    generation_memo: dict | None = None  # share_generations: model calls answered from the memo, and made

    def save(self, out_dir: str | Path) -> Path:
        """``asks.csv``, ``turns.csv``, ``quality.csv`` and ``systems.json`` (specs, skipped, errors)."""
        from ..repro import atomic_write_text

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        for label, df in (("asks", self.asks), ("turns", self.turns), ("quality", self.quality)):
            atomic_write_text(out / f"{label}.csv", df.to_csv(index=False))
        atomic_write_text(out / "systems.json", json.dumps(
            {"systems": self.systems, "skipped": self.skipped, "errors": self.errors,
             "generation_memo": self.generation_memo}, indent=1, default=str) + "\n")
        return out


def evaluate_systems(systems: str | Iterable[str] | Mapping[str, Mapping], scenarios: Iterable[Scenario], *,
                     base: Mapping | None = None, n_jobs: int = 1, backend: str | None = None,
                     quality: bool = True, save_memories: str | Path | None = None,
                     progress: bool = True, share_generations: bool = False) -> GameResults:
    """Run every system on every scenario, in parallel over processes (joblib).

    Parameters
    ----------
    systems : str, list or dict
        See :func:`resolve_systems` (``"none|rag|graph_base"``).
    scenarios : iterable of Scenario
    base : dict, optional
        Settings shared by all systems (e.g. ``{"embedder": "hash", "n_threads": 1}``).
    n_jobs : int
        Worker processes (1: in this process; -1: every core).
    backend : str, optional
        joblib backend (default: joblib's, ``"loky"`` processes, or the one set with
        ``joblib.parallel_backend``: ``"ray"``, ``"dask"``...).
    quality : bool
        Operation quality of graph systems on scenarios with ground truth.
    save_memories : path, optional
        Save each final memory to ``<save_memories>/<system>/<scenario>/`` (``MAGS.load`` reads it).
    progress : bool
        A tqdm bar over (system, scenario) pairs.
    share_generations : bool
        One task per scenario instead of per pair: its systems run one after another in one process
        inside a :func:`~mags_lib.backends.generation_memo`, so a greedy call one system already made
        (the write model on the same observation, the ask model on the same question, the reader on
        the same recalled memory) is not made again. For sweeps and ablations of the same models:
        the texts are those of the first call, the ``seconds`` of a remembered call are 0 (latencies
        under a shared memo are not the model's), and fewer tasks run in parallel.

    Returns
    -------
    GameResults
        Identical tables (timings aside) for any ``n_jobs`` and backend.
    """
    import pandas as pd
    from joblib import Parallel, delayed
    from tqdm.auto import tqdm

    specs = resolve_systems(systems)
    scenarios = list(scenarios)
    names = [s.name for s in scenarios]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:  # results are matched, clustered, paired and saved by scenario name: two would silently merge
        raise ValueError(f"scenarios need distinct names (results are matched, bootstrapped and saved by system "
                         f"and scenario name); rename the duplicates {dup} (e.g. scenarios generated with "
                         "different seeds share the names <family>_<index>)")
    if save_memories is not None:  # two names one folder: the second memory replaced the first, silently
        for label, group in (("scenario", names), ("system", list(specs))):
            folders: dict[str, list[str]] = {}
            for n in group:
                folders.setdefault(_safe(n), []).append(n)
            clash = [v for v in folders.values() if len(v) > 1] + [[n] for n in group if _safe(n) in (".", "..")]
            if clash:
                raise ValueError(f"save_memories: the {label} names {clash} give one folder name each group "
                                 f"({', '.join(sorted({_safe(v[0]) for v in clash}))}) or none a folder may have; "
                                 "rename them")
    base = dict(base or {})
    skipped = {}
    for name, spec in specs.items():
        reason = system_status(spec, base)
        if reason:
            skipped[name] = reason
            print(f"[game] skipped {name}: {reason}")
    runnable = [n for n in specs if n not in skipped]
    tasks = [(n, s) for n in runnable for s in scenarios]
    results = []
    memo_stats = None

    def where(n, s):
        return None if save_memories is None else str(Path(save_memories) / _safe(n) / _safe(s.name))

    if tasks and share_generations:
        par = Parallel(n_jobs=n_jobs, backend=backend, return_as="generator")
        gen = par(delayed(_scenario_task)([(n, specs[n]) for n in runnable], s, base, quality,
                                          [where(n, s) for n in runnable]) for s in scenarios)
        done: dict[tuple[str, str], dict] = {}
        memo_stats = {"hits": 0, "misses": 0}
        with tqdm(total=len(tasks), desc="game", disable=not progress) as bar:
            for group in gen:
                for r in group:
                    done[(r["system"], r["scenario"])] = r
                memo_stats["hits"] += group[0]["memo"]["hits"]
                memo_stats["misses"] += group[0]["memo"]["misses"]
                bar.update(len(group))
        results = [done[(n, s.name)] for n, s in tasks]  # the order of the unshared run
        calls = memo_stats["hits"] + memo_stats["misses"]
        memo_stats["hit_rate"] = memo_stats["hits"] / calls if calls else 0.0
        print(f"[game] shared generations: {memo_stats['hits']} of {calls} model calls answered from the memo "
              f"({memo_stats['hit_rate']:.0%})")
    elif tasks:
        par = Parallel(n_jobs=n_jobs, backend=backend, return_as="generator")
        gen = par(delayed(_task)(n, specs[n], s, base, quality, where(n, s)) for n, s in tasks)
        results = list(tqdm(gen, total=len(tasks), desc="game", disable=not progress))
    errors = [(r["system"], r["scenario"], r["error"]) for r in results if r.get("error")]
    for e in errors:
        print(f"[game] {e[0]} on {e[1]} failed: {e[2]}")
    asks = pd.DataFrame([a for r in results for a in r["asks"]],
                        columns=["system", "scenario", "family", "event", "kind", "question", "answer", "response",
                                 "correct", "facts", "n_facts", "memory_tokens", "seconds", "n_changes", "distance"])
    turns = pd.DataFrame([t for r in results for t in r["turns"]])
    quality_df = pd.DataFrame([r["quality"] for r in results if r.get("quality")])
    return GameResults(asks=asks, turns=turns, quality=quality_df, systems=specs, skipped=skipped, errors=errors,
                       generation_memo=memo_stats)
