"""MAGS workbench: a Liquid Knowledge Graph memory for small language models.

``from mags_lib import MAGS`` gives the agent (imported lazily: the graph, protocol and metrics can be
used without loading any language-model code).
"""

from ._imports import install as _trace_imports

_trace_imports(__name__)  # inside a pipeline run only: the library modules this process imports (see _imports)

__version__ = "0.1.0"
__all__ = ["MAGS", "__version__"]


def __getattr__(name: str):
    if name == "MAGS":
        from .agent import MAGS

        return MAGS
    raise AttributeError(f"module 'mags_lib' has no attribute {name!r}")
