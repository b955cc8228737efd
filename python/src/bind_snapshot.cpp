// pvmm.memory_snapshot(), pvmm.dump_snapshot(path), pvmm.record_memory_history(max_entries): memory snapshots in
// PyTorch's visualizer format (pvmm/snapshot.hpp).
#include <cstddef>
#include <string>

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <pvmm/snapshot.hpp>

#include "common.hpp"

namespace nb = nanobind;

namespace pvmm_py {

void bind_snapshot(nb::module_& m) {
  m.def(
      "memory_snapshot",
      [] {
        std::string bytes;
        {
          // Without the GIL: letting go of what finished stream work held may tear down a released window and its
          // team's bootstrap, a Python store (which takes the GIL itself); the GIL stays outermost.
          nb::gil_scoped_release unlocked;
          auto s = unwrap(pvmm::take_memory_snapshot());
          bytes = unwrap(pvmm::snapshot_pickle(s));
        }
        // The dict is the pickle read back, so memory_snapshot() and the file dump_snapshot writes are the same data.
        return nb::module_::import_("pickle").attr("loads")(nb::bytes(bytes.data(), bytes.size()));
      },
      "Everything pvmm holds now, as torch.cuda.memory._snapshot() returns it: {'segments': [...], "
      "'device_traces': [[...] per device], ...} (pvmm/snapshot.hpp gives the schema).");
  m.def(
      "dump_snapshot", [](const std::string& path) { unwrap(pvmm::dump_snapshot(path)); }, nb::arg("path"),
      nb::call_guard<nb::gil_scoped_release>(),
      "Writes memory_snapshot() to `path` as the pickle `python -m torch.cuda._memory_viz segment_plot|trace_plot` "
      "and pytorch.org/memory_viz read.");
  m.def(
      "record_memory_history", [](std::size_t max_entries) { unwrap(pvmm::record_memory_history(max_entries)); },
      nb::arg("max_entries"), nb::call_guard<nb::gil_scoped_release>(),
      "Keeps the last `max_entries` allocate/free events in snapshots' device_traces from now on (0, the default, "
      "turns recording off; off it costs one relaxed load per event site).");
  m.def(
      "memory_history_capacity", [] { return pvmm::memory_history_capacity(); },
      "The history ring's capacity now (0: off).");
}

}  // namespace pvmm_py
