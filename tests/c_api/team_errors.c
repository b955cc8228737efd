/* Errors of team creation name the arguments the caller gave (issue 47 item 20): a failure after the first
 * exchange (here: a C bootstrap whose barrier fails) said team::create(rank=-1, size=-1, ...) on every rank,
 * because the arguments were formatted after the bootstrap moved into the team. */
#include "check.h"

static int gather(void* context, const void* mine, size_t bytes, void* all, uint64_t collective, int64_t deadline) {
  (void)context, (void)collective, (void)deadline;
  memcpy(all, mine, bytes);
  return pvmm_status_ok;
}
static int barrier_fails(void* context, uint64_t collective, int64_t deadline) {
  (void)context, (void)collective, (void)deadline;
  pvmm_bootstrap_fail_detail("the test's barrier gave up");
  return pvmm_status_timeout;
}
static void abort_nothing(void* context) { (void)context; }

int main(void) {
  pvmm_bootstrap_ops ops;
  memset(&ops, 0, sizeof ops);
  ops.version = PVMM_BOOTSTRAP_OPS_VERSION;
  ops.struct_size = sizeof ops;
  ops.size = 1;
  ops.local_size = 1;
  ops.allgather = gather;
  ops.barrier = barrier_fails;
  ops.abort = abort_nothing;
  pvmm_bootstrap b;
  CHECK_OK(pvmm_bootstrap_create(&ops, &b));
  pvmm_team_options o = PVMM_INIT(pvmm_team_options);
  pvmm_team t;
  CHECK_STATUS(pvmm_team_create(b, &o, &t), pvmm_status_timeout, "the test's barrier gave up");
  CHECK(strstr(pvmm_last_error_message(), "rank=0, size=1") != NULL);
  CHECK(strstr(pvmm_last_error_message(), "rank=-1") == NULL);
  CHECK_OK(pvmm_bootstrap_release(b));
  return check_summary("c_api/team_errors");
}
