// The C interface: bootstraps (a C struct of function pointers adapted onto pvmm::bootstrap, and the built-in
// adapters; pvmm/c/team.h over pvmm/bootstrap.hpp).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <pvmm/bootstrap.hpp>

#include "c_api/abi.hpp"
#include "c_api/common.hpp"
#include "c_api/team_entries.hpp"
#include "core/timeout.hpp"

using namespace pvmm::c_api;

namespace {

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
  // The first failure's errc travels where the adapter can carry it (abort_status), as the built-in adapters do.
  void do_abort() noexcept override {
    if (ops_.abort_status != nullptr)
      ops_.abort_status(ops_.context, static_cast<int>(abort_code()));
    else
      ops_.abort(ops_.context);
  }

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

pvmm_status bad_ops(const char* op, pvmm::errc code, const std::string& detail) { return fail(code, op, detail); }

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
    if (ops->version != PVMM_BOOTSTRAP_OPS_VERSION || !size_readable<pvmm_bootstrap_ops>(ops->struct_size)) {
      return bad_ops(op, pvmm::errc::version_mismatch,
                     "pvmm_bootstrap_ops has version " + std::to_string(ops->version) + " and struct_size " +
                         std::to_string(ops->struct_size) + "; this library knows version " +
                         std::to_string(PVMM_BOOTSTRAP_OPS_VERSION) + " of sizes " +
                         std::to_string(first_published<pvmm_bootstrap_ops>::size) + " to " +
                         std::to_string(sizeof(pvmm_bootstrap_ops)));
    }
    const pvmm_bootstrap_ops given = read_prefix(*ops, PVMM_INIT(pvmm_bootstrap_ops));
    if (given.allgather == nullptr || (given.abort == nullptr && given.abort_status == nullptr)) {
      return bad_ops(op, pvmm::errc::invalid_argument,
                     "pvmm_bootstrap_ops.allgather and .abort (or .abort_status) are required");
    }
    if (given.size < 1 || given.size > pvmm::bootstrap::max_ranks || given.rank < 0 || given.rank >= given.size ||
        given.local_size < 1 || given.local_size > given.size || given.local_rank < 0 ||
        given.local_rank >= given.local_size) {
      return bad_ops(op, pvmm::errc::invalid_argument,
                     "rank " + std::to_string(given.rank) + " of size " + std::to_string(given.size) + ", local_rank " +
                         std::to_string(given.local_rank) + " of local_size " + std::to_string(given.local_size) +
                         ": need 0 <= rank < size <= " + std::to_string(pvmm::bootstrap::max_ranks) +
                         " and 0 <= local_rank < local_size <= size");
    }
    bootstrap_entry entry{std::make_shared<c_bootstrap>(given)};
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
    PVMM_C_TRY(timeout, pvmm::detail::checked_timeout(timeout_ms, "timeout_ms"));
    PVMM_C_TRY(made, pvmm::make_endpoint_bootstrap(name, rank, size, *timeout));
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

}  // extern "C"
