"""Sharing from Python: exported buffers and pools that pickle through ``multiprocessing``.

Their fds travel with multiprocessing's reducer (``DupFd``), so a child maps a parent's buffer in two lines::

    exported = pvmm.export_buffer(buffer)           # parent: pass `exported` to the child (Process args, a Queue)
    mapped = exported.open()                        # child: an ImportedBuffer at a new address, same memory
"""

from __future__ import annotations

import os
from multiprocessing import reduction
from typing import Any, Callable

from . import _pvmm


def _rebuild_fds(dupfds: list[Any]) -> list[int]:
    return [d.detach() for d in dupfds]


class ExportedBuffer:
    """A growable buffer's chunks exported as fds (owned here) with their descriptor; picklable to a child."""

    def __init__(self, descriptor: bytes, fds: list[int]) -> None:
        self.descriptor = descriptor
        self.fds = fds

    def open(self, device: int = 0) -> _pvmm.ImportedBuffer:
        """Maps the buffer in this process."""
        return _pvmm.ImportedBuffer.open(self.descriptor, self.fds, device)

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []

    def __enter__(self) -> ExportedBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    def __reduce__(self) -> tuple[Callable[..., ExportedBuffer], tuple[Any, ...]]:
        return _rebuild_buffer, (self.descriptor, [reduction.DupFd(fd) for fd in self.fds])

    def __repr__(self) -> str:
        return f"<pvmm.ExportedBuffer {len(self.descriptor)}-byte descriptor, {len(self.fds)} fds>"


def _rebuild_buffer(descriptor: bytes, dupfds: list[Any]) -> ExportedBuffer:
    return ExportedBuffer(descriptor, _rebuild_fds(dupfds))


class ExportedPool:
    """A pool exported as an fd (owned here) with its id; picklable. open() imports it; import_pointer maps one of
    its allocations from the record ``MemoryPool.export_pointer`` gave."""

    def __init__(self, fd: int, pool_id: bytes) -> None:
        self.fd = fd
        self.pool_id = pool_id

    def open(self, device: int = 0) -> _pvmm.MemoryPool:
        return _pvmm.MemoryPool.import_fd(self.fd, self.pool_id, device)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> ExportedPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    def __reduce__(self) -> tuple[Callable[..., ExportedPool], tuple[Any, ...]]:
        return _rebuild_pool, (reduction.DupFd(self.fd), self.pool_id)

    def __repr__(self) -> str:
        return f"<pvmm.ExportedPool fd={self.fd}>"


def _rebuild_pool(dupfd: Any, pool_id: bytes) -> ExportedPool:
    return ExportedPool(dupfd.detach(), pool_id)


def export_buffer(buffer: _pvmm.GrowableBuffer) -> ExportedBuffer:
    """Exports a growable buffer (created with exportable=True) for another process."""
    descriptor, fds = buffer.export()
    return ExportedBuffer(descriptor, fds)


def export_pool(pool: _pvmm.MemoryPool) -> ExportedPool:
    """Exports a pool (created with exportable=True) for another process."""
    fd, pool_id = pool.export_fd()
    return ExportedPool(fd, pool_id)
