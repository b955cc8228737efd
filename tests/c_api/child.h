/* Runs a test case in a child process with a timeout: a crash fails that case only (tests/c_api). */
#ifndef PVMM_C_TEST_CHILD_H
#define PVMM_C_TEST_CHILD_H

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

/* Runs case_fn in a child; the child's exit status is its number of failed checks (0: passed), 77: skipped. */
static void run_in_child(const char* name, int (*case_fn)(void), unsigned timeout_s) {
  fflush(NULL);
  pid_t child = fork();
  if (child == 0) {
    /* The child's exit status counts its own failures only, not those of the cases before it (a case that died
     * left check_failures raised in the parent, and every later child inherited it as "N checks failed"). */
    check_count = 0;
    check_failures = 0;
    alarm(timeout_s);
    _exit(case_fn());
  }
  int status = 0;
  ++check_count;
  if (child < 0 || waitpid(child, &status, 0) != child) {
    ++check_failures;
    fprintf(stderr, "%s: could not run the child\n", name);
  } else if (WIFSIGNALED(status)) {
    ++check_failures;
    fprintf(stderr, "%s: the child died of signal %d (%s)\n", name, WTERMSIG(status), strsignal(WTERMSIG(status)));
  } else if (WEXITSTATUS(status) == 77) {
    printf("[pvmm-skip] %s\n", name);
  } else if (WEXITSTATUS(status) != 0) {
    ++check_failures;
    fprintf(stderr, "%s: %d checks failed in the child\n", name, WEXITSTATUS(status));
  }
}

#endif /* PVMM_C_TEST_CHILD_H */
