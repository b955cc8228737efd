// pvmm.Team: N ranks over a Python store, a Python allgather (mpi4py) or pvmm's named endpoints.
//
// Lock rule (docs/design.md "Bindings"): team creation releases the GIL; the store callbacks take it back. pvmm
// holds none of its locks while it calls them, so the GIL stays the outermost lock.
#include <nanobind/stl/string.h>

#include <chrono>
#include <memory>
#include <string>

#include "team_bootstrap.hpp"
#include "team_objects.hpp"

namespace pvmm_py {

using namespace nb::literals;

namespace {

py_team make_team(std::shared_ptr<pvmm::bootstrap> b, int device, int timeout_ms) {
  pvmm::team_options o;
  o.device = device;
  o.timeout = std::chrono::milliseconds(timeout_ms);
  std::shared_ptr<pvmm::team> t;
  {
    nb::gil_scoped_release release;
    t = std::make_shared<pvmm::team>(unwrap(pvmm::team::create(std::move(b), o)));
  }
  py_team out;
  out.h.reset(std::move(t));
  return out;
}

}  // namespace

void bind_team(nb::module_& m) {
  nb::class_<py_team>(m, "Team", "N ranks, each mapping every peer's window memory.")
      .def_static(
          "over_store",
          [](nb::object store, int rank, int size, const std::string& prefix, int device, int timeout_ms) {
            std::shared_ptr<pvmm::bootstrap> b;
            {
              pvmm::key_value_store kv = python_store(std::move(store));
              nb::gil_scoped_release release;
              b = unwrap(
                  pvmm::make_store_bootstrap(std::move(kv), prefix, rank, size, std::chrono::milliseconds(timeout_ms)));
            }
            return make_team(std::move(b), device, timeout_ms);
          },
          "store"_a, "rank"_a, "size"_a, "prefix"_a = "pvmm", "device"_a = 0, "timeout_ms"_a = 30000,
          "A team over any object with set(key, bytes) and a blocking get(key) (wait(keys) used where present): a "
          "torch.distributed Store works.")
      .def_static(
          "over_allgather",
          [](nb::object allgather, int rank, int size, int node, int local_rank, int local_size, int device,
             int timeout_ms) {
            if (rank < 0 || size <= 0 || rank >= size || size > pvmm::bootstrap::max_ranks)
              raise(pvmm::errc::invalid_argument, "pvmm.Team.over_allgather",
                    "rank must be in [0, size) and size in [1, 65536]",
                    "rank=" + std::to_string(rank) + ", size=" + std::to_string(size));
            auto b = python_allgather_bootstrap(std::move(allgather), rank, size, node,
                                                local_rank < 0 ? rank : local_rank, local_size < 0 ? size : local_size);
            return make_team(std::move(b), device, timeout_ms);
          },
          "allgather"_a, "rank"_a, "size"_a, "node"_a = 0, "local_rank"_a = -1, "local_size"_a = -1, "device"_a = 0,
          "timeout_ms"_a = 30000,
          "A team over a Python allgather: fn(bytes) -> list of every rank's bytes (mpi4py: comm.allgather; "
          "pvmm.team_over_mpi wraps it). node/local_rank/local_size default to one node.")
      .def_static(
          "over_endpoints",
          [](const std::string& name, int rank, int size, int device, int timeout_ms) {
            std::shared_ptr<pvmm::bootstrap> b;
            {
              nb::gil_scoped_release release;
              b = unwrap(pvmm::make_endpoint_bootstrap(name, rank, size, std::chrono::milliseconds(timeout_ms)));
            }
            return make_team(std::move(b), device, timeout_ms);
          },
          "name"_a, "rank"_a, "size"_a, "device"_a = 0, "timeout_ms"_a = 30000, "A team over pvmm's named endpoints.")
      .def_prop_ro("rank", [](const py_team& t) { return t.h.use("rank")->rank(); })
      .def_prop_ro("size", [](const py_team& t) { return t.h.use("size")->size(); })
      .def_prop_ro("device", [](const py_team& t) { return t.h.use("device")->device(); })
      .def_prop_ro("node_count", [](const py_team& t) { return t.h.use("node_count")->node_count(); })
      .def_prop_ro(
          "closed", [](const py_team& t) { return t.h.closed(); }, "Whether close() was called.")
      .def(
          "barrier",
          [](const py_team& t, int timeout_ms) {
            auto team = t.h.use("barrier");
            nb::gil_scoped_release release;
            unwrap(team->ranks().barrier(pvmm::deadline_in(std::chrono::milliseconds(timeout_ms))));
          },
          "timeout_ms"_a = 30000)
      .def("close", [](py_team& t) { release_without_gil(t.h.take()); })
      .def(
          "__enter__", [](py_team& self) -> py_team& { return self; }, nb::rv_policy::reference)
      .def("__exit__", [](py_team& t, nb::args) { release_without_gil(t.h.take()); })
      .def("__repr__", [](const py_team& t) {
        auto team = t.h.try_use();
        if (!team) return std::string("<pvmm.Team closed>");
        return "<pvmm.Team rank=" + std::to_string(team->rank()) + " size=" + std::to_string(team->size()) + ">";
      });
}

}  // namespace pvmm_py
