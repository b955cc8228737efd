// pvmm.Team: N ranks over a Python store, a Python allgather (mpi4py) or pvmm's named endpoints.
//
// Lock rule (docs/design.md "Bindings"): team creation releases the GIL; the store callbacks take it back. pvmm
// holds none of its locks while it calls them, so the GIL stays the outermost lock.
#include <nanobind/stl/string.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "blocking.hpp"
#include "team_bootstrap.hpp"
#include "team_objects.hpp"

namespace pvmm_py {

using namespace nb::literals;

namespace {

/// Makes a team from the bootstrap `make_bootstrap` returns, on a worker thread (run_interruptible): a signal or a
/// callback's exception aborts the bootstrap (peers get peer_lost naming this rank) and is raised as itself.
template <class MakeBootstrap>
py_team make_team(MakeBootstrap make_bootstrap, const std::shared_ptr<callback_errors>& errors, int device,
                  std::chrono::milliseconds timeout) {
  pvmm::team_options o;
  o.device = device;
  o.timeout = timeout;
  struct made {
    std::mutex lock;
    std::shared_ptr<pvmm::bootstrap> bootstrap;
  };
  auto state = std::make_shared<made>();
  auto create = [state, o, make_bootstrap = std::move(make_bootstrap)]() -> pvmm::result<std::shared_ptr<pvmm::team>> {
    pvmm::result<std::shared_ptr<pvmm::bootstrap>> b = make_bootstrap();
    if (!b) return std::move(b).error();
    {
      std::lock_guard<std::mutex> guard(state->lock);
      state->bootstrap = *b;
    }
    auto t = pvmm::team::create(*b, o);
    if (!t) return std::move(t).error();
    return std::make_shared<pvmm::team>(std::move(*t));
  };
  auto cancel = [state] {
    std::shared_ptr<pvmm::bootstrap> b;
    {
      std::lock_guard<std::mutex> guard(state->lock);
      b = state->bootstrap;
    }
    if (b) b->abort();
  };
  auto t = run_interruptible(std::move(create), cancel, *errors);
  py_team out;
  out.h.reset(unwrap(std::move(t)));
  return out;
}

constexpr const char* minimal_store_cost =
    "A store with only set and a blocking get works, at a cost: pvmm cannot ask it whether a key exists without "
    "waiting, so it does not look for a peer's abort there (a lost peer is seen when its keys do not arrive) and "
    "a key that is late holds the call for the store's own get timeout at most. check(keys) or wait(keys, "
    "timedelta) avoid both.";

}  // namespace

void bind_team(nb::module_& m) {
  closable(nb::class_<py_team>(m, "Team", "N ranks, each mapping every peer's window memory."))
      .def_static(
          "over_store",
          [](nb::object store, int rank, int size, const std::string& prefix, int device, std::int64_t timeout_ms) {
            const auto timeout = checked_timeout(timeout_ms, "pvmm.Team.over_store");
            auto errors = std::make_shared<callback_errors>();
            auto kv = std::make_shared<pvmm::key_value_store>(python_store(std::move(store), errors));
            auto make = [kv, prefix, rank, size, timeout] {
              return pvmm::make_store_bootstrap(std::move(*kv), prefix, rank, size, timeout);
            };
            return make_team(make, errors, device, timeout);
          },
          "store"_a, "rank"_a, "size"_a, "prefix"_a = "pvmm", "device"_a = 0, "timeout_ms"_a = 30000,
          (std::string("A team over any object with set(key, bytes) and get(key) blocking until the key exists, and "
                       "check(keys) -> bool or wait(keys, timedelta) used where present: a torch.distributed Store "
                       "works. An exception from set, or a BaseException that is not an Exception from get "
                       "(KeyboardInterrupt), propagates as itself and aborts the team; an Exception from get or wait "
                       "is the key not arriving in time. Ctrl-C is seen within 100 ms. ") +
           minimal_store_cost)
              .c_str())
      .def_static(
          "over_allgather",
          [](nb::object allgather, int rank, int size, int node, int local_rank, int local_size, int device,
             std::int64_t timeout_ms) {
            const auto timeout = checked_timeout(timeout_ms, "pvmm.Team.over_allgather");
            if (rank < 0 || size <= 0 || rank >= size || size > pvmm::bootstrap::max_ranks)
              raise(pvmm::errc::invalid_argument, "pvmm.Team.over_allgather",
                    "rank must be in [0, size) and size in [1, 65536]",
                    "rank=" + std::to_string(rank) + ", size=" + std::to_string(size));
            auto errors = std::make_shared<callback_errors>();
            auto b =
                python_allgather_bootstrap(std::move(allgather), rank, size, node, local_rank < 0 ? rank : local_rank,
                                           local_size < 0 ? size : local_size, errors);
            auto make = [b]() -> pvmm::result<std::shared_ptr<pvmm::bootstrap>> { return b; };
            return make_team(make, errors, device, timeout);
          },
          "allgather"_a, "rank"_a, "size"_a, "node"_a = 0, "local_rank"_a = -1, "local_size"_a = -1, "device"_a = 0,
          "timeout_ms"_a = 30000,
          "A team over a Python allgather: fn(bytes) -> list of every rank's bytes (mpi4py: comm.allgather; "
          "pvmm.team_over_mpi wraps it). node/local_rank/local_size default to one node. An exception the callable "
          "raises propagates as itself (the team aborts: peers get peer_lost naming this rank).")
      .def_static(
          "over_endpoints",
          [](const std::string& name, int rank, int size, int device, std::int64_t timeout_ms) {
            const auto timeout = checked_timeout(timeout_ms, "pvmm.Team.over_endpoints");
            auto errors = std::make_shared<callback_errors>();
            auto make = [name, rank, size, timeout] {
              return pvmm::make_endpoint_bootstrap(name, rank, size, timeout);
            };
            return make_team(make, errors, device, timeout);
          },
          "name"_a, "rank"_a, "size"_a, "device"_a = 0, "timeout_ms"_a = 30000, "A team over pvmm's named endpoints.")
      .def_prop_ro("rank", [](const py_team& t) { return t.h.use("rank")->rank(); })
      .def_prop_ro("size", [](const py_team& t) { return t.h.use("size")->size(); })
      .def_prop_ro("device", [](const py_team& t) { return t.h.use("device")->device(); })
      .def_prop_ro("node_count", [](const py_team& t) { return t.h.use("node_count")->node_count(); })
      .def(
          "barrier",
          [](const py_team& t, std::int64_t timeout_ms) {
            const auto timeout = checked_timeout(timeout_ms, "pvmm.Team.barrier");
            auto team = t.h.use("barrier");
            run_collective(team, [team, timeout] { return team->ranks().barrier(pvmm::deadline_in(timeout)); });
          },
          "timeout_ms"_a = 30000, "Host barrier of every rank. Ctrl-C aborts the team (peers get peer_lost).")
      .def(
          "split",
          [](const py_team& t, int color, int key, std::int64_t timeout_ms) {
            const auto timeout = checked_timeout(timeout_ms, "pvmm.Team.split");
            auto team = t.h.use("split");
            auto sub = run_collective(team, [team, color, key, timeout]() -> pvmm::result<std::shared_ptr<pvmm::team>> {
              auto s = team->split(color, key, timeout);
              if (!s) return std::move(s).error();
              return std::make_shared<pvmm::team>(std::move(*s));
            });
            py_team out;
            out.h.reset(std::move(sub));
            return out;
          },
          "color"_a, "key"_a = 0, "timeout_ms"_a = 30000,
          "Collective: the sub-team of the ranks that gave the same `color`, ranked by `key` (then by rank).")
      .def("__repr__", [](const py_team& t) {
        auto team = t.h.try_use();
        if (!team) return std::string("<pvmm.Team closed>");
        return "<pvmm.Team rank=" + std::to_string(team->rank()) + " size=" + std::to_string(team->size()) + ">";
      });
}

}  // namespace pvmm_py
