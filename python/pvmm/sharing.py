"""Sharing from Python: exported buffers and pools that pickle through ``multiprocessing``.

Their fds travel with multiprocessing's reducer (``DupFd``), so a child maps a parent's buffer in two lines::

    exported = pvmm.export_buffer(buffer)           # parent: pass `exported` to the child (Process args, a Queue)
    mapped = exported.open()                        # child: an ImportedBuffer at a new address, same memory

Between processes that multiprocessing did not start, pvmm's own fd transport carries them: ``send(connection,
exported)`` and ``receive_buffer(connection)`` / ``receive_pool(connection)`` over a ``pvmm.Connection``
(``pvmm.Listener.listen(name).accept()`` on one side, ``pvmm.connect(name)`` on the other).
"""

from __future__ import annotations

import os
from multiprocessing import reduction
from typing import Any, Callable, TypeVar

from . import _pvmm


def _rebuild_fds(dupfds: list[Any]) -> list[int]:
    return [d.detach() for d in dupfds]


_Export = TypeVar("_Export", bound="_ClosesItsFds")


class _ClosesItsFds:
    """What the exports share: close() gives their fds back (twice is fine); a with-block and garbage collection
    close them."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _Export) -> _Export:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


class ExportedBuffer(_ClosesItsFds):
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

    def __reduce__(self) -> tuple[Callable[..., ExportedBuffer], tuple[Any, ...]]:
        return _rebuild_buffer, (self.descriptor, [reduction.DupFd(fd) for fd in self.fds])

    def __repr__(self) -> str:
        return f"<pvmm.ExportedBuffer {len(self.descriptor)}-byte descriptor, {len(self.fds)} fds>"


def _rebuild_buffer(descriptor: bytes, dupfds: list[Any]) -> ExportedBuffer:
    return ExportedBuffer(descriptor, _rebuild_fds(dupfds))


class ExportedPool(_ClosesItsFds):
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

    def __reduce__(self) -> tuple[Callable[..., ExportedPool], tuple[Any, ...]]:
        return _rebuild_pool, (reduction.DupFd(self.fd), self.pool_id)

    def __repr__(self) -> str:
        return f"<pvmm.ExportedPool fd={self.fd}>"


def _rebuild_pool(dupfd: Any, pool_id: bytes) -> ExportedPool:
    return ExportedPool(dupfd.detach(), pool_id)


def _open_buffer(exported: ExportedBuffer) -> _pvmm.ImportedBuffer:
    with exported:
        return exported.open()


def _open_pool(exported: ExportedPool) -> _pvmm.MemoryPool:
    with exported:
        return exported.open()


def _keep_until_sent(exported: ExportedBuffer | ExportedPool) -> None:
    """A process being spawned passes the pickled fds themselves (DupFd does not duplicate them then): the export
    must stay open until the child has started, so it lives as long as the spawning Popen. Elsewhere (a Queue,
    a Pipe) DupFd duplicated the fds already and the export may close."""
    from multiprocessing import context

    popen = context.get_spawning_popen()
    if popen is not None:
        popen.__dict__.setdefault("_pvmm_exports", []).append(exported)


def _reduce_buffer(buffer: _pvmm.GrowableBuffer) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """GrowableBuffer.__reduce__: pickles as its exported chunks; unpickles as an ImportedBuffer."""
    exported = export_buffer(buffer)
    _keep_until_sent(exported)
    return _open_buffer, (exported,)


def _reduce_pool(pool: _pvmm.MemoryPool) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """MemoryPool.__reduce__: pickles as its exported fd; unpickles as the imported pool."""
    exported = export_pool(pool)
    _keep_until_sent(exported)
    return _open_pool, (exported,)


def export_buffer(buffer: _pvmm.GrowableBuffer) -> ExportedBuffer:
    """Exports a growable buffer (created with exportable=True) for another process."""
    descriptor, fds = buffer.export()
    return ExportedBuffer(descriptor, fds)


def export_pool(pool: _pvmm.MemoryPool) -> ExportedPool:
    """Exports a pool (created with exportable=True) for another process."""
    fd, pool_id = pool.export_fd()
    return ExportedPool(fd, pool_id)


def send(connection: _pvmm.Connection, exported: ExportedBuffer | ExportedPool, timeout_ms: int = 10000) -> None:
    """Sends an exported buffer or pool over a pvmm connection (its fds stay this side's: close() them after)."""
    if isinstance(exported, ExportedBuffer):
        connection.send(exported.fds, b"B" + exported.descriptor, timeout_ms)
    else:
        connection.send([exported.fd], b"P" + exported.pool_id, timeout_ms)


def _receive(connection: _pvmm.Connection, kind: bytes, timeout_ms: int) -> tuple[list[int], bytes]:
    fds, payload = connection.receive(timeout_ms=timeout_ms)
    if payload[:1] != kind:  # a peer's message is not trusted: the wrong kind is refused, its fds closed
        for fd in fds:
            os.close(fd)
        what = {b"B": "an exported buffer", b"P": "an exported pool"}
        raise _pvmm.ProtocolError(f"expected {what[kind]} from the peer, got a message of kind {payload[:1]!r}")
    return fds, payload[1:]


def receive_buffer(connection: _pvmm.Connection, timeout_ms: int = 10000) -> ExportedBuffer:
    """Receives what ``send`` sent for a buffer: ``.open()`` maps it here."""
    fds, descriptor = _receive(connection, b"B", timeout_ms)
    return ExportedBuffer(descriptor, fds)


def receive_pool(connection: _pvmm.Connection, timeout_ms: int = 10000) -> ExportedPool:
    """Receives what ``send`` sent for a pool: ``.open()`` imports it here."""
    fds, pool_id = _receive(connection, b"P", timeout_ms)
    if len(fds) != 1:
        for fd in fds:
            os.close(fd)
        raise _pvmm.ProtocolError(f"an exported pool comes with one fd, the peer sent {len(fds)}")
    return ExportedPool(fds[0], pool_id)
