#!/usr/bin/env python
"""Strip outputs, execution counts and run metadata from notebooks, so they are committed clean.

    python scripts/clean_notebooks.py                 # clean notebooks/*.ipynb in place
    python scripts/clean_notebooks.py --check         # exit 1 and list the notebooks that are not clean
    python scripts/clean_notebooks.py path/a.ipynb    # specific files

Cell sources, cell tags (``parameters``) and the kernelspec are kept; papermill's injected-parameters
cell (in an executed copy) is dropped; nothing else is touched.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
# Notebook-level metadata that only describes one execution (papermill, widgets state).
RUN_METADATA = ("papermill", "widgets", "execution")
CELL_RUN_METADATA = ("execution", "papermill", "collapsed", "scrolled")


def clean(nb: nbformat.NotebookNode) -> bool:
    """Clean ``nb`` in place; return True when something changed."""
    changed = False
    kept = [c for c in nb.cells if "injected-parameters" not in c.metadata.get("tags", [])]
    if len(kept) != len(nb.cells):  # papermill's injected cell, from an executed copy
        nb.cells = kept
        changed = True
    for key in RUN_METADATA:
        if key in nb.metadata:
            del nb.metadata[key]
            changed = True
    for cell in nb.cells:
        for key in CELL_RUN_METADATA:
            if key in cell.metadata:
                del cell.metadata[key]
                changed = True
        if cell.cell_type == "code":
            if cell.get("outputs"):
                cell.outputs = []
                changed = True
            if cell.get("execution_count") is not None:
                cell.execution_count = None
                changed = True
        elif "outputs" in cell or "execution_count" in cell:
            cell.pop("outputs", None)
            cell.pop("execution_count", None)
            changed = True
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", type=Path, help="notebooks (default: notebooks/*.ipynb)")
    parser.add_argument("--check", action="store_true", help="report, do not write; exit 1 if any is dirty")
    args = parser.parse_args(argv)
    paths = args.paths or sorted((ROOT / "notebooks").glob("*.ipynb"))
    dirty = []
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        if clean(nb):
            dirty.append(path)
            if not args.check:
                nbformat.write(nb, path)
    verb = "not clean" if args.check else "cleaned"
    for path in dirty:
        print(f"{verb}: {path}")
    if args.check and dirty:
        print("run: python scripts/clean_notebooks.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
