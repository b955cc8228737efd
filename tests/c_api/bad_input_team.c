/* Bad input to pvmm's C interface, teams: bootstraps (NULL, the wrong version, missing callbacks, bad ranks), teams and
 * windows: a specific status and message, never a crash (bad_input.h). Plain C11. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>

#include "bad_input.h"
#include "gather_ops.h"

static int dummy_allgather(void* c, const void* m, size_t b, void* a, uint64_t n, int64_t d) {
  (void)c, (void)m, (void)b, (void)a, (void)n, (void)d;
  return 0;
}
int main(void) {
  pvmm_bootstrap boot = {0};
  pvmm_team team = {0};
  pvmm_window win = {0};
  pvmm_reservation dead_res = {0};
  pvmm_team_options topts = PVMM_INIT(pvmm_team_options);
  pvmm_window_options wopts = PVMM_INIT(pvmm_window_options);
  pvmm_bootstrap_ops ops;
  size_t gran = 0;
  void* address = NULL;
  int value = 0;

  if (!have_device()) return check_summary("c_api/bad_input_team");
  CHECK_OK(pvmm_reservation_granularity(&gran));
  CHECK_OK(pvmm_reservation_create(gran, 0, NULL, &dead_res)); /* a released handle of another kind */
  CHECK_OK(pvmm_reservation_release(dead_res));

  /* bootstraps: NULL, the wrong version, missing callbacks, bad ranks */
  ops = gather_ops(1, dummy_allgather, NULL);
  ops.version = PVMM_BOOTSTRAP_OPS_VERSION + 1;
  CHECK_STATUS(pvmm_bootstrap_create(NULL, &boot), pvmm_status_invalid_argument, "ops is NULL");
  CHECK_STATUS(pvmm_bootstrap_create(&ops, NULL), pvmm_status_invalid_argument, "out is NULL");
  CHECK_STATUS(pvmm_bootstrap_create(&ops, &boot), pvmm_status_version_mismatch, "has version 2");
  ops.version = PVMM_BOOTSTRAP_OPS_VERSION;
  ops.struct_size = 8;
  CHECK_STATUS(pvmm_bootstrap_create(&ops, &boot), pvmm_status_version_mismatch, "struct_size 8");
  ops.struct_size = sizeof ops;
  ops.allgather = NULL;
  CHECK_STATUS(pvmm_bootstrap_create(&ops, &boot), pvmm_status_invalid_argument, ".allgather and .abort");
  ops.allgather = dummy_allgather;
  ops.rank = 1;
  CHECK_STATUS(pvmm_bootstrap_create(&ops, &boot), pvmm_status_invalid_argument, "rank 1 of size 1");
  ops.rank = 0;
  ops.size = 0;
  CHECK_STATUS(pvmm_bootstrap_create(&ops, &boot), pvmm_status_invalid_argument, "size");
  CHECK(boot.id == 0);
  CHECK_STATUS(pvmm_bootstrap_create_threads(0, &boot), pvmm_status_invalid_argument, "");
  CHECK_STATUS(pvmm_bootstrap_create_threads(2, NULL), pvmm_status_invalid_argument, "out is NULL");
  CHECK_STATUS(pvmm_bootstrap_create_endpoints(NULL, 0, 1, 100, &boot), pvmm_status_invalid_argument, "name");
  CHECK_STATUS(pvmm_bootstrap_create_endpoints("x", 0, 1, 100, NULL), pvmm_status_invalid_argument, "out is NULL");
  CHECK_STATUS(pvmm_bootstrap_create_endpoints("x", 2, 1, 100, &boot), pvmm_status_invalid_argument, "");
  CHECK_STATUS(pvmm_bootstrap_release(boot), pvmm_status_invalid_handle, NULL_HANDLE);
  CHECK_STATUS(pvmm_bootstrap_rank(boot, &value, NULL), pvmm_status_invalid_handle, NULL_HANDLE);
  CHECK_STATUS(pvmm_bootstrap_allgather(boot, &value, 4, &value, INT64_MAX), pvmm_status_invalid_handle, "");
  CHECK_STATUS(pvmm_bootstrap_barrier(boot, INT64_MAX), pvmm_status_invalid_handle, NULL_HANDLE);
  CHECK_STATUS(pvmm_bootstrap_send(boot, 0, 0, &value, 4, INT64_MAX), pvmm_status_invalid_handle, NULL_HANDLE);
  CHECK_STATUS(pvmm_bootstrap_receive(boot, 0, 0, &value, 4, INT64_MAX), pvmm_status_invalid_handle, NULL_HANDLE);
  CHECK_STATUS(pvmm_bootstrap_abort(boot), pvmm_status_invalid_handle, NULL_HANDLE);
  /* A valid one-rank C bootstrap: the base class's checks apply to it. */
  ops.size = 1;
  CHECK_OK(pvmm_bootstrap_create(&ops, &boot));
  CHECK_STATUS(pvmm_bootstrap_allgather(boot, NULL, 4, &value, INT64_MAX), pvmm_status_invalid_argument, "");
  /* the base class's check, before the (absent) send callback */
  CHECK_STATUS(pvmm_bootstrap_send(boot, 0, 0, &value, 4, INT64_MAX), pvmm_status_invalid_argument,
               "a rank does not send to itself");
  CHECK_OK(pvmm_bootstrap_allgather(boot, &value, 4, &value, INT64_MAX));

  /* teams and windows */
  CHECK_STATUS(pvmm_team_create(boot, NULL, &team), pvmm_status_invalid_argument, "options is NULL");
  CHECK_STATUS(pvmm_team_create(boot, &topts, NULL), pvmm_status_invalid_argument, "out is NULL");
  topts.struct_size = 4;
  CHECK_STATUS(pvmm_team_create(boot, &topts, &team), pvmm_status_version_mismatch, "pvmm_team_options");
  topts.struct_size = sizeof topts;
  topts.timeout_ms = -2; /* -1 is PVMM_WAIT_FOREVER */
  CHECK_STATUS(pvmm_team_create(boot, &topts, &team), pvmm_status_invalid_argument,
               "pvmm_team_options.timeout_ms = -2 ms is negative");
  topts.timeout_ms = 0;
  {
    pvmm_bootstrap reservation_as_bootstrap;
    reservation_as_bootstrap.id = dead_res.id;
    CHECK_STATUS(pvmm_team_create(reservation_as_bootstrap, &topts, &team), pvmm_status_invalid_handle,
                 "a pvmm_reservation handle where a pvmm_bootstrap handle belongs");
  }
  CHECK_STATUS(pvmm_team_release(team), pvmm_status_invalid_handle, NULL_HANDLE);
  CHECK_STATUS(pvmm_team_abort(team), pvmm_status_invalid_handle, NULL_HANDLE);
  CHECK_STATUS(pvmm_team_info(team, &value, NULL, NULL, NULL), pvmm_status_invalid_handle, NULL_HANDLE);
  CHECK_STATUS(pvmm_window_create(team, NULL, &win), pvmm_status_invalid_argument, "options is NULL");
  CHECK_STATUS(pvmm_window_create(team, &wopts, NULL), pvmm_status_invalid_argument, "out is NULL");
  wopts.struct_size = 0;
  CHECK_STATUS(pvmm_window_create(team, &wopts, &win), pvmm_status_version_mismatch, "pvmm_window_options");
  wopts.struct_size = sizeof wopts;
  CHECK_STATUS(pvmm_window_create(team, &wopts, &win), pvmm_status_invalid_handle, NULL_HANDLE);
  CHECK_STATUS(pvmm_window_release(win), pvmm_status_invalid_handle, NULL_HANDLE);
  CHECK_STATUS(pvmm_window_grow(win, 4096, 0), pvmm_status_invalid_handle, NULL_HANDLE);
  CHECK_STATUS(pvmm_window_base(win, NULL, NULL), pvmm_status_invalid_argument, "base is NULL");
  CHECK_STATUS(pvmm_window_base(win, &address, NULL), pvmm_status_invalid_handle, NULL_HANDLE);
  CHECK_STATUS(pvmm_window_peer(win, 0, NULL, NULL), pvmm_status_invalid_argument, "address is NULL");
  CHECK_STATUS(pvmm_window_peer(win, 0, &address, NULL), pvmm_status_invalid_handle, NULL_HANDLE);
  {
    pvmm_stream_ref nowhere = {0, 0};
    void* const* table = NULL;
    CHECK_STATUS(pvmm_window_put_signal(win, 1, 0, nowhere), pvmm_status_invalid_handle, NULL_HANDLE);
    CHECK_STATUS(pvmm_window_wait_signal(win, 1, 0, nowhere, 10), pvmm_status_invalid_handle, NULL_HANDLE);
    CHECK_STATUS(pvmm_window_barrier(win, 0, nowhere, 10), pvmm_status_invalid_handle, NULL_HANDLE);
    CHECK_STATUS(pvmm_window_signal_status(win), pvmm_status_invalid_handle, NULL_HANDLE);
    CHECK_STATUS(pvmm_window_device_pointer_table(win, NULL), pvmm_status_invalid_argument, "table is NULL");
    CHECK_STATUS(pvmm_window_device_pointer_table(win, &table), pvmm_status_invalid_handle, NULL_HANDLE);
  }
  CHECK_OK(pvmm_bootstrap_release(boot));
  CHECK_STATUS(pvmm_bootstrap_release(boot), pvmm_status_already_released, FREED);
  return check_summary("c_api/bad_input_team");
}
