/* pvmm/c/team.h - bootstraps, teams and symmetric windows (part of pvmm/pvmm.h, C11; include <pvmm/pvmm.h> for
 * everything). */
#ifndef PVMM_C_TEAM_H
#define PVMM_C_TEAM_H

#include <pvmm/c/streams.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- bootstrap: how the ranks of a team find each other ------------------------------------------------------- */

/** Deadlines are CLOCK_MONOTONIC nanoseconds (INT64_MAX: never). */
PVMM_C_API int64_t pvmm_monotonic_ns(void) PVMM_C_NOEXCEPT;

#define PVMM_BOOTSTRAP_OPS_VERSION 1

/** A bootstrap written in C: pvmm calls these through the C++ bootstrap's contract (arguments checked, collectives
 * numbered, the broken state kept), so a C bootstrap gets the same checks as the built-in ones. Every callback
 * returns pvmm_status_ok or a pvmm_status; it may call pvmm_bootstrap_fail_detail first to say why. `collective`
 * numbers the collectives 0, 1, ... in step on every rank. Callbacks are never called while pvmm holds a lock. */
typedef struct pvmm_bootstrap_ops {
  uint32_t version;     /**< PVMM_BOOTSTRAP_OPS_VERSION */
  uint32_t struct_size; /**< sizeof(pvmm_bootstrap_ops); any size from the first published one up to the library's */
  void* context;        /**< passed to every callback */
  int rank, size, node, local_rank, local_size;
  const char* adapter; /**< name in errors; NULL: "c" */
  /** Required: every rank's `bytes` at `mine` into `all` (size * bytes) in rank order. */
  int (*allgather)(void* context, const void* mine, size_t bytes, void* all, uint64_t collective, int64_t deadline_ns);
  /** Optional (NULL: an allgather of one byte). */
  int (*barrier)(void* context, uint64_t collective, int64_t deadline_ns);
  /** Optional (NULL: not_supported). */
  int (*send)(void* context, int peer, int tag, const void* data, size_t bytes, int64_t deadline_ns);
  int (*receive)(void* context, int peer, int tag, void* data, size_t bytes, int64_t deadline_ns);
  /** Required unless abort_status is set: tell the peers this rank gave up and wake this rank's waits (any
   * thread). */
  void (*abort)(void* context);
  /** Optional: called once when the last reference to the bootstrap goes (the team may hold one). */
  void (*destroy)(void* context);
  /** Optional (appended in 0.2): where set, called instead of abort, with the pvmm_status this rank failed with first
   * (pvmm_status_peer_lost where it aborted without a failure), for the peers to fail with it naming this rank, as
   * the built-in adapters do (peers whose callback learns it return that status). */
  void (*abort_status)(void* context, int status);
} pvmm_bootstrap_ops;
#define PVMM_C_DEFAULTS_pvmm_bootstrap_ops(F) F(version, PVMM_BOOTSTRAP_OPS_VERSION)

/** Adopts `ops` (copied; `context` must live until destroy). */
PVMM_C_API pvmm_status pvmm_bootstrap_create(const pvmm_bootstrap_ops* ops, pvmm_bootstrap* out) PVMM_C_NOEXCEPT;
/** `size` bootstraps whose ranks are threads of this process: out[r] goes to the thread of rank r. */
PVMM_C_API pvmm_status pvmm_bootstrap_create_threads(int size, pvmm_bootstrap* out) PVMM_C_NOEXCEPT;
/** Node-local processes meeting at endpoint `name` (pvmm::make_endpoint_bootstrap). */
PVMM_C_API pvmm_status pvmm_bootstrap_create_endpoints(const char* name, int rank, int size, int64_t timeout_ms,
                                                       pvmm_bootstrap* out) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_bootstrap_release(pvmm_bootstrap bootstrap) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_bootstrap_rank(pvmm_bootstrap bootstrap, int* rank, int* size) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_bootstrap_allgather(pvmm_bootstrap bootstrap, const void* mine, size_t bytes, void* all,
                                                int64_t deadline_ns) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_bootstrap_barrier(pvmm_bootstrap bootstrap, int64_t deadline_ns) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_bootstrap_send(pvmm_bootstrap bootstrap, int peer, int tag, const void* data, size_t bytes,
                                           int64_t deadline_ns) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_bootstrap_receive(pvmm_bootstrap bootstrap, int peer, int tag, void* data, size_t bytes,
                                              int64_t deadline_ns) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_bootstrap_abort(pvmm_bootstrap bootstrap) PVMM_C_NOEXCEPT;
/** For a C bootstrap's callback: the detail of the failure it is about to return (this thread; copied). */
PVMM_C_API void pvmm_bootstrap_fail_detail(const char* detail) PVMM_C_NOEXCEPT;

/* ---- teams and symmetric windows ------------------------------------------------------------------------------- */

typedef struct pvmm_team_options {
  size_t struct_size;
  int device;
  int64_t timeout_ms; /**< bounds the collective create; PVMM_INIT: 30000 */
  /* appended in 0.2 (a caller compiled before reads as NULL, 0) */
  const int* access_devices; /**< local devices granted access to every slot this rank maps (NULL: {device}) */
  size_t access_device_count;
} pvmm_team_options;
#define PVMM_C_DEFAULTS_pvmm_team_options(F) F(timeout_ms, 30000)

/** Collective. The team keeps its own reference to the bootstrap (release yours when you like). */
PVMM_C_API pvmm_status pvmm_team_create(pvmm_bootstrap ranks, const pvmm_team_options* options,
                                        pvmm_team* out) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_team_release(pvmm_team team) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_team_abort(pvmm_team team) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_team_info(pvmm_team team, int* rank, int* size, int* device,
                                      int* node_count) PVMM_C_NOEXCEPT;

/** How a window's stream-ordered put_signal, wait_signal and barrier run (pvmm::stream_signal_path, team.hpp). */
typedef enum pvmm_stream_signal_path {
  pvmm_stream_signals_kernel = 0, /**< a one-thread bounded-spin kernel per call; mixes with device code */
  pvmm_stream_signals_driver = 1  /**< the driver's stream memory operations, deadlines kept by a watchdog */
} pvmm_stream_signal_path;

typedef struct pvmm_window_options {
  size_t struct_size;
  size_t size;
  size_t max_size;        /**< 0: the largest size any rank asks for */
  int64_t timeout_ms;     /**< bounds the collective create; PVMM_INIT: 30000 */
  int signal_channels;    /**< > 0: signal pads of that many channels per peer (the same on every rank) */
  int64_t stream_signals; /**< a pvmm_stream_signal_path (the same on every rank); PVMM_INIT: kernel (appended in
                             0.3, 64-bit so that it lies past the old struct's end: a struct_size that ends before
                             it reads as kernel) */
} pvmm_window_options;
#define PVMM_C_DEFAULTS_pvmm_window_options(F) F(timeout_ms, 30000)

PVMM_C_API pvmm_status pvmm_window_create(pvmm_team team, const pvmm_window_options* options,
                                          pvmm_window* out) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_window_release(pvmm_window window) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_window_grow(pvmm_window window, size_t new_size, int64_t timeout_ms) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_window_base(pvmm_window window, void** base, size_t* stride) PVMM_C_NOEXCEPT;
/** Where rank `rank`'s memory is mapped here; pvmm_status_not_mapped (with the reason) when it is not. */
PVMM_C_API pvmm_status pvmm_window_peer(pvmm_window window, int rank, void** address, size_t* size) PVMM_C_NOEXCEPT;

/* Signals (a window made with signal_channels > 0; pvmm/team.hpp): stream-ordered, every wait bounded. A wait that
 * expires lets the stream go on; pvmm_window_signal_status then answers pvmm_status_timeout naming the rank and
 * channel. Kernels use pvmm/team_device.hpp (C++) with the table from pvmm_window_device_pointer_table. On the
 * GPU backends, wait_signal and barrier answer pvmm_status_not_supported where another rank of the window is in
 * this process on this device (thread ranks on one GPU): one context's kernels are not sure to run at once. */
PVMM_C_API pvmm_status pvmm_window_put_signal(pvmm_window window, int peer, int channel,
                                              pvmm_stream_ref on) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_window_wait_signal(pvmm_window window, int peer, int channel, pvmm_stream_ref on,
                                               int64_t timeout_ms) PVMM_C_NOEXCEPT;
/** Every rank of the window meets at `channel` in `on`'s order: (channel, stream, timeout), as wait_signal. */
PVMM_C_API pvmm_status pvmm_window_barrier(pvmm_window window, int channel, pvmm_stream_ref on,
                                           int64_t timeout_ms) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_window_signal_status(pvmm_window window) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_window_device_pointer_table(pvmm_window window, void* const** table) PVMM_C_NOEXCEPT;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PVMM_C_TEAM_H */
