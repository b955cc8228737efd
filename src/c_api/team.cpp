// The C interface: teams and symmetric windows (pvmm/c/team.h over pvmm/team.hpp).
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include <pvmm/team.hpp>

#include "c_api/abi.hpp"
#include "c_api/common.hpp"
#include "c_api/team_entries.hpp"
#include "core/timeout.hpp"

using namespace pvmm::c_api;

namespace {
// A C stream reference as pvmm's (outside extern "C": it returns a C++ type).
pvmm::stream_ref signal_stream(pvmm_stream_ref s) { return pvmm::stream_ref(pvmm::stream_handle{s.native}, s.device); }

struct window_entry {
  std::shared_ptr<pvmm::team> members;  // the window's team stays alive while the window does
  pvmm::symmetric_window window;
};

/// A C timeout under the one rule (core/timeout.hpp), or the failure recorded.
#define PVMM_C_TIMEOUT(name, ms, parameter) PVMM_C_TRY(name, ::pvmm::detail::checked_timeout(ms, parameter))

/// What team and window creation read first: options and out present, options of a size this library reads (its
/// prefix over PVMM_INIT's defaults).
template <class Options, class Handle>
pvmm::result<Options> read_options(const Options* options, const Handle* out, Options defaults) {
  if (options == nullptr) return pvmm::detail::bare_error(pvmm::errc::invalid_argument);
  if (out == nullptr) return pvmm::detail::bare_error(pvmm::errc::invalid_argument);
  if (!size_readable<Options>(options->struct_size)) return pvmm::detail::bare_error(pvmm::errc::version_mismatch);
  return read_prefix(*options, defaults);
}
/// The failure read_options found, recorded with its text.
template <class Options, class Handle>
pvmm_status options_failure(const Options* options, const Handle* out, const char* type, const char* op) {
  if (options == nullptr) return null_argument(op, "options");
  if (out == nullptr) return null_argument(op, "out");
  return wrong_size(op, type, options->struct_size, first_published<Options>::size, sizeof(Options));
}
/// Team and window creation: the options read (read_options, `type` names their struct), their timeout_ms under the
/// one rule (`timeout_name` names the field), then make(options, timeout); each failure recorded with its text.
template <class Options, class Handle, class Make>
pvmm_status timed_options_entry(const char* op, const Options* options, Handle* out, Options defaults, const char* type,
                                const char* timeout_name, Make&& make) noexcept {
  return guard(op, [&]() -> pvmm_status {
    auto given = read_options(options, out, defaults);
    if (!given) return options_failure(options, out, type, op);
    PVMM_C_TIMEOUT(timeout, given->timeout_ms, timeout_name);
    return make(*given, *timeout);
  });
}

}  // namespace

extern "C" {

pvmm_status pvmm_team_create(pvmm_bootstrap ranks, const pvmm_team_options* options, pvmm_team* out) noexcept {
  constexpr const char* op = "pvmm_team_create";
  return timed_options_entry(
      op, options, out, PVMM_INIT(pvmm_team_options), "pvmm_team_options", "pvmm_team_options.timeout_ms",
      [&](const pvmm_team_options& given, std::chrono::milliseconds timeout) -> pvmm_status {
        if (given.access_devices == nullptr && given.access_device_count != 0)
          return null_argument(op, "pvmm_team_options.access_devices");
        PVMM_C_FIND(bootstrap_entry, bootstrap, b, ranks, op);
        pvmm::team_options o;
        o.device = given.device;
        o.timeout = timeout;
        o.access_devices.assign(given.access_devices, given.access_devices + given.access_device_count);
        return adopt_result(kind::team, pvmm::team::create(b->ranks, o), out);
      });
}

pvmm_status pvmm_team_release(pvmm_team team) noexcept {
  return release_entry<pvmm::team>(kind::team, team.id, "pvmm_team_release");
}

pvmm_status pvmm_team_abort(pvmm_team team) noexcept {
  constexpr const char* op = "pvmm_team_abort";
  return guard(op, [&] {
    PVMM_C_FIND(pvmm::team, team, t, team, op);
    t->abort();
    return pvmm_status_ok;
  });
}

pvmm_status pvmm_team_info(pvmm_team team, int* rank, int* size, int* device, int* node_count) noexcept {
  constexpr const char* op = "pvmm_team_info";
  return guard(op, [&] {
    PVMM_C_FIND(pvmm::team, team, t, team, op);
    if (!t->valid()) return fail(pvmm::errc::already_released, op, "the team was released");
    if (rank != nullptr) *rank = t->rank();
    if (size != nullptr) *size = t->size();
    if (device != nullptr) *device = t->device();
    if (node_count != nullptr) *node_count = t->node_count();
    return pvmm_status_ok;
  });
}

pvmm_status pvmm_window_create(pvmm_team team, const pvmm_window_options* options, pvmm_window* out) noexcept {
  constexpr const char* op = "pvmm_window_create";
  return timed_options_entry(op, options, out, PVMM_INIT(pvmm_window_options), "pvmm_window_options",
                             "pvmm_window_options.timeout_ms",
                             [&](const pvmm_window_options& given, std::chrono::milliseconds timeout) -> pvmm_status {
                               PVMM_C_FIND(pvmm::team, team, t, team, op);
                               pvmm::window_options o;
                               o.size = given.size;
                               o.max_size = given.max_size;
                               o.timeout = timeout;
                               o.signal_channels = given.signal_channels;
                               // Out of int's range is still out of the enum's: create refuses it on this rank
                               // while taking part, so every rank fails at once naming it.
                               o.stream_signals = static_cast<pvmm::stream_signal_path>(
                                   static_cast<int>(std::clamp<std::int64_t>(given.stream_signals, INT_MIN, INT_MAX)));
                               PVMM_C_TRY(w, pvmm::symmetric_window::create(*t, o));
                               return adopt(kind::window, window_entry{t, std::move(*w)}, out);
                             });
}

pvmm_status pvmm_window_release(pvmm_window window) noexcept {
  constexpr const char* op = "pvmm_window_release";
  return guard(op, [&] {
    PVMM_C_TRY(w, take(kind::window, window.id, op));
    if (auto* alone = w->alone<window_entry>()) return report(alone->window.release());
    return pvmm_status_ok;  // torn down when the call inside it ends
  });
}

pvmm_status pvmm_window_grow(pvmm_window window, size_t new_size, int64_t timeout_ms) noexcept {
  constexpr const char* op = "pvmm_window_grow";
  return guard(op, [&] {
    PVMM_C_FIND(window_entry, window, w, window, op);
    PVMM_C_TIMEOUT(timeout, timeout_ms, "timeout_ms");
    return report(w->window.grow(new_size, *timeout));
  });
}

pvmm_status pvmm_window_base(pvmm_window window, void** base, size_t* stride) noexcept {
  constexpr const char* op = "pvmm_window_base";
  return guard(op, [&] {
    PVMM_C_NEED(base, op);
    PVMM_C_FIND(window_entry, window, w, window, op);
    *base = w->window.base();
    if (stride != nullptr) *stride = w->window.stride();
    return pvmm_status_ok;
  });
}

pvmm_status pvmm_window_peer(pvmm_window window, int rank, void** address, size_t* size) noexcept {
  constexpr const char* op = "pvmm_window_peer";
  return guard(op, [&] {
    PVMM_C_NEED(address, op);
    PVMM_C_FIND(window_entry, window, w, window, op);
    if (rank < 0 || rank >= w->window.size()) {
      return fail(pvmm::errc::invalid_argument, op,
                  "rank " + std::to_string(rank) + " is not in [0, " + std::to_string(w->window.size()) + ")");
    }
    void* at = w->window.peer(rank);
    if (at == nullptr) return fail(pvmm::errc::not_mapped, op, w->window.unmapped_reason(rank));
    *address = at;
    if (size != nullptr) *size = w->window.size_of(rank);
    return pvmm_status_ok;
  });
}

pvmm_status pvmm_window_put_signal(pvmm_window window, int peer, int channel, pvmm_stream_ref on) noexcept {
  constexpr const char* op = "pvmm_window_put_signal";
  return guard(op, [&] {
    PVMM_C_FIND(window_entry, window, w, window, op);
    return report(w->window.put_signal(peer, channel, signal_stream(on)));
  });
}

pvmm_status pvmm_window_wait_signal(pvmm_window window, int peer, int channel, pvmm_stream_ref on,
                                    int64_t timeout_ms) noexcept {
  constexpr const char* op = "pvmm_window_wait_signal";
  return guard(op, [&] {
    PVMM_C_FIND(window_entry, window, w, window, op);
    PVMM_C_TIMEOUT(timeout, timeout_ms, "timeout_ms");
    return report(w->window.wait_signal(peer, channel, signal_stream(on), *timeout));
  });
}

pvmm_status pvmm_window_barrier(pvmm_window window, int channel, pvmm_stream_ref on, int64_t timeout_ms) noexcept {
  constexpr const char* op = "pvmm_window_barrier";
  return guard(op, [&] {
    PVMM_C_FIND(window_entry, window, w, window, op);
    PVMM_C_TIMEOUT(timeout, timeout_ms, "timeout_ms");
    return report(w->window.barrier(channel, signal_stream(on), *timeout));
  });
}

pvmm_status pvmm_window_signal_status(pvmm_window window) noexcept {
  constexpr const char* op = "pvmm_window_signal_status";
  return guard(op, [&] {
    PVMM_C_FIND(window_entry, window, w, window, op);
    return report(w->window.signal_status());
  });
}

pvmm_status pvmm_window_device_pointer_table(pvmm_window window, void* const** table) noexcept {
  constexpr const char* op = "pvmm_window_device_pointer_table";
  return guard(op, [&] {
    PVMM_C_NEED(table, op);
    PVMM_C_FIND(window_entry, window, w, window, op);
    PVMM_C_TRY(t, w->window.device_pointer_table());
    *table = *t;
    return pvmm_status_ok;
  });
}

}  // extern "C"
