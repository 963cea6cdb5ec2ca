"""Pictures of the Liquid Knowledge Graph: offline pyvis HTML, matplotlib figures, an ipywidgets explorer.

* :func:`to_html` -- interactive vis-network page built with pyvis, the vis-network JavaScript and
  CSS inlined and everything pyvis links removed (Bootstrap from a CDN, a commented-out local
  stylesheet): the page links nothing (:func:`linked_resources`), so it works offline and inside a
  notebook (:func:`show` wraps it in an ``iframe srcdoc``);
* :func:`draw` -- the same picture with matplotlib (for reports);
* :func:`plot_strengths`, :func:`plot_curve`, :func:`draw_kcore_shells` -- figures of the
  dynamics notebook;
* :func:`explorer` -- sliders for decay, strengthening, forgetting threshold and capacity that
  re-run the dynamics on a copy of the memory and redraw it.

Colours: episodic block blue, semantic working memory orange, semantic long-term green; permanent
nodes get a dark border; a recall trace paints anchors gold, the paths to the returned items red
(width by the path weight) and the other explored edges pale red; the rest fades.
"""

from __future__ import annotations

import html as _html
import re
from dataclasses import replace
from pathlib import Path

import networkx as nx
import numpy as np

from .model import Recall, RecallTrace
from .store import EDGE_ASSOC, EDGE_FACT, EDGE_MENTION, KIND_EPISODE, STAGE_LONG

__all__ = [
    "COLORS",
    "draw",
    "draw_kcore_shells",
    "draw_recall_subgraph",
    "explorer",
    "linked_resources",
    "plot_curve",
    "plot_strengths",
    "save_html",
    "select_nodes",
    "show",
    "text_overlaps",
    "to_html",
    "to_pyvis",
]

COLORS = {
    "episodic": "#5b9bd5",
    "working": "#f4a259",
    "long_term": "#6ab187",
    "permanent_border": "#3b1f2b",
    "anchor": "#ffd700",
    "trace_edge": "#d62728",
    "explored_edge": "#f3b3b3",
    "edge": "#9aa5b1",
    "invalid": "#c8c8c8",
    "faded": "#e6e6e6",
}

_CODE_BLOCK = re.compile(r"<(script|style)\b[^>]*>.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_OPEN_TAG = re.compile(r"<(?:script|style)\b[^>]*>", re.IGNORECASE)
_ATTRIBUTE = re.compile(r"""\b(?:src|href)\s*=\s*["']?([^"'\s>]*)""", re.IGNORECASE)
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)


def _markup_and_code(page: str) -> list[tuple[bool, str]]:
    """The page cut into markup (``False``) and ``<script>``/``<style>`` blocks (``True``)."""
    parts, pos = [], 0
    for m in _CODE_BLOCK.finditer(page):
        parts += [(False, page[pos:m.start()]), (True, m.group(0))]
        pos = m.end()
    return parts + [(False, page[pos:])]


def linked_resources(page: str) -> list[str]:
    """Every ``src``/``href`` of a page's markup, comments included: what it would (or, once a comment
    is lifted, could) load from elsewhere. The code of inline scripts and styles is not markup.

    An empty list means the page is self-contained: it works offline and inside a notebook.

    Examples
    --------
    >>> linked_resources('<p>x</p><script>var a = "<img src=y>";</script>')
    []
    >>> linked_resources('<link href="https://cdn.example/b.css"><!-- <script src="v.js"></script> -->')
    ['https://cdn.example/b.css', 'v.js']
    """
    found = []
    for is_code, text in _markup_and_code(page):
        markup = _OPEN_TAG.match(text).group(0) if is_code else text
        found += _ATTRIBUTE.findall(markup)
    return found


def _inline_only(page: str) -> str:
    """pyvis's page without what it links: its Bootstrap stylesheet and script (from a CDN), and a
    comment holding a stylesheet and script of a local ``node_modules``. Everything the picture needs
    (vis-network's code and style) is inlined already."""
    out = []
    for is_code, text in _markup_and_code(page):
        if is_code:
            out.append("" if _ATTRIBUTE.search(_OPEN_TAG.match(text).group(0)) else text)
        else:
            text = _COMMENT.sub(lambda m: "" if _ATTRIBUTE.search(m.group(0)) else m.group(0), text)
            out.append(re.sub(r"<link\b[^>]*>", "", text, flags=re.IGNORECASE))
    return "".join(out)


def _trace_of(trace) -> RecallTrace | None:
    if trace is None:
        return None
    if isinstance(trace, Recall):
        return trace.trace
    if isinstance(trace, RecallTrace):
        return trace
    raise TypeError(f"trace must be a Recall or RecallTrace, got {type(trace).__name__}")


def _layout_seed(g, seed: int | None) -> int:
    """The layout seed: ``seed``, else the graph's, else 0 (never the global random state: the same memory
    draws the same picture every time)."""
    return int(seed) if seed is not None else (g.seed if g.seed is not None else 0)


def _live_row(g, node_id: str) -> int | None:
    """Row of a node a recall trace names, or None when it has left the memory since (pruned, merged)."""
    try:
        return g._idx(node_id)
    except KeyError:
        return None


def select_nodes(g, trace=None, max_nodes: int = 150) -> list[int]:
    """Node rows to draw: the trace's nodes (and their neighbours) first, then the most connected."""
    tr = _trace_of(trace)
    nd = g.nodes
    chosen: list[int] = []
    seen = set()

    def add(i):
        if i not in seen and nd.alive[i] and len(chosen) < max_nodes:
            seen.add(i)
            chosen.append(i)

    if tr is not None:
        for nid in sorted(tr.node_weights, key=lambda x: -tr.node_weights[x]):
            i = _live_row(g, nid)
            if i is not None:  # a node pruned or merged away since the recall is not drawn
                add(i)
        for i in chosen:
            for v in list(g.G._succ[i]) + list(g.G._pred[i]):
                add(v)
    alive = np.flatnonzero(nd.alive)
    if len(chosen) < max_nodes and alive.size:
        ed = g.edges
        live = np.flatnonzero(ed.alive & ed.valid)
        deg = (np.bincount(ed.src[live], minlength=nd.n) + np.bincount(ed.dst[live], minlength=nd.n))[alive]
        order = np.lexsort((alive, -nd.importance[alive], -deg))
        for i in alive[order].tolist():
            if len(chosen) >= max_nodes:
                break
            add(i)
    return chosen


def _node_style(g, i: int) -> tuple[str, str]:
    nd = g.nodes
    if nd.kind[i] == KIND_EPISODE:
        block = "episodic"
    else:
        block = "long_term" if nd.stage[i] == STAGE_LONG else "working"
    return COLORS[block], block


def _short(text: str, n: int = 28) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def to_pyvis(g, trace=None, *, max_nodes: int = 150, include_invalid: bool = False, height: str = "560px",
             physics: bool = True, seed: int | None = None):
    """Build a ``pyvis.network.Network`` of the memory (or the part around a recall trace).

    Parameters
    ----------
    g : LiquidGraph
    trace : Recall or RecallTrace, optional
        Highlight its anchors and traversed edges.
    max_nodes : int
        Nodes drawn at most (trace nodes first).
    include_invalid : bool
        Also draw superseded facts (dashed, grey).
    height : str
        CSS height of the canvas.
    physics : bool
        Let vis-network lay the graph out; otherwise a seeded spring layout fixes positions.
    seed : int, optional
        Layout seed (default ``g.seed``, else 0): the spring layout's without physics, vis-network's
        initial positions with it, so the same memory draws the same picture each time it is opened.
    """
    from pyvis.network import Network

    tr = _trace_of(trace)
    nodes = select_nodes(g, tr, max_nodes)
    keep = set(nodes)
    anchors = set(tr.anchor_ids) if tr else set()
    tw = tr.edge_weights if tr else {}
    on_path = {e for p in tr.paths for e in p.edges} if tr else set()
    net = Network(height=height, width="100%", directed=True, cdn_resources="in_line", notebook=False)
    layout_seed = _layout_seed(g, seed)
    pos = None
    if not physics:
        pos = nx.spring_layout(g.G.subgraph(nodes), seed=layout_seed)
    nd, ed = g.nodes, g.edges
    for i in nodes:
        color, block = _node_style(g, i)
        nid = g.node_id(i)
        if tr is not None and nid not in tr.node_weights:
            color = COLORS["faded"]
        border = COLORS["permanent_border"] if nd.permanent[i] else color
        if nid in anchors:
            color = border = COLORS["anchor"]
        title = (f"{nid} [{block}{', permanent' if nd.permanent[i] else ''}]\n{nd.text[i]}\n"
                 f"importance {nd.importance[i]:.2f}, surprise {nd.surprise[i]:.2f}, accesses {nd.access[i]}")
        kw = {}
        if pos is not None:
            x, y = pos[i]
            kw = {"x": float(x) * 400, "y": float(y) * 400, "physics": False}
        net.add_node(nid, label=_short(nd.text[i]), title=title,
                     color={"background": color, "border": border},
                     borderWidth=3 if (nd.permanent[i] or nid in anchors) else 1,
                     shape="box" if nd.kind[i] == KIND_EPISODE else "dot",
                     size=12 + 14 * float(nd.importance[i]) + (8 if nid in anchors else 0), **kw)
    mask = ed.alive if include_invalid else (ed.alive & ed.valid)
    cand = np.flatnonzero(mask)
    inside = np.fromiter((int(ed.src[e]) in keep and int(ed.dst[e]) in keep for e in cand.tolist()), dtype=bool,
                         count=cand.size)
    for e in cand[inside].tolist():
        s, o = int(ed.src[e]), int(ed.dst[e])
        eid = int(ed.uid[e])  # traces name edges by id
        rel = g._rel_text[ed.rel[e]]
        st = float(ed.strength[e])
        color = COLORS["edge"]
        width = 1 + 6 * st
        dashes = False
        if not ed.valid[e]:
            color, dashes, width = COLORS["invalid"], True, 1
        elif eid in on_path:
            color, width = COLORS["trace_edge"], 2 + 8 * tw.get(eid, 0.5)
        elif eid in tw:
            color, width = COLORS["explored_edge"], 1 + 2 * tw[eid]
        elif tr is not None:
            color = COLORS["faded"]
        label = rel if ed.kind[e] == EDGE_FACT else ""
        title = (f"edge {eid}: {nd.text[s]} —{rel}→ {nd.text[o]}\nstrength {st:.3f}, confidence "
                 f"{ed.confidence[e]:.2f}{', permanent' if ed.permanent[e] else ''}"
                 f"{'' if ed.valid[e] else ', SUPERSEDED'}\nsources {', '.join(ed.sources[e]) or '-'}")
        net.add_edge(g.node_id(s), g.node_id(o), label=label, title=title, width=width,
                     color=color, dashes=dashes or bool(ed.kind[e] == EDGE_ASSOC and ed.valid[e]),
                     font={"size": 10, "align": "middle"})
    net.set_options('{"physics": {"enabled": %s, "stabilization": {"iterations": 150}},'
                    ' "layout": {"randomSeed": %d},'
                    ' "interaction": {"hover": true}, "edges": {"arrows": {"to": {"scaleFactor": 0.5}}}}'
                    % ("true" if physics else "false", int(layout_seed)))
    return net


def to_html(g, trace=None, *, title: str | None = None, **kw) -> str:
    """Self-contained offline HTML page: vis-network's code and style inlined, nothing linked.

    Keyword arguments go to :func:`to_pyvis`.
    """
    net = to_pyvis(g, trace, **kw)
    page = _inline_only(net.generate_html(notebook=False))
    if title:
        page = page.replace("<h1></h1>", f"<h3>{_html.escape(title)}</h3>", 1)
    bad = linked_resources(page)
    if bad:  # a pyvis update added a link we do not know how to strip: fail loudly, never leak requests
        raise RuntimeError(f"pyvis page still links resources: {bad[:3]}")
    return page


def save_html(g, path, trace=None, **kw) -> Path:
    """Write :func:`to_html` to ``path``; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(to_html(g, trace, **kw), encoding="utf-8")
    return path


def show(g, trace=None, *, height: int = 580, **kw):
    """Inline notebook display (``IPython.display.HTML`` holding an ``iframe srcdoc``)."""
    import warnings

    from IPython.display import HTML

    page = to_html(g, trace, height=f"{height - 40}px", **kw)
    with warnings.catch_warnings():  # IPython suggests IFrame(src=...), which needs a file or server
        warnings.simplefilter("ignore", UserWarning)
        return HTML(f'<iframe srcdoc="{_html.escape(page, quote=True)}" style="width:100%;height:{height}px;'
                    f'border:1px solid #ddd" sandbox="allow-scripts"></iframe>')


def draw(g, trace=None, *, ax=None, max_nodes: int = 80, seed: int | None = None, labels: bool = True,
         include_invalid: bool = False, title: str | None = None):
    """Static matplotlib picture of the memory (blocks coloured, edge width by strength, trace highlighted).

    Returns the matplotlib Axes.
    """
    import matplotlib.pyplot as plt

    tr = _trace_of(trace)
    nodes = select_nodes(g, tr, max_nodes)
    keep = set(nodes)
    nd, ed = g.nodes, g.edges
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 7))
    H = nx.DiGraph()
    H.add_nodes_from(nodes)
    mask = ed.alive if include_invalid else (ed.alive & ed.valid)
    elist = [e for e in np.flatnonzero(mask).tolist() if int(ed.src[e]) in keep and int(ed.dst[e]) in keep]
    for e in elist:
        H.add_edge(int(ed.src[e]), int(ed.dst[e]))
    pos = nx.spring_layout(H, seed=_layout_seed(g, seed), k=1.2 / max(np.sqrt(len(nodes)), 1))
    anchors = {_live_row(g, a) for a in tr.anchor_ids} - {None} if tr else set()
    tw = tr.edge_weights if tr else {}
    on_path = {e for p in tr.paths for e in p.edges} if tr else set()
    reached = {_live_row(g, n) for n in tr.node_weights} - {None} if tr else set()
    for e in elist:
        s, o = int(ed.src[e]), int(ed.dst[e])
        eid = int(ed.uid[e])  # traces name edges by id
        if not ed.valid[e]:
            color, width, style = COLORS["invalid"], 0.8, "dashed"
        elif eid in on_path:
            color, width, style = COLORS["trace_edge"], 1.5 + 5 * tw.get(eid, 0.5), "solid"
        elif eid in tw:
            color, width, style = COLORS["explored_edge"], 0.8 + 1.5 * tw[eid], "solid"
        else:
            color = COLORS["faded"] if tr is not None else COLORS["edge"]
            width, style = 0.5 + 4 * float(ed.strength[e]), "dotted" if ed.kind[e] == EDGE_ASSOC else "solid"
        nx.draw_networkx_edges(H, pos, edgelist=[(s, o)], ax=ax, edge_color=color, width=width, style=style,
                               arrows=True, arrowsize=8, alpha=0.9)
    colors, sizes, edgecolors = [], [], []
    for i in nodes:
        c, _ = _node_style(g, i)
        if tr is not None and i not in reached:
            c = COLORS["faded"]
        if i in anchors:
            c = COLORS["anchor"]
        colors.append(c)
        edgecolors.append(COLORS["permanent_border"] if nd.permanent[i] else "white")
        sizes.append(120 + 400 * float(nd.importance[i]) + (250 if i in anchors else 0))
    nx.draw_networkx_nodes(H, pos, nodelist=nodes, node_color=colors, node_size=sizes, edgecolors=edgecolors,
                           linewidths=1.5, ax=ax)
    if labels:
        nx.draw_networkx_labels(H, pos, labels={i: _short(nd.text[i], 22) for i in nodes}, font_size=7, ax=ax)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], marker="o", ls="", color=COLORS[k], label=lab) for k, lab in
               (("episodic", "episode"), ("working", "working memory"), ("long_term", "long-term"))]
    if tr is not None:
        handles += [Line2D([], [], marker="o", ls="", color=COLORS["anchor"], label="anchor"),
                    Line2D([], [], color=COLORS["trace_edge"], label="path to a returned item"),
                    Line2D([], [], color=COLORS["explored_edge"], label="explored")]
    ax.legend(handles=handles, loc="lower left", fontsize=7, frameon=False)
    ax.set_axis_off()
    if title:
        ax.set_title(title)
    return ax


def plot_strengths(history: dict[int, np.ndarray], *, ax=None, bins: int = 30, title: str | None = None):
    """Overlaid histograms of edge strengths at several ticks (``{tick: strengths}``)."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    cmap = plt.get_cmap("viridis")
    ticks = sorted(history)
    for j, t in enumerate(ticks):
        ax.hist(history[t], bins=bins, range=(0, 1), histtype="step", lw=1.5,
                color=cmap(j / max(len(ticks) - 1, 1)), label=f"tick {t}")
    ax.set_xlabel("edge strength")
    ax.set_ylabel("edges")
    ax.legend(fontsize=7)
    if title:
        ax.set_title(title)
    return ax


def plot_curve(xs, series: dict[str, list], *, ax=None, xlabel: str = "tick", ylabel: str = "", title: str | None = None):
    """Line plot of several series against ``xs`` (e.g. the pruning curve)."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    for name, ys in series.items():
        ax.plot(xs, ys, label=name, lw=1.8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    if title:
        ax.set_title(title)
    return ax


def draw_kcore_shells(g, *, ax=None, max_nodes: int = 120, seed: int | None = None, title: str | None = None):
    """Draw the semantic block with entities coloured by core number (shells), main core outlined."""
    import matplotlib.pyplot as plt

    from .dynamics import semantic_core_numbers

    ed, nd = g.edges, g.nodes
    live = np.flatnonzero(ed.alive & ed.valid & (ed.kind != EDGE_MENTION))
    core = semantic_core_numbers(g)
    nodes = [i for i in select_nodes(g, None, max_nodes * 2) if nd.kind[i] != KIND_EPISODE][:max_nodes]
    keep = set(nodes)
    H = nx.Graph()
    H.add_nodes_from(nodes)
    H.add_edges_from((int(ed.src[e]), int(ed.dst[e])) for e in live.tolist()
                     if int(ed.src[e]) in keep and int(ed.dst[e]) in keep)
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 6))
    shells = {}
    for i in nodes:
        shells.setdefault(int(core[i]), []).append(i)
    pos = nx.shell_layout(H, nlist=[shells[k] for k in sorted(shells, reverse=True)]) if len(shells) > 1 \
        else nx.spring_layout(H, seed=_layout_seed(g, seed))
    kmax = int(core.max()) if core.size else 0
    nx.draw_networkx_edges(H, pos, ax=ax, edge_color=COLORS["edge"], width=0.6, alpha=0.6)
    cmap = plt.get_cmap("plasma")
    node_colors = [cmap(core[i] / max(kmax, 1)) for i in nodes]
    edgecolors = ["black" if core[i] == kmax and kmax > 0 else "white" for i in nodes]
    nx.draw_networkx_nodes(H, pos, nodelist=nodes, node_color=node_colors, edgecolors=edgecolors, node_size=160,
                           ax=ax)
    nx.draw_networkx_labels(H, pos, labels={i: _short(nd.text[i], 16) for i in nodes}, font_size=6, ax=ax)
    sm = plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(0, max(kmax, 1)))
    plt.colorbar(sm, ax=ax, label="core number", shrink=0.7)
    ax.set_axis_off()
    ax.set_title(title or f"k-core shells (main core k={kmax}, outlined)")
    return ax


def explorer(g, *, ticks: int = 20, query: str | None = None, max_nodes: int = 60):
    """Interactive explorer: sliders re-run ``ticks`` maintenance ticks on a copy of ``g`` and redraw.

    Sliders: decay rate, Hebbian strengthening (recall-driven, needs ``query``; and reward rate),
    forgetting threshold (``prune_strength``) and capacity (``max_edges``). The original graph is
    never modified.

    Returns
    -------
    ipywidgets.VBox
        With attributes ``sliders`` (dict), ``output`` (the Image widget), ``last_stats`` and
        ``redraw()``.
    """
    import ipywidgets as W
    import matplotlib.pyplot as plt

    d = g.config.dynamics
    n_edges = max(int((g.edges.alive & g.edges.valid).sum()), 1)
    sliders = {
        "decay_rate": W.FloatSlider(value=d.decay_rate, min=0.0, max=0.5, step=0.01, description="decay"),
        "hebbian_rate": W.FloatSlider(value=d.hebbian_rate, min=0.0, max=1.0, step=0.05,
                                      description="strengthening"),
        "prune_strength": W.FloatSlider(value=d.prune_strength, min=0.0, max=0.5, step=0.01,
                                        description="forget below"),
        "max_edges": W.IntSlider(value=n_edges, min=1, max=max(n_edges * 2, 2), step=1, description="capacity"),
    }
    # the picture is a PNG in an Image widget (no output capture: works the same in JupyterLab and in
    # batch runs, where an Output widget's clear_output can stall the executor)
    out = W.Image(format="png")
    status = W.HTML()
    box = W.VBox([W.HBox(list(sliders.values())[:2]), W.HBox(list(sliders.values())[2:]), status, out])

    def redraw(*_):
        kw = {k: s.value for k, s in sliders.items()}
        cfg = replace(g.config, dynamics=replace(g.config.dynamics, **kw))
        h = g.with_config(cfg)
        for _t in range(ticks):
            if query:
                h.recall(query, k=5)
            h.maintain()
        s = h.stats()
        status.value = (f"after {ticks} ticks: {s['n_nodes']} nodes, {s['n_valid_edges']} edges, "
                        f"mean strength {s['mean_strength']:.3f}")
        box.last_stats = s
        import io

        fig, ax = plt.subplots(figsize=(8, 5.5))
        draw(h, ax=ax, max_nodes=max_nodes, title=", ".join(f"{k}={v}" for k, v in kw.items()))
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
        plt.close(fig)
        out.value = buf.getvalue()

    for s in sliders.values():
        s.observe(redraw, names="value")
    box.sliders = sliders
    box.output = out
    box.redraw = redraw
    redraw()
    return box


def text_overlaps(ax) -> list[tuple[str, str]]:
    """Pairs of visible texts of ``ax`` whose boxes overlap (their strings), after a draw.

    Used to check that a figure's labels are readable: :func:`draw_recall_subgraph` returns an
    axes for which this list is empty.
    """
    fig = ax.figure
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    texts = [t for t in ax.texts if t.get_visible() and t.get_text().strip()]
    boxes = [t.get_window_extent(r) if t.get_bbox_patch() is None else t.get_bbox_patch().get_window_extent(r)
             for t in texts]
    out = []
    for i in range(len(texts)):
        for j in range(i + 1, len(texts)):
            a, b = boxes[i], boxes[j]
            if a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1:
                out.append((texts[i].get_text(), texts[j].get_text()))
    return out


def _box_exit(center, toward, size) -> tuple[float, float]:
    """Where the segment from a box's centre toward a point leaves the box (``size``: width, height)."""
    dx, dy = toward[0] - center[0], toward[1] - center[1]
    if dx == 0 and dy == 0:
        return center
    t = min(size[0] / 2 / abs(dx) if dx else np.inf, size[1] / 2 / abs(dy) if dy else np.inf)
    return center[0] + t * dx, center[1] + t * dy


def draw_recall_subgraph(g, trace, *, title: str | None = None, ax=None, wrap: int = 22, font_size: float = 9,
                         max_items: int | None = None):
    """Paper figure of one recall: only the recalled subgraph, laid out in hops, labels never overlapping.

    Nodes are the anchors and every node on the path to a returned item; edges are those paths'
    edges, labelled with their relation. Columns are hops from the anchors (anchors left), rows are
    ordered by their predecessors' rows; every box is measured before it is placed, so node boxes
    never overlap, and relation labels are moved along their edge until they overlap nothing
    (:func:`text_overlaps` is empty for the returned axes).

    Parameters
    ----------
    g : LiquidGraph
    trace : Recall or RecallTrace
        The recall to show (``m.ask(q).recall`` or ``g.recall(q)``).
    title : str, optional
        Default: the recall's queries.
    ax : matplotlib Axes, optional
        Drawn into (its figure is resized to fit); a new figure otherwise.
    wrap : int
        Characters per label line.
    font_size : float
    max_items : int, optional
        Show only the paths of the best ``max_items`` returned items.

    Returns
    -------
    matplotlib Axes
    """
    import textwrap

    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch

    tr = _trace_of(trace)
    if tr is None:
        raise ValueError("draw_recall_subgraph needs a Recall or RecallTrace")
    paths = tr.paths[:max_items] if max_items else tr.paths
    depth: dict[int, int] = {}
    edges: dict[int, float] = {}
    for a in tr.anchors:
        i = _live_row(g, a.node)  # nodes pruned or merged away since the recall are not drawn
        if i is not None and any(p.nodes and p.nodes[0] == a.node for p in paths):
            depth[i] = 0
    for p in paths:
        for k, nid in enumerate(p.nodes):
            i = _live_row(g, nid)
            if i is not None:
                depth[i] = min(depth.get(i, k), k)
        for e in p.edges:  # edge ids -> rows (an edge removed or compacted away since the recall is not drawn)
            r = g.edges.row(int(e))
            if r >= 0 and g.edges.alive[r]:
                edges[r] = max(edges.get(r, 0.0), tr.edge_weights.get(int(e), p.weight))
    if not depth:
        if paths:
            raise ValueError("every node of this recall has left the memory since (pruned or merged by maintain): "
                             "recall again to draw the memory as it is")
        raise ValueError("the recall returned nothing: there is no subgraph to draw")
    nd, ed = g.nodes, g.edges
    anchors = {_live_row(g, a.node) for a in tr.anchors} - {None}
    if ax is None:
        fig, ax = plt.subplots()
    fig = ax.figure
    ax.set_axis_off()
    labels = {}
    for i in depth:
        text = nd.text[i] if nd.kind[i] != KIND_EPISODE else _short(nd.text[i], 3 * wrap)
        labels[i] = "\n".join(textwrap.wrap(text, wrap)) or "?"
    # -- measure every box (in inches) before placing it
    r = fig.canvas.get_renderer()
    dpi = fig.dpi

    def size(text, fs):
        t = ax.text(0, 0, text, fontsize=fs, ha="center", va="center", bbox={"boxstyle": "round,pad=0.35"})
        fig.canvas.draw()
        bb = t.get_bbox_patch().get_window_extent(r)
        t.remove()
        return bb.width / dpi, bb.height / dpi

    node_size = {i: size(labels[i], font_size) for i in depth}
    rel_text = {e: "\n".join(textwrap.wrap(g._rel_text[ed.rel[e]], wrap)) for e in edges}
    rel_size = {e: size(rel_text[e], font_size - 1.5) for e in edges}
    cols: dict[int, list[int]] = {}
    for i, d in depth.items():
        cols.setdefault(d, []).append(i)
    n_cols = max(cols) + 1
    gap_x = [0.5 + max([rel_size[e][0] for e in edges
                        if {depth.get(int(ed.src[e])), depth.get(int(ed.dst[e]))} == {c, c + 1}] or [0.0])
             for c in range(n_cols)]
    col_w = [max(node_size[i][0] for i in cols[c]) if c in cols else 0.0 for c in range(n_cols)]
    xs, x = [], 0.3
    for c in range(n_cols):
        xs.append(x + col_w[c] / 2)
        x += col_w[c] + gap_x[c]
    width = x - gap_x[-1] + 0.3
    # rows: each column ordered by the mean row of the nodes it is linked to in the previous column
    pos: dict[int, tuple[float, float]] = {}
    heights = []
    order: dict[int, list[int]] = {}
    for c in range(n_cols):
        members = cols.get(c, [])
        if c:
            def bary(i, prev=order[c - 1]):
                ys = [prev.index(j) for e in edges for j in (int(ed.src[e]), int(ed.dst[e]))
                      if i in (int(ed.src[e]), int(ed.dst[e])) and j != i and j in prev]
                return (np.mean(ys) if ys else 1e9, i)
            members = sorted(members, key=bary)
        else:
            members = sorted(members, key=lambda i: (i not in anchors, i))
        order[c] = members
        heights.append(sum(node_size[i][1] for i in members) + 0.45 * max(len(members) - 1, 0))
    height = max(heights) + 0.9
    for c in range(n_cols):
        y = (height + heights[c]) / 2
        for i in order[c]:
            h = node_size[i][1]
            pos[i] = (xs[c], y - h / 2)
            y -= h + 0.45
    fig.set_size_inches(max(width, 3.0), height + 0.6)
    ax.set_position([0, 0, 1, height / (height + 0.6)])
    ax.set_xlim(0, max(width, 3.0))
    ax.set_ylim(0, height)
    boxes = {}
    for i in depth:
        color, _ = _node_style(g, i)
        if i in anchors:
            color = COLORS["anchor"]
        boxes[i] = ax.text(*pos[i], labels[i], fontsize=font_size, ha="center", va="center", zorder=3,
                           bbox={"boxstyle": "round,pad=0.35", "fc": color, "ec": "#333333", "lw": 0.8})
    wmax = max(edges.values()) if edges else 1.0
    rel_artists = []
    for e, w in sorted(edges.items()):
        s, o = int(ed.src[e]), int(ed.dst[e])
        if s not in pos or o not in pos:
            continue
        rad = 0.3 if depth[s] == depth[o] else 0.0
        arrow = FancyArrowPatch(_box_exit(pos[s], pos[o], node_size[s]), _box_exit(pos[o], pos[s], node_size[o]),
                                shrinkA=0, shrinkB=2, arrowstyle="-|>", mutation_scale=11, lw=0.8 + 2.2 * w / wmax,
                                color=COLORS["trace_edge"] if ed.kind[e] == EDGE_FACT else COLORS["edge"],
                                connectionstyle=f"arc3,rad={rad}", zorder=1)
        ax.add_patch(arrow)
        if ed.kind[e] == EDGE_FACT:
            mx, my = (pos[s][0] + pos[o][0]) / 2, (pos[s][1] + pos[o][1]) / 2
            rel_artists.append(ax.text(mx, my, rel_text[e], fontsize=font_size - 1.5, ha="center", va="center",
                                       zorder=4, style="italic",
                                       bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "none", "alpha": 0.95}))
    # move relation labels off anything they overlap (up or down, smallest step first)
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    step = 0.12
    for t in rel_artists:
        x0, y0 = t.get_position()
        for k in range(1, 80):
            others = [u for u in ax.texts if u is not t]
            bb = t.get_bbox_patch().get_window_extent(r)
            if not any(bb.overlaps(u.get_bbox_patch().get_window_extent(r)) for u in others):
                break
            dy = step * ((k + 1) // 2) * (1 if k % 2 else -1)
            t.set_position((x0, min(max(y0 + dy, 0.15), height - 0.15)))
    ax.set_title(title if title is not None else " / ".join(tr.queries), fontsize=font_size + 2)
    return ax
