"""Headless Debian Chromium driven over the DevTools protocol, offline, for the picture tests.

No browser-automation package: Chromium speaks the DevTools protocol over a pipe
(``--remote-debugging-pipe``: it reads commands from fd 3 and writes replies and events to fd 4,
each a JSON text ended by a NUL byte). Every request the pages make is recorded, and any request
to another machine fails at once: the proxy is a closed local port (loopback is never proxied).

Used by ``tests/test_notebooks.py`` (executed notebooks opened in JupyterLab) and
``tests/test_graph_viz.py`` (a page from ``viz.to_html``). Not a test module itself.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Self

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
SKIP_REASON = ("Debian package `chromium` is not installed (scripts/setup_env.sh installs it when run "
               "as root, or: apt-get install -y chromium) -- headless browser check skipped")

# The flags that work offline on these machines (Chromium otherwise keeps calling Google's services),
# plus one renderer process for every frame, so that the sandboxed iframes holding the graph
# pictures can be read through the page's own DevTools session.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-features=site-per-process,IsolateOrigins", "--disable-site-isolation-trials",
         "--window-size=1400,1000")

# In a vis-network page, once the network is laid out (``physics.ready``: its stabilization done, a
# state rather than a time), stop its simulation, fit it to the canvas and draw it once, synchronously
# (``redraw``), then look at the canvas under every node: the share of the pixels of the node's shape
# (a dot's inscribed square, a box's rectangle) painted in a node colour. The page's own animation
# frames are not awaited (headless Chromium paints a sandboxed iframe when it gets round to it, late
# under load), but the drawing is vis-network's own, on the page's own canvas. ``painted_before``
# counts the node-coloured pixels the page had painted by itself before that draw (for the record).
# ``network`` is the page's global (pyvis's template). Returns null until the network is laid out, and
# ``{error}`` when the page has loaded without making one (its script failed).
PICTURE_PROBE = """(() => {
  if (typeof network === 'undefined' || !network)  // pyvis's script makes it while the page loads
    return document.readyState === 'complete' ? {error: 'the page loaded and made no network'} : null;
  if (!network.physics || !network.physics.ready) return null;
  const canvas = document.querySelector('#mynetwork canvas');
  if (!canvas || !canvas.width || !canvas.height || !canvas.clientWidth) return null;
  const colours = %s;
  const ctx = canvas.getContext('2d');
  const isNode = (d, i) => colours.some(c => Math.abs(d[i] - c[0]) < 14 && Math.abs(d[i + 1] - c[1]) < 14
                                              && Math.abs(d[i + 2] - c[2]) < 14 && d[i + 3] >= 128);
  const count = (d) => { let n = 0; for (let i = 0; i < d.length; i += 4) if (isNode(d, i)) n++; return n; };
  const paintedBefore = count(ctx.getImageData(0, 0, canvas.width, canvas.height).data);
  network.stopSimulation();
  network.fit({animation: false});
  network.redraw();
  const ratio = canvas.width / canvas.clientWidth;
  const ids = network.body.data.nodes.getIds();
  const perNode = ids.map(id => {
    // the shape itself, not its label: a dot's inscribed square, a box's rectangle (the label inside)
    const n = network.body.nodes[id], c = network.canvasToDOM({x: n.x, y: n.y}), k = network.getScale() * ratio;
    const [hw, hh] = n.options.shape === 'dot' ? [n.shape.radius / Math.SQRT2, n.shape.radius / Math.SQRT2]
                                               : [n.shape.width / 2, n.shape.height / 2];
    const x0 = Math.max(0, Math.round(c.x * ratio - hw * k)), y0 = Math.max(0, Math.round(c.y * ratio - hh * k));
    const x1 = Math.min(canvas.width, Math.round(c.x * ratio + hw * k));
    const y1 = Math.min(canvas.height, Math.round(c.y * ratio + hh * k));
    if (x1 - x0 < 2 || y1 - y0 < 2) return {id: id, shape: n.options.shape, box: [x0, y0, x1, y1], pixels: 0, coloured: 0};
    const d = ctx.getImageData(x0, y0, x1 - x0, y1 - y0).data;
    return {id: id, shape: n.options.shape, box: [x0, y0, x1, y1], pixels: (x1 - x0) * (y1 - y0), coloured: count(d)};
  });
  return {nodes: ids.length, positioned: Object.keys(network.getPositions()).length,
          canvas: [canvas.width, canvas.height], painted_before: paintedBefore,
          unpainted: perNode.filter(n => n.pixels === 0 || n.coloured < 0.2 * n.pixels),
          per_node: perNode};
})()"""


def picture_probe(node_colours: list[str]) -> str:
    """:data:`PICTURE_PROBE` for node colours given as ``#rrggbb``: null until the network is laid out
    (``{error}`` if the loaded page made none), then ``{nodes, positioned, canvas, painted_before, unpainted, per_node}``, where ``unpainted`` lists
    the nodes whose shape on the canvas is not at least a fifth node-coloured (empty when every
    node was drawn where it lies)."""
    rgb = [[int(c[i:i + 2], 16) for i in (1, 3, 5)] for c in node_colours]
    return PICTURE_PROBE % json.dumps(rgb)


def closed_port() -> int:
    """A local port nothing listens on (any request proxied there fails at once)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def free_port() -> int:
    """A local port free for a server to listen on."""
    return closed_port()


class CDPError(RuntimeError):
    """The browser answered a command with an error, or did not answer in time."""


class Chromium:
    """One headless Chromium and one page; ``with Chromium(profile_dir) as b: b.open(url)``.

    Attributes
    ----------
    events : list of dict
        Every event received (``method``, ``params``, ``sessionId``).
    """

    def __init__(self, profile_dir: Path, *, timeout: float = 60.0):
        if CHROMIUM is None:
            raise RuntimeError(SKIP_REASON)
        self.timeout = timeout
        self.events: list[dict] = []
        self._replies: dict[int, queue.Queue] = {}
        self._lock = threading.Lock()
        self._next_id = 0
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def wire() -> None:  # in the child, before exec: the pipes on fds 3 and 4
            os.dup2(to_chrome_r, 3)
            os.dup2(from_chrome_w, 4)

        cmd = [CHROMIUM, *FLAGS, f"--user-data-dir={profile_dir}",
               f"--proxy-server=http://127.0.0.1:{closed_port()}", "--remote-debugging-pipe", "about:blank"]
        Path(profile_dir).mkdir(parents=True, exist_ok=True)
        self.log_path = Path(profile_dir) / "chromium.log"  # read it when a check fails
        with open(self.log_path, "wb") as log:
            # preexec_fn only calls os.dup2, which is safe between fork and exec even with threads
            self.proc = subprocess.Popen(cmd, preexec_fn=wire, pass_fds=(3, 4),  # noqa: PLW1509
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.session = None
        target = next(t for t in self.send("Target.getTargets")["targetInfos"] if t["type"] == "page")
        self.session = self.send("Target.attachToTarget", targetId=target["targetId"], flatten=True,
                                 session=None)["sessionId"]
        for domain in ("Page", "Runtime", "Network", "DOM"):
            self.send(f"{domain}.enable")

    # -- the protocol ------------------------------------------------------------------------------
    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._from_chrome, 1 << 16)
            except OSError:
                return
            if not chunk:
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "id" in msg:
                    with self._lock:
                        q = self._replies.get(msg["id"])
                    if q is not None:
                        q.put(msg)
                else:
                    self.events.append(msg)

    _DEFAULT = object()

    def send(self, method: str, session: Any = _DEFAULT, **params: Any) -> dict:
        """Send one command (to the page's session unless ``session=None``); return its result."""
        with self._lock:
            self._next_id += 1
            mid = self._next_id
            q: queue.Queue = queue.Queue()
            self._replies[mid] = q
        msg = {"id": mid, "method": method, "params": params}
        sid = self.session if session is self._DEFAULT else session
        if sid:
            msg["sessionId"] = sid
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        try:
            reply = q.get(timeout=self.timeout)
        except queue.Empty:
            raise CDPError(f"no reply to {method} within {self.timeout} s") from None
        finally:
            with self._lock:
                self._replies.pop(mid, None)
        if "error" in reply:
            raise CDPError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    # -- conveniences ------------------------------------------------------------------------------
    def open(self, url: str) -> None:
        self.send("Page.navigate", url=url)

    def evaluate(self, expression: str, *, context: int | None = None) -> Any:
        """Value of a JavaScript expression (in the top page, or in execution context ``context``)."""
        kw = {"contextId": context} if context is not None else {}
        res = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True, **kw)
        if "exceptionDetails" in res:
            raise CDPError(f"{expression[:80]!r} raised: {res['exceptionDetails'].get('text')} "
                           f"{res['exceptionDetails'].get('exception', {}).get('description', '')}")
        return res["result"].get("value")

    def wait_for(self, expression: str, *, timeout: float = 120.0, context: int | None = None,
                 what: str = "") -> Any:
        """Poll an expression until it is truthy; its value. (A bound for a hung page, not a timing.)"""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                last = self.evaluate(expression, context=context)
            except CDPError as exc:  # e.g. the context went away while the page re-rendered
                last = str(exc)
            else:
                if last:
                    return last
            time.sleep(0.25)
        raise CDPError(f"gave up waiting for {what or expression[:80]!r}; last value {last!r}")

    def frame_of(self, element_expression: str) -> str:
        """The frame id of the ``<iframe>`` an expression returns."""
        obj = self.send("Runtime.evaluate", expression=element_expression)["result"]
        if obj.get("subtype") != "node":
            raise CDPError(f"{element_expression!r} is not an element: {obj}")
        node = self.send("DOM.describeNode", objectId=obj["objectId"])["node"]
        if "frameId" not in node:
            raise CDPError(f"{element_expression!r} has no frame: {node.get('nodeName')}")
        return node["frameId"]

    def context_of(self, frame_id: str, *, timeout: float = 60.0) -> int:
        """The page's own (default) JavaScript context in a frame: the newest one not destroyed since (a
        frame that JupyterLab re-attached loads its document again, in a new context)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            gone: set[int] = set()
            for ev in reversed(list(self.events)):
                method = ev.get("method")
                if method == "Runtime.executionContextDestroyed":
                    gone.add(ev["params"]["executionContextId"])
                elif method == "Runtime.executionContextsCleared":
                    break  # every context created before this is gone
                elif method == "Runtime.executionContextCreated":
                    ctx = ev["params"]["context"]
                    aux = ctx.get("auxData", {})
                    if aux.get("frameId") == frame_id and aux.get("isDefault") and ctx["id"] not in gone:
                        return ctx["id"]
            time.sleep(0.1)
        raise CDPError(f"no JavaScript context for frame {frame_id}")

    def requested_urls(self) -> list[str]:
        """Every URL any page or frame asked for."""
        return [ev["params"]["request"]["url"] for ev in self.events
                if ev.get("method") == "Network.requestWillBeSent"]

    def close(self) -> None:
        try:
            self.send("Browser.close", session=None)
        except (CDPError, OSError):
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_chrome, self._from_chrome):
            try:
                os.close(fd)
            except OSError:
                pass

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
