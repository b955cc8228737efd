// pvmm's fd transport from Python: named endpoints (a listener, connect) and connections that send and receive fds
// with a payload (AF_UNIX SOCK_SEQPACKET; SO_PEERCRED: only the same user by default). pvmm.sharing sends an
// ExportedBuffer or ExportedPool over one. Every wait has a deadline and releases the GIL.
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <pvmm/endpoint.hpp>

#include "common.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

struct py_connection {
  std::shared_ptr<pvmm::ipc::connection> ptr;
  pvmm::ipc::connection& get(const char* op) const {
    if (!ptr) pvmm_py::throw_closed(op);
    return *ptr;
  }
};

struct py_listener {
  std::shared_ptr<pvmm::ipc::listener> ptr;
  pvmm::ipc::listener& get(const char* op) const {
    if (!ptr) pvmm_py::throw_closed(op);
    return *ptr;
  }
};

py_connection adopt(pvmm::ipc::connection&& c) {
  return py_connection{std::make_shared<pvmm::ipc::connection>(std::move(c))};
}

template <class W>
void bind_closing(nb::class_<W>& cls) {
  cls.def(
         "close", [](W& w) { w.ptr.reset(); }, "Closes the socket (closing twice is fine).")
      .def_prop_ro("closed", [](const W& w) { return !w.ptr; })
      .def(
          "abort", [](const W& w) { w.get("abort").abort(); },
          "From any thread: a call waiting on it returns peer_lost at once, and every later one too.")
      .def(
          "__enter__", [](W& self) -> W& { return self; }, nb::rv_policy::reference)
      .def("__exit__", [](W& w, nb::args) { w.ptr.reset(); });
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
          [](const py_connection& c, const std::vector<int>& fds, nb::bytes payload, int timeout_ms) {
            auto& conn = c.get("send");
            const std::string data(payload.c_str(), payload.size());
            nb::gil_scoped_release release;
            unwrap(conn.send(fds.data(), fds.size(), data.data(), data.size(), std::chrono::milliseconds(timeout_ms)));
          },
          "fds"_a, "payload"_a, "timeout_ms"_a = 10000, "Sends one message; the fds stay the caller's.")
      .def(
          "receive",
          [](const py_connection& c, std::size_t max_fds, std::size_t max_payload, int timeout_ms) {
            auto& conn = c.get("receive");
            pvmm::ipc::received r;
            {
              nb::gil_scoped_release release;
              r = unwrap(conn.receive(max_fds, max_payload, std::chrono::milliseconds(timeout_ms)));
            }
            std::vector<int> fds;
            for (auto& fd : r.fds) fds.push_back(fd.detach());
            return std::make_pair(std::move(fds),
                                  nb::bytes(reinterpret_cast<const char*>(r.payload.data()), r.payload.size()));
          },
          "max_fds"_a = 64, "max_payload"_a = 1 << 20, "timeout_ms"_a = 10000,
          "(fds, payload) of the next message: the caller owns the fds (os.close them).")
      .def("peer",
           [](const py_connection& c) {
             auto p = unwrap(c.get("peer").peer());
             nb::dict d;
             d["pid"] = static_cast<long>(p.pid);
             d["uid"] = static_cast<long>(p.uid);
             d["gid"] = static_cast<long>(p.gid);
             return d;
           })
      .def("__repr__", [](const py_connection& c) {
        return c.ptr ? "<pvmm.Connection fd=" + std::to_string(c.ptr->native_handle()) + ">"
                     : std::string("<pvmm.Connection closed>");
      });
  bind_closing(connection);

  auto listener = nb::class_<py_listener>(m, "Listener", "Listens on a name for pvmm.connect.");
  listener
      .def_static(
          "listen",
          [](const std::string& name, int backlog) {
            return py_listener{
                std::make_shared<pvmm::ipc::listener>(unwrap(pvmm::ipc::listener::listen(name, backlog)))};
          },
          "name"_a, "backlog"_a = 64,
          "An abstract name (one network namespace) or a path starting with '/' (reaches across them).")
      .def(
          "accept",
          [](const py_listener& l, int timeout_ms) {
            auto& lis = l.get("accept");
            pvmm::ipc::connection c;
            {
              nb::gil_scoped_release release;
              c = unwrap(lis.accept(std::chrono::milliseconds(timeout_ms)));
            }
            return adopt(std::move(c));
          },
          "timeout_ms"_a = 10000, "The next connection of a process of this user (others are refused).")
      .def_prop_ro("name", [](const py_listener& l) { return l.get("name").name(); })
      .def("__repr__", [](const py_listener& l) {
        return l.ptr ? "<pvmm.Listener name=" + l.ptr->name() + ">" : std::string("<pvmm.Listener closed>");
      });
  bind_closing(listener);

  m.def(
      "connect",
      [](const std::string& name, int timeout_ms) {
        pvmm::ipc::connection c;
        {
          nb::gil_scoped_release release;
          c = unwrap(pvmm::ipc::connect(name, std::chrono::milliseconds(timeout_ms)));
        }
        return adopt(std::move(c));
      },
      "name"_a, "timeout_ms"_a = 10000,
      "Connects to the listener on `name`, waiting for it to appear until the timeout (peers start in any order).");
}

}  // namespace pvmm_py
