// The C interface: bootstraps (a C struct of function pointers adapted onto pvmm::bootstrap, and the built-in
// adapters), teams and symmetric windows (pvmm/pvmm.h over pvmm/bootstrap.hpp and pvmm/team.hpp).
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <pvmm/bootstrap.hpp>
#include <pvmm/team.hpp>

#include "c_api/common.hpp"

using namespace pvmm::c_api;

namespace {
// A C stream reference as pvmm's (outside extern "C": it returns a C++ type).
pvmm::stream_ref signal_stream(pvmm_stream_ref s) { return pvmm::stream_ref(pvmm::stream_handle{s.native}, s.device); }

thread_local std::string callback_detail;  // pvmm_bootstrap_fail_detail's text for the failure about to be returned

std::int64_t to_ns(pvmm::deadline d) noexcept {
  if (d == pvmm::deadline::max()) return INT64_MAX;
  return std::chrono::duration_cast<std::chrono::nanoseconds>(d.time_since_epoch()).count();
}

pvmm::deadline from_ns(std::int64_t ns) noexcept {
  if (ns == INT64_MAX) return pvmm::deadline::max();
  if (ns < 0) ns = 0;
  return pvmm::deadline(std::chrono::duration_cast<pvmm::deadline::duration>(std::chrono::nanoseconds(ns)));
}

std::chrono::milliseconds timeout_or_default(std::int64_t ms) noexcept {
  return std::chrono::milliseconds(ms == 0 ? 30000 : ms);
}

/// A bootstrap whose calls are a C caller's function pointers. The base class keeps the contract (arguments,
/// collective numbers, broken state); this adapter only turns a callback's status into an error.
class c_bootstrap final : public pvmm::bootstrap {
 public:
  explicit c_bootstrap(const pvmm_bootstrap_ops& ops) : ops_(ops), adapter_(ops.adapter ? ops.adapter : "c") {}
  ~c_bootstrap() override {
    if (ops_.destroy != nullptr) ops_.destroy(ops_.context);
  }
  int rank() const noexcept override { return ops_.rank; }
  int size() const noexcept override { return ops_.size; }
  int node() const noexcept override { return ops_.node; }
  int local_rank() const noexcept override { return ops_.local_rank; }
  int local_size() const noexcept override { return ops_.local_size; }
  const char* adapter() const noexcept override { return adapter_.c_str(); }

 private:
  pvmm::status do_allgather(const void* mine, std::size_t bytes, void* all, std::uint64_t collective,
                            pvmm::deadline until) override {
    return outcome("allgather",
                   [&] { return ops_.allgather(ops_.context, mine, bytes, all, collective, to_ns(until)); });
  }
  pvmm::status do_barrier(std::uint64_t collective, pvmm::deadline until) override {
    if (ops_.barrier == nullptr) {  // as the base class's default: an allgather of one byte
      const unsigned char mine = 0;
      std::vector<unsigned char> all(static_cast<std::size_t>(ops_.size));
      return do_allgather(&mine, 1, all.data(), collective, until);
    }
    return outcome("barrier", [&] { return ops_.barrier(ops_.context, collective, to_ns(until)); });
  }
  pvmm::status do_send(int peer, int tag, const void* data, std::size_t bytes, pvmm::deadline until) override {
    if (ops_.send == nullptr) return fail_with(pvmm::errc::not_supported, "pvmm_bootstrap_ops.send is NULL");
    return outcome("send", [&] { return ops_.send(ops_.context, peer, tag, data, bytes, to_ns(until)); });
  }
  pvmm::status do_receive(int peer, int tag, void* data, std::size_t bytes, pvmm::deadline until) override {
    if (ops_.receive == nullptr) return fail_with(pvmm::errc::not_supported, "pvmm_bootstrap_ops.receive is NULL");
    return outcome("receive", [&] { return ops_.receive(ops_.context, peer, tag, data, bytes, to_ns(until)); });
  }
  void do_abort() noexcept override { ops_.abort(ops_.context); }

  /// Calls a callback; a nonzero return is an error with the callback's detail (or a standard one). A C++
  /// exception from a callback (one written in C++) is an error too, never passed on.
  template <class Call>
  pvmm::status outcome(const char* what, Call&& call) {
    callback_detail.clear();
    int code = 0;
    try {
      code = call();
    } catch (const std::bad_alloc&) {
      return fail_with(pvmm::errc::out_of_memory, std::string("the C bootstrap's ") + what + " ran out of memory");
    } catch (const std::exception& e) {
      return fail_with(pvmm::errc::backend_error, std::string("the C bootstrap's ") + what + " threw: " + e.what());
    } catch (...) {
      return fail_with(pvmm::errc::backend_error, std::string("the C bootstrap's ") + what + " threw");
    }
    if (code == 0) return {};
    const bool known = std::string(pvmm_status_name(code)) != "unknown";
    std::string detail = callback_detail.empty()
                             ? std::string("the C bootstrap's ") + what + " callback returned " + std::to_string(code)
                             : callback_detail;
    if (!known) detail += " (" + std::to_string(code) + " is not a pvmm_status)";
    return fail_with(known ? static_cast<pvmm::errc>(code) : pvmm::errc::backend_error, std::move(detail));
  }
  pvmm::status fail_with(pvmm::errc code, std::string detail) {
    pvmm::error e;
    e.code = code;
    e.detail = std::move(detail);
    return e;
  }

  pvmm_bootstrap_ops ops_;
  std::string adapter_;
};

using bootstrap_ptr = std::shared_ptr<pvmm::bootstrap>;

/// What a pvmm_bootstrap handle holds: the shared bootstrap a team also refers to.
struct bootstrap_entry {
  bootstrap_ptr ranks;
};

struct window_entry {
  std::shared_ptr<pvmm::team> members;  // the window's team stays alive while the window does
  pvmm::symmetric_window window;
};

pvmm_status bad_ops(const char* op, pvmm::errc code, const std::string& detail) { return fail(code, op, detail); }

/// What team and window creation check first: options and out present, options of a size this library knows, and
/// a timeout that is not negative (0: the default).
template <class Options, class Handle>
pvmm_status check_options(const Options* options, const Handle* out, const char* type, const char* op) {
  if (options == nullptr) return null_argument(op, "options");
  if (out == nullptr) return null_argument(op, "out");
  if (!size_known(options->struct_size, sizeof(Options)))
    return wrong_size(op, type, options->struct_size, sizeof(Options));
  if (options->timeout_ms < 0) return fail(pvmm::errc::invalid_argument, op, "timeout_ms is negative");
  return pvmm_status_ok;
}

}  // namespace

extern "C" {

int64_t pvmm_monotonic_ns(void) noexcept { return to_ns(std::chrono::steady_clock::now()); }

void pvmm_bootstrap_fail_detail(const char* detail) noexcept {
  try {
    callback_detail = detail != nullptr ? detail : "";
  } catch (...) {
    callback_detail.clear();
  }
}

pvmm_status pvmm_bootstrap_create(const pvmm_bootstrap_ops* ops, pvmm_bootstrap* out) noexcept {
  constexpr const char* op = "pvmm_bootstrap_create";
  return guard(op, [&] {
    PVMM_C_NEED(ops, op);
    PVMM_C_NEED(out, op);
    if (ops->version != PVMM_BOOTSTRAP_OPS_VERSION || ops->struct_size != sizeof(pvmm_bootstrap_ops)) {
      return bad_ops(op, pvmm::errc::version_mismatch,
                     "pvmm_bootstrap_ops has version " + std::to_string(ops->version) + " and struct_size " +
                         std::to_string(ops->struct_size) + "; this library knows version " +
                         std::to_string(PVMM_BOOTSTRAP_OPS_VERSION) + " of size " +
                         std::to_string(sizeof(pvmm_bootstrap_ops)));
    }
    if (ops->allgather == nullptr || ops->abort == nullptr) {
      return bad_ops(op, pvmm::errc::invalid_argument, "pvmm_bootstrap_ops.allgather and .abort are required");
    }
    if (ops->size < 1 || ops->size > pvmm::bootstrap::max_ranks || ops->rank < 0 || ops->rank >= ops->size ||
        ops->local_size < 1 || ops->local_size > ops->size || ops->local_rank < 0 ||
        ops->local_rank >= ops->local_size) {
      return bad_ops(op, pvmm::errc::invalid_argument,
                     "rank " + std::to_string(ops->rank) + " of size " + std::to_string(ops->size) + ", local_rank " +
                         std::to_string(ops->local_rank) + " of local_size " + std::to_string(ops->local_size) +
                         ": need 0 <= rank < size <= " + std::to_string(pvmm::bootstrap::max_ranks) +
                         " and 0 <= local_rank < local_size <= size");
    }
    bootstrap_entry entry{std::make_shared<c_bootstrap>(*ops)};
    return adopt(kind::bootstrap, std::move(entry), out);
  });
}

pvmm_status pvmm_bootstrap_create_threads(int size, pvmm_bootstrap* out) noexcept {
  constexpr const char* op = "pvmm_bootstrap_create_threads";
  return guard(op, [&] {
    PVMM_C_NEED(out, op);
    PVMM_C_TRY(made, pvmm::make_thread_bootstraps(size));
    std::vector<pvmm_bootstrap> handles_made(made->size());
    for (std::size_t r = 0; r < made->size(); ++r) {
      try {
        adopt(kind::bootstrap, bootstrap_entry{(*made)[r]}, &handles_made[r]);
      } catch (...) {
        for (std::size_t i = 0; i < r; ++i) (void)take(kind::bootstrap, handles_made[i].id, op);
        throw;
      }
    }
    for (std::size_t r = 0; r < made->size(); ++r) out[r] = handles_made[r];
    return pvmm_status_ok;
  });
}

pvmm_status pvmm_bootstrap_create_endpoints(const char* name, int rank, int size, int64_t timeout_ms,
                                            pvmm_bootstrap* out) noexcept {
  constexpr const char* op = "pvmm_bootstrap_create_endpoints";
  return guard(op, [&] {
    PVMM_C_NEED(name, op);
    PVMM_C_NEED(out, op);
    PVMM_C_TRY(made, pvmm::make_endpoint_bootstrap(name, rank, size, std::chrono::milliseconds(timeout_ms)));
    return adopt(kind::bootstrap, bootstrap_entry{std::move(*made)}, out);
  });
}

pvmm_status pvmm_bootstrap_release(pvmm_bootstrap bootstrap) noexcept {
  constexpr const char* op = "pvmm_bootstrap_release";
  return guard(op, [&] {
    PVMM_C_TRY(b, take(kind::bootstrap, bootstrap.id, op));
    return pvmm_status_ok;  // the last reference (this one or a team's) destroys it
  });
}

pvmm_status pvmm_bootstrap_rank(pvmm_bootstrap bootstrap, int* rank, int* size) noexcept {
  constexpr const char* op = "pvmm_bootstrap_rank";
  return guard(op, [&] {
    PVMM_C_FIND(bootstrap_entry, bootstrap, b, bootstrap, op);
    if (rank != nullptr) *rank = b->ranks->rank();
    if (size != nullptr) *size = b->ranks->size();
    return pvmm_status_ok;
  });
}

pvmm_status pvmm_bootstrap_allgather(pvmm_bootstrap bootstrap, const void* mine, size_t bytes, void* all,
                                     int64_t deadline_ns) noexcept {
  constexpr const char* op = "pvmm_bootstrap_allgather";
  return guard(op, [&] {
    PVMM_C_FIND(bootstrap_entry, bootstrap, b, bootstrap, op);
    return report(b->ranks->allgather(mine, bytes, all, from_ns(deadline_ns)));
  });
}

pvmm_status pvmm_bootstrap_barrier(pvmm_bootstrap bootstrap, int64_t deadline_ns) noexcept {
  constexpr const char* op = "pvmm_bootstrap_barrier";
  return guard(op, [&] {
    PVMM_C_FIND(bootstrap_entry, bootstrap, b, bootstrap, op);
    return report(b->ranks->barrier(from_ns(deadline_ns)));
  });
}

pvmm_status pvmm_bootstrap_send(pvmm_bootstrap bootstrap, int peer, int tag, const void* data, size_t bytes,
                                int64_t deadline_ns) noexcept {
  constexpr const char* op = "pvmm_bootstrap_send";
  return guard(op, [&] {
    PVMM_C_FIND(bootstrap_entry, bootstrap, b, bootstrap, op);
    return report(b->ranks->send(peer, tag, data, bytes, from_ns(deadline_ns)));
  });
}

pvmm_status pvmm_bootstrap_receive(pvmm_bootstrap bootstrap, int peer, int tag, void* data, size_t bytes,
                                   int64_t deadline_ns) noexcept {
  constexpr const char* op = "pvmm_bootstrap_receive";
  return guard(op, [&] {
    PVMM_C_FIND(bootstrap_entry, bootstrap, b, bootstrap, op);
    return report(b->ranks->receive(peer, tag, data, bytes, from_ns(deadline_ns)));
  });
}

pvmm_status pvmm_bootstrap_abort(pvmm_bootstrap bootstrap) noexcept {
  constexpr const char* op = "pvmm_bootstrap_abort";
  return guard(op, [&] {
    PVMM_C_FIND(bootstrap_entry, bootstrap, b, bootstrap, op);
    b->ranks->abort();
    return pvmm_status_ok;
  });
}

pvmm_status pvmm_team_create(pvmm_bootstrap ranks, const pvmm_team_options* options, pvmm_team* out) noexcept {
  constexpr const char* op = "pvmm_team_create";
  return guard(op, [&] {
    if (auto bad = check_options(options, out, "pvmm_team_options", op); bad != pvmm_status_ok) return bad;
    PVMM_C_FIND(bootstrap_entry, bootstrap, b, ranks, op);
    pvmm::team_options o;
    o.device = options->device;
    o.timeout = timeout_or_default(options->timeout_ms);
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
  return guard(op, [&] {
    if (auto bad = check_options(options, out, "pvmm_window_options", op); bad != pvmm_status_ok) return bad;
    PVMM_C_FIND(pvmm::team, team, t, team, op);
    pvmm::window_options o;
    o.size = options->size;
    o.max_size = options->max_size;
    o.timeout = timeout_or_default(options->timeout_ms);
    o.signal_channels = options->signal_channels;
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
    if (timeout_ms < 0) return fail(pvmm::errc::invalid_argument, op, "timeout_ms is negative");
    return report(w->window.grow(new_size, timeout_or_default(timeout_ms)));
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
    if (timeout_ms < 0) return fail(pvmm::errc::invalid_argument, op, "timeout_ms is negative");
    return report(w->window.wait_signal(peer, channel, signal_stream(on), std::chrono::milliseconds(timeout_ms)));
  });
}

pvmm_status pvmm_window_barrier(pvmm_window window, pvmm_stream_ref on, int64_t timeout_ms, int channel) noexcept {
  constexpr const char* op = "pvmm_window_barrier";
  return guard(op, [&] {
    PVMM_C_FIND(window_entry, window, w, window, op);
    if (timeout_ms < 0) return fail(pvmm::errc::invalid_argument, op, "timeout_ms is negative");
    return report(w->window.barrier(signal_stream(on), std::chrono::milliseconds(timeout_ms), channel));
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
