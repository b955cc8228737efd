/* Built with nothing but `cc $(pkg-config --cflags --libs pvmm)` against the installed prefix. */
#include <stdio.h>

#include <pvmm/pvmm.h>

int main(void) {
  pvmm_backend_info backend = PVMM_INIT(pvmm_backend_info);
  size_t granularity = 0;
  if (pvmm_query_backend(&backend) != pvmm_status_ok) {
    fprintf(stderr, "FAIL: %s\n", pvmm_last_error_message());
    return 1;
  }
  if (!backend.available) {
    printf("[pvmm-skip] %s backend unavailable: %s\n", backend.name, backend.unavailable_reason);
    return 0;
  }
  if (pvmm_reservation_granularity(&granularity) != pvmm_status_ok) {
    fprintf(stderr, "FAIL: %s\n", pvmm_last_error_message());
    return 1;
  }
  printf("pkg-config consumer: %s backend, reservation granularity %zu\n", backend.name, granularity);
  return 0;
}
