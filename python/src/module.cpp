// pvmm._pvmm: the nanobind module behind the `pvmm` Python package (python/pvmm/__init__.py re-exports it).
//
// One source file per area, each with a bind_<area>(m) function (common.hpp lists them). Every closable object is
// kept in a pvmm_py::holder (holder.hpp): a call takes its own share of the object, so close() racing a call never
// frees what the call uses, and views pin the memory they show. The GIL is released around exactly the calls
// pvmm.hpp lists as blocking.
#include "common.hpp"

NB_MODULE(_pvmm, m) {
  m.doc() =
      "pvmm: portable GPU virtual memory management (the compiled part; import pvmm).\n\n"
      "Timeouts (every timeout_ms parameter): milliseconds; WAIT_FOREVER (-1) waits without a deadline; 0 expires "
      "now (tries once, does not wait); any other negative value raises InvalidArgumentError naming the parameter. "
      "A blocking call releases the GIL and looks for signals at least every 100 ms: Ctrl-C raises "
      "KeyboardInterrupt (a team aborts: its peers get PeerLostError naming this rank). An exception a Python "
      "callback raises (a store, an allgather) propagates as itself.\n\n"
      "Views (view(), __dlpack__, memoryview) pin the memory they show: while one lives, what would move, shrink or "
      "unmap it (GrowableBuffer.resize, Reservation.unmap and set_access, PoolAllocation.free) raises BusyError, a "
      "BufferError, as bytearray does; close() with views alive leaves the memory to the last view. Memory set "
      "read-only is exported read-only.";
  m.attr("BACKEND") = PVMM_PY_BACKEND;
  m.attr("WAIT_FOREVER") = -1;
  // Each part of the module (common.hpp), bound in this order.
  using namespace pvmm_py;
  for (auto bind : {bind_errors, bind_device, bind_stream, bind_vmm, bind_growable, bind_pinned, bind_pool,
                    bind_allocators, bind_team, bind_window, bind_heap, bind_transport, bind_snapshot})
    bind(m);
}
