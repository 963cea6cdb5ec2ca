"""The Liquid Knowledge Graph (memory core of MAGS).

Knows numpy, networkx, scipy and the :class:`mags_lib.embed.Embedder` interface, nothing of
language models (importing it imports no torch). Submodules: ``viz`` (pictures, explorer),
``tour`` (the dynamics notebook's story and simulator), ``dynamics`` (each step on its own), ``dates``
(relative dates resolved against the date they were said).

>>> from mags_lib.graph import LiquidGraph, GraphConfig
"""

from . import atomic, tour, viz
from .config import DynamicsConfig, EngramConfig, GraphConfig, IndexConfig, LimitsConfig, RecallConfig
from .core import LiquidGraph, norm_key
from .dynamics import STEPS, core_numbers
from .index import VectorIndex
from .model import (
    Anchor,
    EngramReport,
    GraphDiff,
    GraphFormatError,
    MaintainReport,
    Recall,
    RecallItem,
    RecallTrace,
    TracePath,
)
from .persistence import (
    FORMAT_NAME,
    FORMAT_VERSION,
    graph_from_files,
    graph_to_files,
    load_graph,
    read_manifest,
    save_graph,
)
from .testing import TableEmbedder

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "STEPS",
    "Anchor",
    "DynamicsConfig",
    "EngramConfig",
    "EngramReport",
    "GraphConfig",
    "GraphDiff",
    "GraphFormatError",
    "IndexConfig",
    "LimitsConfig",
    "LiquidGraph",
    "MaintainReport",
    "Recall",
    "RecallConfig",
    "RecallItem",
    "RecallTrace",
    "TableEmbedder",
    "TracePath",
    "VectorIndex",
    "atomic",
    "core_numbers",
    "graph_from_files",
    "graph_to_files",
    "load_graph",
    "norm_key",
    "read_manifest",
    "save_graph",
    "tour",
    "viz",
]
