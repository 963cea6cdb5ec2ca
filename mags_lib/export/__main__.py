"""``python -m mags_lib.export``: see :func:`mags_lib.export.layout.main`."""

from .layout import main

raise SystemExit(main())
