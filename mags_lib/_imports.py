"""Which library modules a process imports, for the pipeline's resume hash (:mod:`mags_lib.pipeline`).

A notebook's kernel reports the library modules it imported itself (its ``sys.modules`` after each cell). Code the
notebook runs in other processes -- joblib workers decoding in parallel (notebook 10's before row, the held-out
evaluations, the game and LoCoMo units), ``python -m mags_lib.export.switch`` -- may import modules the kernel never
does, and a change to those must run the notebook again too. So the kernel sets :data:`TRACE_ENV` to a file, and
every process started under it that imports the library appends the name of each library module it imports, one line
each, written whole (``O_APPEND``: processes do not interleave). The record is made where Python looks a module up
(a finder first in ``sys.meta_path``), so ``importlib.import_module`` and backends picked by name count too.

The package calls :func:`install` first thing in its ``__init__``; nothing happens without the variable (outside a
pipeline run). The kernel itself (:data:`KERNEL_ENV` holds its pid) records nothing, but a process forked from it
(which inherits its finders and not its trace) does.
"""

from __future__ import annotations

import os
import sys

TRACE_ENV = "MAGS_IMPORT_TRACE"  # file the pipeline reads when the notebook has run
KERNEL_ENV = "MAGS_IMPORT_TRACE_KERNEL"  # pid of the notebook's kernel, which reports its modules itself


class _Recorder:
    """A ``sys.meta_path`` finder that finds nothing: it writes down each module of ``package`` looked up."""

    def __init__(self, package: str, path: str, kernel_pid: str | None) -> None:
        self.package = package
        self.path = path
        self.kernel_pid = kernel_pid

    def find_spec(self, fullname: str, path=None, target=None):  # noqa: ANN001 - the finder protocol
        if (fullname == self.package or fullname.startswith(self.package + ".")) \
                and str(os.getpid()) != self.kernel_pid:
            self.record(fullname)
        return None  # the usual finders load it

    def record(self, name: str) -> None:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, (name + "\n").encode())
            finally:
                os.close(fd)
        except OSError:  # the run's folder is gone (the run was interrupted): nobody reads the record
            pass


def install(package: str) -> bool:
    """Record the modules of ``package`` this process imports into ``$MAGS_IMPORT_TRACE`` when it is set (in the
    kernel that set it, only for processes forked from it). Returns whether a recorder was installed (once per
    package and process)."""
    path = os.environ.get(TRACE_ENV)
    if not path or any(isinstance(f, _Recorder) and f.package == package for f in sys.meta_path):
        return False
    kernel = os.environ.get(KERNEL_ENV)
    recorder = _Recorder(package, path, kernel)
    sys.meta_path.insert(0, recorder)
    if str(os.getpid()) != kernel:  # the package itself, and whatever it imported before calling install
        for name in [n for n in list(sys.modules) if n == package or n.startswith(package + ".")]:
            recorder.record(name)
    return True
