/* Errors of team creation name the arguments the caller gave (issue 47 item 20): a failure after the first
 * exchange (here: a C bootstrap whose allgather fails from its second call on, the agreement that closes
 * team::create) said team::create(rank=-1, size=-1, ...) on every rank, because the arguments were formatted after
 * the bootstrap moved into the team. */
#include "check.h"
#include "gather_ops.h"

/* The first call (the identities) succeeds; every later one gives up. */
static int gather_once(void* context, const void* mine, size_t bytes, void* all, uint64_t collective,
                       int64_t deadline) {
  int* calls = (int*)context;
  (void)collective, (void)deadline;
  if ((*calls)++ > 0) {
    pvmm_bootstrap_fail_detail("the test's allgather gave up");
    return pvmm_status_timeout;
  }
  memcpy(all, mine, bytes);
  return pvmm_status_ok;
}

/* abort_status (issue 48): the status a rank failed with first reaches the C adapter's abort, to tell its peers. */
static int told = -1;
static void abort_telling(void* context, int status) {
  (void)context;
  told = status;
}
static int gather_all(void* context, const void* mine, size_t bytes, void* all, uint64_t collective, int64_t deadline) {
  (void)context, (void)collective, (void)deadline;
  memcpy(all, mine, bytes);
  return pvmm_status_ok;
}
static void abort_carries_the_status(void) {
  int calls = 0;
  pvmm_bootstrap_ops ops = gather_ops(1, gather_once, &calls);
  ops.abort = NULL;
  ops.abort_status = abort_telling; /* no abort: abort_status stands for it */
  pvmm_bootstrap b;
  CHECK_OK(pvmm_bootstrap_create(&ops, &b));
  pvmm_team_options o = PVMM_INIT(pvmm_team_options);
  pvmm_team t;
  CHECK_STATUS(pvmm_team_create(b, &o, &t), pvmm_status_timeout, "the test's allgather gave up");
  CHECK_OK(pvmm_bootstrap_abort(b));
  CHECK(told == pvmm_status_timeout); /* the first failure, not peer_lost */
  CHECK_OK(pvmm_bootstrap_release(b));
  told = -1;
  ops.allgather = gather_all;
  CHECK_OK(pvmm_bootstrap_create(&ops, &b));
  CHECK_OK(pvmm_bootstrap_abort(b));
  CHECK(told == pvmm_status_peer_lost); /* an abort with no failure before it */
  CHECK_OK(pvmm_bootstrap_release(b));
  ops.abort_status = NULL; /* neither abort form */
  CHECK_STATUS(pvmm_bootstrap_create(&ops, &b), pvmm_status_invalid_argument, ".abort (or .abort_status)");
}

int main(void) {
  int calls = 0;
  const pvmm_bootstrap_ops ops = gather_ops(1, gather_once, &calls);
  pvmm_bootstrap b;
  CHECK_OK(pvmm_bootstrap_create(&ops, &b));
  pvmm_team_options o = PVMM_INIT(pvmm_team_options);
  pvmm_team t;
  CHECK_STATUS(pvmm_team_create(b, &o, &t), pvmm_status_timeout, "the test's allgather gave up");
  CHECK(calls == 2); /* the failure came after the first exchange */
  CHECK(strstr(pvmm_last_error_message(), "rank=0, size=1") != NULL);
  CHECK(strstr(pvmm_last_error_message(), "rank=-1") == NULL);
  CHECK_OK(pvmm_bootstrap_release(b));
  abort_carries_the_status();
  return check_summary("c_api/team_errors");
}
