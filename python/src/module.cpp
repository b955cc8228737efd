// pvmm._pvmm: the nanobind module behind the `pvmm` Python package (python/pvmm/__init__.py re-exports it).
//
// One source file per area, each with a bind_<area>(m) function (common.hpp lists them). Every closable object is
// kept in a pvmm_py::holder (holder.hpp): a call takes its own share of the object, so close() racing a call never
// frees what the call uses, and views pin the memory they show. The GIL is released around exactly the calls
// pvmm.hpp lists as blocking.
#include "common.hpp"

NB_MODULE(_pvmm, m) {
  m.doc() = "pvmm: portable GPU virtual memory management (the compiled part; import pvmm)";
  m.attr("BACKEND") = PVMM_PY_BACKEND;
  pvmm_py::bind_errors(m);
  pvmm_py::bind_device(m);
  pvmm_py::bind_stream(m);
  pvmm_py::bind_vmm(m);
  pvmm_py::bind_growable(m);
  pvmm_py::bind_pinned(m);
  pvmm_py::bind_pool(m);
  pvmm_py::bind_allocators(m);
  pvmm_py::bind_team(m);
  pvmm_py::bind_window(m);
  pvmm_py::bind_transport(m);
}
