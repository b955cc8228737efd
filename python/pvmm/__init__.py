"""pvmm: portable GPU virtual memory management from Python.

Everything pvmm's C++ library offers that Python code needs: devices, physical allocations and reservations,
growable buffers, pinned and managed memory, streams, pools, query_pointer, a sleeping allocator, sharing between
processes (pickling through multiprocessing, or pvmm's fd transport: Listener, connect, Connection) and DLPack
views of every memory owner. Errors are exceptions named
after pvmm's error codes (``pvmm.InvalidSizeError`` for ``errc::invalid_size``), all subclasses of
``pvmm.PvmmError``, carrying the whole record: ``code``, ``value``, ``operation``, ``arguments``, ``detail``,
``native_name``, ``native_code``, ``hint``.
"""

from __future__ import annotations

from . import _pvmm
from ._pvmm import *  # noqa: F401,F403  (the classes, functions and every error class)
from ._pvmm import ERRC, BACKEND, PvmmError
from . import sharing as sharing
# Re-exported by name (the stub's checker reads no computed __all__).
from .sharing import ExportedBuffer as ExportedBuffer
from .sharing import ExportedPool as ExportedPool
from .sharing import export_buffer as export_buffer
from .sharing import export_pool as export_pool

__all__ = [name for name in dir(_pvmm) if not name.startswith("_")] + [
    "ExportedBuffer",
    "ExportedPool",
    "export_buffer",
    "export_pool",
    "error_class",
    "sharing",
]


def error_class(code: str) -> type[PvmmError]:
    """The exception class of errc ``code`` ("invalid_size" -> InvalidSizeError)."""
    cls: type[PvmmError] = ERRC[code][2]
    return cls
