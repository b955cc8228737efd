/* The harness of the C tests (child.h): a case's verdict is its own. A case that died left check_failures raised in
 * the parent, and every later child inherited it and reported "N checks failed" (c_api/copies on cuda read as four
 * failures where two cases had died). */
#include "child.h"

static int dies(void) {
  abort(); /* SIGABRT: the sanitizers leave it alone */
  return 0;
}

static int passes(void) {
  CHECK(1 == 1);
  return check_failures;
}

int main(void) {
  printf("(the first case dies on purpose)\n");
  run_in_child("dies", dies, 10);
  run_in_child("passes", passes, 10);
  const int ok = check_count == 2 && check_failures == 1; /* the case after a crash passed */
  if (!ok) fprintf(stderr, "expected 2 cases, 1 failed (the one that died); got %d, %d\n", check_count, check_failures);
  check_count = 1;
  check_failures = !ok;
  return check_summary("c_api/child_harness");
}
