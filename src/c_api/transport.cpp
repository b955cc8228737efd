// The C interface: the fd transport's named endpoints (pvmm/pvmm.h over pvmm/endpoint.hpp).
#include <algorithm>
#include <chrono>
#include <cstring>

#include <pvmm/endpoint.hpp>

#include "c_api/common.hpp"
#include "core/timeout.hpp"

/// A C timeout under the one rule (core/timeout.hpp), or the failure recorded.
#define PVMM_C_TIMEOUT(name, ms) PVMM_C_TRY(name, ::pvmm::detail::checked_timeout(ms, "timeout_ms"))

using namespace pvmm::c_api;

extern "C" {

pvmm_status pvmm_listen(const char* name, pvmm_listener* out) noexcept {
  constexpr const char* op = "pvmm_listen";
  return guard(op, [&] {
    PVMM_C_NEED(name, op);
    PVMM_C_NEED(out, op);
    return adopt_result(kind::listener, pvmm::ipc::listener::listen(name), out);
  });
}

pvmm_status pvmm_listener_accept(pvmm_listener listener, int64_t timeout_ms, pvmm_connection* out) noexcept {
  constexpr const char* op = "pvmm_listener_accept";
  return guard(op, [&] {
    PVMM_C_TIMEOUT(timeout, timeout_ms);
    PVMM_C_NEED(out, op);
    PVMM_C_FIND(pvmm::ipc::listener, listener, l, listener, op);
    return adopt_result(kind::connection, l->accept(*timeout), out);
  });
}

pvmm_status pvmm_listener_release(pvmm_listener listener) noexcept {
  constexpr const char* op = "pvmm_listener_release";
  return guard(op, [&] {
    PVMM_C_TRY(l, take(kind::listener, listener.id, op));
    return pvmm_status_ok;  // closed (and a path name removed) with the last reference
  });
}

pvmm_status pvmm_connect(const char* name, int64_t timeout_ms, pvmm_connection* out) noexcept {
  constexpr const char* op = "pvmm_connect";
  return guard(op, [&] {
    PVMM_C_TIMEOUT(timeout, timeout_ms);
    PVMM_C_NEED(name, op);
    PVMM_C_NEED(out, op);
    return adopt_result(kind::connection, pvmm::ipc::connect(name, *timeout), out);
  });
}

pvmm_status pvmm_connection_release(pvmm_connection connection) noexcept {
  constexpr const char* op = "pvmm_connection_release";
  return guard(op, [&] {
    PVMM_C_TRY(c, take(kind::connection, connection.id, op));
    return pvmm_status_ok;
  });
}

pvmm_status pvmm_connection_send(pvmm_connection connection, const int* fds, size_t count, const void* payload,
                                 size_t payload_size, int64_t timeout_ms) noexcept {
  constexpr const char* op = "pvmm_connection_send";
  return guard(op, [&] {
    if (fds == nullptr && count != 0) return null_argument(op, "fds");
    if (payload == nullptr && payload_size != 0) return null_argument(op, "payload");
    PVMM_C_TIMEOUT(timeout, timeout_ms);
    PVMM_C_FIND(pvmm::ipc::connection, connection, c, connection, op);
    return report(c->send(fds, count, payload, payload_size, *timeout));
  });
}

pvmm_status pvmm_connection_receive(pvmm_connection connection, int* fds, size_t max_fds, size_t* fd_count,
                                    void* payload, size_t max_payload, size_t* payload_size,
                                    int64_t timeout_ms) noexcept {
  constexpr const char* op = "pvmm_connection_receive";
  return guard(op, [&] {
    PVMM_C_TIMEOUT(timeout, timeout_ms);
    PVMM_C_NEED(fd_count, op);
    PVMM_C_NEED(payload_size, op);
    if (fds == nullptr && max_fds != 0) return null_argument(op, "fds");
    if (payload == nullptr && max_payload != 0) return null_argument(op, "payload");
    PVMM_C_FIND(pvmm::ipc::connection, connection, c, connection, op);
    PVMM_C_TRY(got, c->receive(max_fds, max_payload, *timeout));
    if (got->fds.size() > max_fds || got->payload.size() > max_payload) {
      return fail(pvmm::errc::protocol_error, op, "the message is larger than the buffers given");
    }
    for (std::size_t i = 0; i < got->fds.size(); ++i) fds[i] = got->fds[i].detach();
    if (!got->payload.empty()) std::memcpy(payload, got->payload.data(), got->payload.size());
    *fd_count = got->fds.size();
    *payload_size = got->payload.size();
    return pvmm_status_ok;
  });
}

}  // extern "C"
