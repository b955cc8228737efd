/* pvmm/c/transport.h - the fd transport: named endpoints, fds and bytes between processes of one node (part of
 * pvmm/pvmm.h, C11; include <pvmm/pvmm.h> for everything). */
#ifndef PVMM_C_TRANSPORT_H
#define PVMM_C_TRANSPORT_H

#include <pvmm/c/common.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the fd transport: named endpoints, fds and bytes between processes of one node ---------------------------- */

/** Listens on `name` (an abstract name, or a path starting with '/'; pvmm/endpoint.hpp). */
PVMM_C_API pvmm_status pvmm_listen(const char* name, pvmm_listener* out) PVMM_C_NOEXCEPT;
/** Accepts one peer running as the same user, waiting at most `timeout_ms`. */
PVMM_C_API pvmm_status pvmm_listener_accept(pvmm_listener listener, int64_t timeout_ms,
                                            pvmm_connection* out) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_listener_release(pvmm_listener listener) PVMM_C_NOEXCEPT;
/** Connects to the listener on `name` (same user), waiting for it to appear at most `timeout_ms`. */
PVMM_C_API pvmm_status pvmm_connect(const char* name, int64_t timeout_ms, pvmm_connection* out) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_connection_release(pvmm_connection connection) PVMM_C_NOEXCEPT;
/** Sends `count` fds (borrowed: still the caller's) and `payload_size` bytes in one message. */
PVMM_C_API pvmm_status pvmm_connection_send(pvmm_connection connection, const int* fds, size_t count,
                                            const void* payload, size_t payload_size,
                                            int64_t timeout_ms) PVMM_C_NOEXCEPT;
/** Receives one message: at most `max_fds` fds (now the caller's: close them) and `max_payload` bytes. */
PVMM_C_API pvmm_status pvmm_connection_receive(pvmm_connection connection, int* fds, size_t max_fds, size_t* fd_count,
                                               void* payload, size_t max_payload, size_t* payload_size,
                                               int64_t timeout_ms) PVMM_C_NOEXCEPT;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PVMM_C_TRANSPORT_H */
