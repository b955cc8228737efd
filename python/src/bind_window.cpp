// pvmm.Window: a symmetric window over a pvmm.Team; every rank's slot as an array, signals and barriers.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "blocking.hpp"
#include "team_objects.hpp"
#include "views.hpp"

namespace pvmm_py {

using namespace nb::literals;

void bind_window(nb::module_& m) {
  closable(nb::class_<py_window>(m, "Window", "A symmetric window: every rank's slot mapped in every rank."))
      .def_static(
          "create",
          [](const py_team& t, std::size_t size, std::size_t max_size, std::int64_t timeout_ms, int signal_channels,
             const std::string& stream_signals) {
            pvmm::window_options o;
            o.size = size;
            o.max_size = max_size;
            o.signal_channels = signal_channels;
            if (stream_signals == "driver")
              o.stream_signals = pvmm::stream_signal_path::driver;
            else if (stream_signals != "kernel")
              raise(pvmm::errc::invalid_argument, "pvmm.Window.create",
                    "stream_signals '" + stream_signals + "' is neither 'kernel' nor 'driver'");
            o.timeout = checked_timeout(timeout_ms, "pvmm.Window.create");
            auto team = t.h.use("Window.create");
            return make_collective<py_window, pvmm::symmetric_window>(
                team, [team, o] { return pvmm::symmetric_window::create(*team, o); });
          },
          "team"_a, "size"_a, "max_size"_a = 0, "timeout_ms"_a = 30000, "signal_channels"_a = 0,
          "stream_signals"_a = "kernel",
          "Collective: every rank calls it. signal_channels > 0 gives signal pads (put_signal, wait_signal, barrier). "
          "stream_signals: 'kernel' (a bounded-spin kernel per call; mixes with device code) or 'driver' (the "
          "driver's stream waits, deadlines kept by a watchdog thread: cheap when processes share a GPU); the same on "
          "every rank. "
          "Ctrl-C aborts the team (peers get peer_lost naming this rank).")
      .def_prop_ro("rank", [](const py_window& w) { return w.h.use("rank")->object.rank(); })
      .def_prop_ro("size", [](const py_window& w) { return w.h.use("size")->object.size(); })
      .def_prop_ro("stride", [](const py_window& w) { return w.h.use("stride")->object.stride(); })
      .def(
          "size_of", [](const py_window& w, int rank) { return w.h.use("size_of")->object.size_of(rank); }, "rank"_a)
      .def(
          "address",
          [](const py_window& w, int rank) {
            return reinterpret_cast<std::uintptr_t>(w.h.use("address")->object.peer(rank));
          },
          "rank"_a)
      .def(
          "get_buffer",
          [](const py_window& w, int rank, const std::string& dtype, std::optional<std::vector<std::size_t>> shape,
             std::size_t offset) {
            auto share = w.h.use("get_buffer");
            auto& win = share->object;
            void* p = win.peer(rank);
            if (!p)
              raise(pvmm::errc::not_mapped, "pvmm.Window.get_buffer",
                    rank < 0 || rank >= win.size() ? "no such rank" : win.unmapped_reason(rank),
                    "rank=" + std::to_string(rank));
            return make_view(w.h.pin("get_buffer"), p, win.size_of(rank), memory_label::device, share->team->device(),
                             view_spec{dtype, std::move(shape), offset, false});
          },
          "rank"_a, "dtype"_a = "uint8", "shape"_a = nb::none(), "offset"_a = 0,
          "Rank `rank`'s slot as an array of `dtype` and `shape` (PyTorch SymmetricMemory's get_buffer); the array "
          "keeps the window alive.")
      .def(
          "grow",
          [](const py_window& w, std::size_t new_size, std::int64_t timeout_ms) {
            timed_collective(
                w.h, "pvmm.Window.grow", "grow", timeout_ms,
                [new_size](pvmm::symmetric_window& win, std::chrono::milliseconds t) { return win.grow(new_size, t); });
          },
          "new_size"_a, "timeout_ms"_a = 30000, "Collective. Ctrl-C aborts the team.")
      .def(
          "put_signal",
          [](const py_window& w, int peer, int channel, nb::handle stream) {
            auto share = w.h.use("put_signal");
            auto& win = share->object;
            const auto on = pvmm_py::stream_of(stream, share->team->device());
            nb::gil_scoped_release release;
            unwrap(win.put_signal(peer, channel, on));
          },
          "peer"_a, "channel"_a, "stream"_a, "Enqueues a signal to rank `peer` on `channel` (stream-ordered).")
      .def(
          "wait_signal",
          [](const py_window& w, int peer, int channel, nb::handle stream, std::int64_t timeout_ms) {
            const auto timeout = checked_timeout(timeout_ms, "pvmm.Window.wait_signal");
            auto share = w.h.use("wait_signal");
            auto& win = share->object;
            const auto on = pvmm_py::stream_of(stream, share->team->device());
            nb::gil_scoped_release release;
            unwrap(win.wait_signal(peer, channel, on, timeout));
          },
          "peer"_a, "channel"_a, "stream"_a, "timeout_ms"_a = 10000,
          "Enqueues a bounded wait for rank `peer`'s next signal on `channel`; signal_status() reports an expiry.")
      .def(
          "barrier",
          [](const py_window& w, int channel, nb::handle stream, std::int64_t timeout_ms) {
            const auto timeout = checked_timeout(timeout_ms, "pvmm.Window.barrier");
            auto share = w.h.use("barrier");
            auto& win = share->object;
            const auto on = pvmm_py::stream_of(stream, share->team->device());
            nb::gil_scoped_release release;
            unwrap(win.barrier(channel, on, timeout));
          },
          "channel"_a, "stream"_a, "timeout_ms"_a = 10000,
          "Enqueues a barrier over the signal pads of `channel` (arguments in the order of every signalling wait: "
          "channel, stream, timeout).")
      .def(
          "signal_status",
          [](const py_window& w) {
            auto share = w.h.use("signal_status");
            auto& win = share->object;
            nb::gil_scoped_release release;  // blocks: a copy from the device
            unwrap(win.signal_status());
          },
          "Raises TimeoutError (pvmm's) naming the rank and channel of the first wait that expired here.")
      .def(
          "device_pointer_table",
          [](const py_window& w) {
            return reinterpret_cast<std::uintptr_t>(
                unwrap(w.h.use("device_pointer_table")->object.device_pointer_table()));
          },
          "The address of the peer table in the team device's memory (for kernels).")
      .def("__repr__", [](const py_window& w) {
        auto share = w.h.try_use();
        if (!share) return std::string("<pvmm.Window closed>");
        return "<pvmm.Window rank=" + std::to_string(share->object.rank()) +
               " ranks=" + std::to_string(share->object.size()) + ">";
      });
}

}  // namespace pvmm_py
