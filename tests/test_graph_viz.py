"""Pictures: offline pyvis HTML (checked in headless Chromium), matplotlib figures, the explorer."""

import html
import json
import re
import shutil
import socket
import subprocess
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import numpy as np
import pytest

from mags_lib.embed import HashEmbedder
from mags_lib.graph import LiquidGraph, viz

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
# requests Chromium makes on its own (component updates, account checks), never caused by the page
BROWSER_SERVICE_HOSTS = ("google.com", "googleapis.com", "gstatic.com", "gvt1.com", "googleusercontent.com")


@pytest.fixture(scope="module")
def story():
    g = LiquidGraph(HashEmbedder(dim=64), seed=0)
    ep = g.add_episode("Blorps eat frozen lemons and live in caves.", source="D1:3")
    g.engram([("blorps", "eat", "frozen lemons"), ("blorps", "live in", "caves"), ("caves", "are", "cold")],
             episode=ep)
    ep2 = g.add_episode("Blorps moved to the trees.", source="D1:4")
    g.engram([("blorps", "live in", "trees")], episode=ep2)
    res = g.recall("what do blorps eat", k=4)
    return g, res


def test_html_is_offline_and_carries_the_graph(story):
    g, res = story
    page = viz.to_html(g, res, title="blorps")
    assert viz.find_external_urls(page) == []
    assert "new vis.Network" in page and "blorps" in page and "frozen lemons" in page
    assert viz.COLORS["anchor"] in page and viz.COLORS["trace_edge"] in page  # trace highlighted
    assert "cdn.jsdelivr" not in page and "cdnjs" not in page
    # superseded facts only on request, dashed
    with_invalid = viz.to_html(g, include_invalid=True)
    assert with_invalid.count("SUPERSEDED") == 1 and "SUPERSEDED" not in page


def test_show_wraps_an_iframe_srcdoc(story):
    g, res = story
    out = viz.show(g, res, height=400)
    assert out.data.startswith("<iframe srcdoc=") and "height:400px" in out.data
    inner = html.unescape(re.search(r'srcdoc="([^"]*)"', out.data).group(1))
    assert "new vis.Network" in inner


def test_matplotlib_figures(story, tmp_path):
    g, res = story
    ax = viz.draw(g, res, title="trace")
    assert ax.get_title() == "trace" and len(ax.collections) >= 1 and len(ax.patches) >= 3  # nodes, arrows
    ax.figure.savefig(tmp_path / "g.png")
    assert (tmp_path / "g.png").stat().st_size > 5000
    ax2 = viz.draw_kcore_shells(g)
    assert "k-core" in ax2.get_title()
    ax3 = viz.plot_strengths({0: np.array([0.5, 0.6]), 5: np.array([0.4])})
    assert len(ax3.patches) == 2
    ax4 = viz.plot_curve([0, 1, 2], {"edges": [5, 4, 3]}, ylabel="count")
    assert ax4.get_ylabel() == "count"
    import matplotlib.pyplot as plt

    plt.close("all")


def test_explorer_redraws_on_slider_change(story):
    g, _ = story
    before = g._state()
    box = viz.explorer(g, ticks=8)
    s1 = dict(box.last_stats)
    png1 = bytes(box.output.value)
    assert png1.startswith(b"\x89PNG")
    box.sliders["prune_strength"].value = 0.45  # forget aggressively
    s2 = dict(box.last_stats)
    assert s2["n_valid_edges"] < s1["n_valid_edges"]
    assert bytes(box.output.value) != png1  # redrawn
    box.sliders["max_edges"].value = 2
    assert box.last_stats["n_valid_edges"] <= 2
    from mags_lib.graph.core import _state_differences

    assert _state_differences(before, g._state()) == []  # the explorer never touches the original
    import matplotlib.pyplot as plt

    plt.close("all")


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now: any proxied request fails locally
    return port


@pytest.mark.skipif(CHROMIUM is None, reason="Debian package `chromium` is not installed "
                                             "(apt-get install -y chromium) -- headless browser check skipped")
def test_exported_picture_draws_in_headless_chromium_without_network(story, tmp_path):
    g, res = story
    page = viz.to_html(g, res, title="headless check")
    # report what the page itself loaded (Resource Timing) into the DOM once it has drawn
    probe = ("<script>window.addEventListener('load', function(){setTimeout(function(){"
             "var r = performance.getEntriesByType('resource').map(function(e){return e.name;});"
             "var c = document.querySelectorAll('#mynetwork canvas').length;"
             "var d = document.createElement('pre'); d.id='probe';"
             "d.textContent = JSON.stringify({resources: r, canvases: c});"
             "document.body.appendChild(d);}, 500);});</script></body>")
    path = tmp_path / "graph.html"
    path.write_text(page.replace("</body>", probe, 1), encoding="utf-8")
    netlog = tmp_path / "net.json"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'profile'}", f"--proxy-server=http://127.0.0.1:{_closed_port()}",
           f"--log-net-log={netlog}", "--virtual-time-budget=8000", "--dump-dom", path.as_uri()]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    dom = out.stdout
    assert "<canvas" in dom, out.stderr[-2000:]
    probe_json = json.loads(html.unescape(re.search(r'<pre id="probe">(.*?)</pre>', dom, re.DOTALL).group(1)))
    assert probe_json["canvases"] >= 1
    assert [u for u in probe_json["resources"] if not u.startswith(("file:", "data:", "blob:"))] == []
    # and the browser's own network log holds no request caused by the page
    urls = set(re.findall(r'"url":"([^"]+)"', netlog.read_text(errors="replace"))) if netlog.exists() else set()
    from urllib.parse import urlparse

    page_requests = [u for u in urls if u.startswith(("http:", "https:", "ws:", "wss:"))
                     and not urlparse(u).hostname.endswith(BROWSER_SERVICE_HOSTS)]
    assert page_requests == []
