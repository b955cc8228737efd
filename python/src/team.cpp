// Teams and symmetric windows from Python: a team over any store object (set/get, optionally wait: a
// torch.distributed Store works) or over pvmm's endpoints; a window's slot of any rank as an array.
//
// Lock rule (docs/design.md "Bindings"): team creation releases the GIL; the store callbacks take it back. pvmm
// holds none of its locks while it calls them, so the GIL stays the outermost lock.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <pvmm/bootstrap.hpp>
#include <pvmm/team.hpp>

#include "common.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace pvmm_py {
// module.cpp
nb::ndarray<nb::array_api> make_array(std::shared_ptr<void> keep, void* data, std::size_t size, int device,
                                      const std::string& dtype, std::optional<std::vector<std::size_t>> shape,
                                      std::size_t offset);
/// A pvmm.Stream, or a foreign stream (int handle, __cuda_stream__, torch's, CuPy's) of `device`.
pvmm::stream_ref stream_of(nb::handle obj, int device);
}  // namespace pvmm_py

namespace {

using pvmm_py::unwrap;

pvmm::error store_error(const char* what, const std::string& key, nb::python_error& e) {
  pvmm::error err;
  err.code = pvmm::errc::timeout;
  err.operation = what;
  err.arguments = "key=" + key;
  err.detail = std::string("the store raised: ") + e.what();
  err.hint = "a store's get must block until the key exists (bounded by its own timeout)";
  return err;
}

/// pvmm's key_value_store over a Python object with set(key, bytes) and get(key), and check(keys) -> bool (polled
/// until the deadline, GIL released in between) or else wait(keys, timedelta): torch.distributed.Store has all.
pvmm::key_value_store python_store(nb::object store) {
  auto holder = std::shared_ptr<nb::object>(new nb::object(std::move(store)), [](nb::object* o) {
    nb::gil_scoped_acquire gil;
    delete o;
  });
  pvmm::key_value_store kv;
  kv.set = [holder](const std::string& key, const std::vector<std::uint8_t>& value) -> pvmm::status {
    nb::gil_scoped_acquire gil;
    try {
      holder->attr("set")(key, nb::bytes(reinterpret_cast<const char*>(value.data()), value.size()));
    } catch (nb::python_error& e) {
      return store_error("store.set", key, e);
    }
    return {};
  };
  kv.get = [holder](const std::string& key, pvmm::deadline until) -> pvmm::result<std::vector<std::uint8_t>> {
    nb::gil_scoped_acquire gil;
    try {
      nb::list keys;
      keys.append(key);
      if (nb::hasattr(*holder, "check")) {
        // Polls without blocking (torch.distributed.Store.check) until the key exists or the deadline passes.
        auto pause = std::chrono::microseconds(200);
        while (!nb::cast<bool>(holder->attr("check")(keys))) {
          if (std::chrono::steady_clock::now() >= until) {
            pvmm::error err;
            err.code = pvmm::errc::timeout;
            err.operation = "store.get";
            err.arguments = "key=" + key;
            err.detail = "the key did not appear before the deadline";
            return err;
          }
          {
            nb::gil_scoped_release release;
            std::this_thread::sleep_for(pause);
          }
          pause = std::min(pause * 2, std::chrono::microseconds(10000));
        }
      } else if (nb::hasattr(*holder, "wait")) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
        nb::module_ datetime = nb::module_::import_("datetime");
        holder->attr("wait")(keys, datetime.attr("timedelta")("milliseconds"_a = std::max<long long>(left.count(), 0)));
      }
      nb::object v = holder->attr("get")(key);
      if (nb::isinstance<nb::str>(v)) v = v.attr("encode")();
      auto b = nb::cast<nb::bytes>(v);
      const auto* p = reinterpret_cast<const std::uint8_t*>(b.c_str());
      return std::vector<std::uint8_t>(p, p + b.size());
    } catch (nb::python_error& e) {
      return store_error("store.get", key, e);
    }
  };
  return kv;
}

/// A bootstrap whose allgather is a Python callable: fn(bytes) -> list of `size` bytes objects (or their
/// concatenation), every rank calling it in the same order. mpi4py: `lambda b: comm.allgather(b)`. What the
/// callable returns is checked (a peer's bytes are not trusted): a wrong count or length is errc::protocol_error.
class python_bootstrap final : public pvmm::bootstrap {
 public:
  python_bootstrap(nb::object fn, int rank, int size, int node, int local_rank, int local_size)
      : fn_(new nb::object(std::move(fn)),
            [](nb::object* o) {
              nb::gil_scoped_acquire gil;
              delete o;
            }),
        rank_(rank),
        size_(size),
        node_(node),
        local_rank_(local_rank),
        local_size_(local_size) {}
  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  int node() const noexcept override { return node_; }
  int local_rank() const noexcept override { return local_rank_; }
  int local_size() const noexcept override { return local_size_; }
  const char* adapter() const noexcept override { return "python"; }

 private:
  pvmm::status do_allgather(const void* mine, std::size_t bytes, void* all, std::uint64_t, pvmm::deadline) override {
    nb::gil_scoped_acquire gil;
    pvmm::error err;
    err.operation = "pvmm.Team.over_allgather";
    err.arguments = "bytes=" + std::to_string(bytes);
    try {
      nb::object out = (*fn_)(nb::bytes(static_cast<const char*>(mine), bytes));
      auto* dst = static_cast<unsigned char*>(all);
      if (nb::isinstance<nb::bytes>(out)) {
        auto b = nb::cast<nb::bytes>(out);
        if (b.size() != bytes * static_cast<std::size_t>(size_)) {
          err.code = pvmm::errc::protocol_error;
          err.detail = "the allgather returned " + std::to_string(b.size()) + " bytes";
          return err;
        }
        std::memcpy(dst, b.c_str(), b.size());
        return {};
      }
      auto parts = nb::cast<std::vector<nb::bytes>>(out);
      if (parts.size() != static_cast<std::size_t>(size_)) {
        err.code = pvmm::errc::protocol_error;
        err.detail =
            "the allgather returned " + std::to_string(parts.size()) + " parts for " + std::to_string(size_) + " ranks";
        return err;
      }
      for (std::size_t r = 0; r < parts.size(); ++r) {
        if (parts[r].size() != bytes) {
          err.code = pvmm::errc::protocol_error;
          err.detail = "rank " + std::to_string(r) + " gave " + std::to_string(parts[r].size()) + " bytes";
          return err;
        }
        std::memcpy(dst + r * bytes, parts[r].c_str(), bytes);
      }
      return {};
    } catch (nb::python_error& e) {
      err.code = pvmm::errc::peer_lost;
      err.detail = std::string("the allgather raised: ") + e.what();
      return err;
    } catch (nb::cast_error&) {
      err.code = pvmm::errc::protocol_error;
      err.detail = "the allgather returned neither bytes nor a list of bytes";
      return err;
    }
  }
  void do_abort() noexcept override {}

  std::shared_ptr<nb::object> fn_;
  int rank_, size_, node_, local_rank_, local_size_;
};

struct py_team {
  std::shared_ptr<pvmm::team> ptr;
  pvmm::team& get(const char* op) const {
    if (!ptr) pvmm_py::throw_closed(op);
    return *ptr;
  }
};

struct window_share {
  std::shared_ptr<pvmm::team> team;  // the window's team lives while the window does
  pvmm::symmetric_window window;
  ~window_share() {
    nb::gil_scoped_release release;  // release() may wait for peers
    (void)window.release();
  }
};

struct py_window {
  std::shared_ptr<window_share> ptr;
  pvmm::symmetric_window& get(const char* op) const {
    if (!ptr) pvmm_py::throw_closed(op);
    return ptr->window;
  }
};

py_team make_team(std::shared_ptr<pvmm::bootstrap> b, int device, int timeout_ms) {
  pvmm::team_options o;
  o.device = device;
  o.timeout = std::chrono::milliseconds(timeout_ms);
  py_team t;
  {
    nb::gil_scoped_release release;
    t.ptr = std::make_shared<pvmm::team>(unwrap(pvmm::team::create(std::move(b), o)));
  }
  return t;
}

}  // namespace

namespace pvmm_py {

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
            if (rank < 0 || size <= 0 || rank >= size || size > pvmm::bootstrap::max_ranks) {
              pvmm::error e;
              e.code = pvmm::errc::invalid_argument;
              e.operation = "pvmm.Team.over_allgather";
              e.arguments = "rank=" + std::to_string(rank) + ", size=" + std::to_string(size);
              e.detail = "rank must be in [0, size) and size in [1, 65536]";
              throw pvmm::exception(e);
            }
            auto b = std::make_shared<python_bootstrap>(std::move(allgather), rank, size, node,
                                                        local_rank < 0 ? rank : local_rank,
                                                        local_size < 0 ? size : local_size);
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
      .def_prop_ro("rank", [](const py_team& t) { return t.get("rank").rank(); })
      .def_prop_ro("size", [](const py_team& t) { return t.get("size").size(); })
      .def_prop_ro("device", [](const py_team& t) { return t.get("device").device(); })
      .def_prop_ro("node_count", [](const py_team& t) { return t.get("node_count").node_count(); })
      .def(
          "barrier",
          [](const py_team& t, int timeout_ms) {
            auto& team = t.get("barrier");
            nb::gil_scoped_release release;
            unwrap(team.ranks().barrier(pvmm::deadline_in(std::chrono::milliseconds(timeout_ms))));
          },
          "timeout_ms"_a = 30000)
      .def("close",
           [](py_team& t) {
             nb::gil_scoped_release release;
             t.ptr.reset();
           })
      .def(
          "__enter__", [](py_team& self) -> py_team& { return self; }, nb::rv_policy::reference)
      .def("__exit__",
           [](py_team& t, nb::args) {
             nb::gil_scoped_release release;
             t.ptr.reset();
           })
      .def("__repr__", [](const py_team& t) {
        if (!t.ptr) return std::string("<pvmm.Team closed>");
        return "<pvmm.Team rank=" + std::to_string(t.ptr->rank()) + " size=" + std::to_string(t.ptr->size()) + ">";
      });

  nb::class_<py_window>(m, "Window", "A symmetric window: every rank's slot mapped in every rank.")
      .def_static(
          "create",
          [](const py_team& t, std::size_t size, std::size_t max_size, int timeout_ms, int signal_channels) {
            pvmm::window_options o;
            o.size = size;
            o.max_size = max_size;
            o.signal_channels = signal_channels;
            o.timeout = std::chrono::milliseconds(timeout_ms);
            auto share = std::make_shared<window_share>();
            share->team = t.ptr;
            auto& team = t.get("Window.create");
            {
              nb::gil_scoped_release release;
              share->window = unwrap(pvmm::symmetric_window::create(team, o));
            }
            return py_window{share};
          },
          "team"_a, "size"_a, "max_size"_a = 0, "timeout_ms"_a = 30000, "signal_channels"_a = 0,
          "Collective: every rank calls it. signal_channels > 0 gives signal pads (put_signal, wait_signal, barrier).")
      .def_prop_ro("rank", [](const py_window& w) { return w.get("rank").rank(); })
      .def_prop_ro("size", [](const py_window& w) { return w.get("size").size(); })
      .def_prop_ro("stride", [](const py_window& w) { return w.get("stride").stride(); })
      .def(
          "size_of", [](const py_window& w, int rank) { return w.get("size_of").size_of(rank); }, "rank"_a)
      .def(
          "address",
          [](const py_window& w, int rank) { return reinterpret_cast<std::uintptr_t>(w.get("address").peer(rank)); },
          "rank"_a)
      .def(
          "get_buffer",
          [](const py_window& w, int rank, const std::string& dtype, std::optional<std::vector<std::size_t>> shape,
             std::size_t offset) {
            auto& win = w.get("get_buffer");
            void* p = win.peer(rank);
            if (!p) {
              pvmm::error e;
              e.code = pvmm::errc::not_mapped;
              e.operation = "pvmm.Window.get_buffer";
              e.arguments = "rank=" + std::to_string(rank);
              e.detail = rank < 0 || rank >= win.size() ? "no such rank" : win.unmapped_reason(rank);
              throw pvmm::exception(e);
            }
            return make_array(w.ptr, p, win.size_of(rank), w.ptr->team->device(), dtype, std::move(shape), offset);
          },
          "rank"_a, "dtype"_a = "uint8", "shape"_a = nb::none(), "offset"_a = 0,
          "Rank `rank`'s slot as an array of `dtype` and `shape` (PyTorch SymmetricMemory's get_buffer); the array "
          "keeps the window alive.")
      .def(
          "grow",
          [](const py_window& w, std::size_t new_size, int timeout_ms) {
            auto& win = w.get("grow");
            nb::gil_scoped_release release;
            unwrap(win.grow(new_size, std::chrono::milliseconds(timeout_ms)));
          },
          "new_size"_a, "timeout_ms"_a = 30000)
      .def(
          "put_signal",
          [](const py_window& w, int peer, int channel, nb::handle stream) {
            auto& win = w.get("put_signal");
            const auto on = pvmm_py::stream_of(stream, w.ptr->team->device());
            nb::gil_scoped_release release;
            unwrap(win.put_signal(peer, channel, on));
          },
          "peer"_a, "channel"_a, "stream"_a, "Enqueues a signal to rank `peer` on `channel` (stream-ordered).")
      .def(
          "wait_signal",
          [](const py_window& w, int peer, int channel, nb::handle stream, int timeout_ms) {
            auto& win = w.get("wait_signal");
            const auto on = pvmm_py::stream_of(stream, w.ptr->team->device());
            nb::gil_scoped_release release;
            unwrap(win.wait_signal(peer, channel, on, std::chrono::milliseconds(timeout_ms)));
          },
          "peer"_a, "channel"_a, "stream"_a, "timeout_ms"_a = 10000,
          "Enqueues a bounded wait for rank `peer`'s next signal on `channel`; signal_status() reports an expiry.")
      .def(
          "barrier",
          [](const py_window& w, nb::handle stream, int timeout_ms, int channel) {
            auto& win = w.get("barrier");
            const auto on = pvmm_py::stream_of(stream, w.ptr->team->device());
            nb::gil_scoped_release release;
            unwrap(win.barrier(on, std::chrono::milliseconds(timeout_ms), channel));
          },
          "stream"_a, "timeout_ms"_a = 10000, "channel"_a = 0, "Enqueues a barrier over the signal pads.")
      .def(
          "signal_status",
          [](const py_window& w) {
            auto& win = w.get("signal_status");
            nb::gil_scoped_release release;  // blocks: a copy from the device
            unwrap(win.signal_status());
          },
          "Raises TimeoutError (pvmm's) naming the rank and channel of the first wait that expired here.")
      .def(
          "device_pointer_table",
          [](const py_window& w) {
            return reinterpret_cast<std::uintptr_t>(unwrap(w.get("device_pointer_table").device_pointer_table()));
          },
          "The address of the peer table in the team device's memory (for kernels).")
      .def("close", [](py_window& w) { w.ptr.reset(); })
      .def(
          "__enter__", [](py_window& self) -> py_window& { return self; }, nb::rv_policy::reference)
      .def("__exit__", [](py_window& w, nb::args) { w.ptr.reset(); })
      .def("__repr__", [](const py_window& w) {
        if (!w.ptr) return std::string("<pvmm.Window closed>");
        return "<pvmm.Window rank=" + std::to_string(w.ptr->window.rank()) +
               " ranks=" + std::to_string(w.ptr->window.size()) + ">";
      });
}

}  // namespace pvmm_py
