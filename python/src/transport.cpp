// pvmm's fd transport from Python: named endpoints (a listener, connect) and connections that send and receive fds
// with a payload (AF_UNIX SOCK_SEQPACKET; SO_PEERCRED: only the same user by default). pvmm.sharing sends an
// ExportedBuffer or ExportedPool over one. Every wait has a deadline, releases the GIL and looks for signals
// (Ctrl-C) every 100 ms.
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <pvmm/endpoint.hpp>

#include "blocking.hpp"
#include "common.hpp"
#include "holder.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using pvmm_py::checked_timeout;
using pvmm_py::closable;
using pvmm_py::holder;
using pvmm_py::release_without_gil;
using pvmm_py::wait_in_slices;

struct py_connection {
  holder<pvmm::ipc::connection> h;
};

struct py_listener {
  holder<pvmm::ipc::listener> h;
};

py_connection adopt(pvmm::ipc::connection&& c) {
  py_connection out;
  out.h.reset(std::make_shared<pvmm::ipc::connection>(std::move(c)));
  return out;
}

template <class W>
void bind_closing(nb::class_<W>& cls) {
  closable(cls, "Closes the socket (closing twice is fine; a call in another thread finishes first).")
      .def(
          "abort", [](const W& w) { w.h.use("abort")->abort(); },
          "From any thread: a call waiting on it returns peer_lost at once, and every later one too.");
}

}  // namespace

namespace pvmm_py {

void bind_transport(nb::module_& m) {
  auto connection = nb::class_<py_connection>(m, "Connection",
                                              "One end of a connection between two processes: messages of fds "
                                              "and bytes (pvmm.connect, Listener.accept).");
  connection
      .def(
          "send",
          [](const py_connection& c, const std::vector<int>& fds, nb::bytes payload, std::int64_t timeout_ms) {
            const auto timeout = checked_timeout(timeout_ms, "pvmm.Connection.send");
            auto conn = c.h.use("send");
            const std::string data(payload.c_str(), payload.size());
            unwrap(wait_in_slices(timeout, [&](std::chrono::milliseconds slice) {
              return conn->send(fds.data(), fds.size(), data.data(), data.size(), slice);
            }));
          },
          "fds"_a, "payload"_a, "timeout_ms"_a = 10000, "Sends one message; the fds stay the caller's.")
      .def(
          "receive",
          [](const py_connection& c, std::size_t max_fds, std::size_t max_payload, std::int64_t timeout_ms) {
            const auto timeout = checked_timeout(timeout_ms, "pvmm.Connection.receive");
            auto conn = c.h.use("receive");
            pvmm::ipc::received r = unwrap(wait_in_slices(
                timeout, [&](std::chrono::milliseconds slice) { return conn->receive(max_fds, max_payload, slice); }));
            std::vector<int> fds;
            for (auto& fd : r.fds) fds.push_back(fd.detach());
            return std::make_pair(std::move(fds),
                                  nb::bytes(reinterpret_cast<const char*>(r.payload.data()), r.payload.size()));
          },
          "max_fds"_a = 64, "max_payload"_a = 1 << 20, "timeout_ms"_a = 10000,
          "(fds, payload) of the next message: the caller owns the fds (os.close them).")
      .def("peer",
           [](const py_connection& c) {
             auto p = unwrap(c.h.use("peer")->peer());
             return dict_of("pid", static_cast<long>(p.pid), "uid", static_cast<long>(p.uid), "gid",
                            static_cast<long>(p.gid));
           })
      .def("__repr__", [](const py_connection& c) {
        auto conn = c.h.try_use();
        return conn ? "<pvmm.Connection fd=" + std::to_string(conn->native_handle()) + ">"
                    : std::string("<pvmm.Connection closed>");
      });
  bind_closing(connection);

  auto listener = nb::class_<py_listener>(m, "Listener", "Listens on a name for pvmm.connect.");
  listener
      .def_static(
          "listen",
          [](const std::string& name, int backlog) {
            py_listener l;
            l.h.reset(std::make_shared<pvmm::ipc::listener>(unwrap(pvmm::ipc::listener::listen(name, backlog))));
            return l;
          },
          "name"_a, "backlog"_a = 64,
          "An abstract name (one network namespace) or a path starting with '/' (reaches across them).")
      .def(
          "accept",
          [](const py_listener& l, std::int64_t timeout_ms) {
            const auto timeout = checked_timeout(timeout_ms, "pvmm.Listener.accept");
            auto lis = l.h.use("accept");
            return adopt(
                unwrap(wait_in_slices(timeout, [&](std::chrono::milliseconds slice) { return lis->accept(slice); })));
          },
          "timeout_ms"_a = 10000, "The next connection of a process of this user (others are refused).")
      .def_prop_ro("name", [](const py_listener& l) { return l.h.use("name")->name(); })
      .def("__repr__", [](const py_listener& l) {
        auto lis = l.h.try_use();
        return lis ? "<pvmm.Listener name=" + lis->name() + ">" : std::string("<pvmm.Listener closed>");
      });
  bind_closing(listener);

  m.def(
      "connect",
      [](const std::string& name, std::int64_t timeout_ms) {
        const auto timeout = checked_timeout(timeout_ms, "pvmm.connect");
        return adopt(unwrap(
            wait_in_slices(timeout, [&](std::chrono::milliseconds slice) { return pvmm::ipc::connect(name, slice); })));
      },
      "name"_a, "timeout_ms"_a = 10000,
      "Connects to the listener on `name`, waiting for it to appear until the timeout (peers start in any order).");
}

}  // namespace pvmm_py
