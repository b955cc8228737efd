/* Copies between ranges pvmm must check first (issue 47 items 15, 16, 19): pvmm_copy_to_mapping,
 * pvmm_copy_from_mapping and pvmm_copy_async refuse a NULL end, a range past a mapping's end, reserved-unmapped and
 * read-only memory, a garbage address and SIZE_MAX with a status naming the end, before anything is enqueued, on
 * every backend. Each case runs in a child process (a crash fails that case only). */
#include <stdint.h>

#include "child.h"

static size_t gran;
static pvmm_reservation range;
static pvmm_allocation memory;
static void* base; /* [base, base + gran) mapped read_write, [base + gran, base + 2 gran) reserved only */
static unsigned char host[64];

/* A reservation of two granules, the first mapped; `writable` 0: read-only. 77 when the backend cannot. */
static int setup(int writable) {
  pvmm_allocation_properties p = PVMM_INIT(pvmm_allocation_properties);
  size_t minimum = 0;
  if (pvmm_query_granularity(&p, &minimum, &gran) != pvmm_status_ok) return 77;
  gran = minimum;
  if (pvmm_allocation_create(gran, &p, &memory) != pvmm_status_ok) return 77;
  if (pvmm_reservation_create(2 * gran, 0, NULL, &range) != pvmm_status_ok) return 77;
  if (pvmm_reservation_map(range, 0, memory, 0, gran, &base) != pvmm_status_ok) return 77;
  pvmm_access_descriptor grant = {{pvmm_location_device, 0}, writable ? pvmm_access_read_write : pvmm_access_read};
  if (pvmm_reservation_set_access(range, 0, gran, &grant, 1) != pvmm_status_ok) return 77;
  return 0;
}

static int to_mapping(void) {
  if (setup(1)) return 77;
  unsigned char* b = (unsigned char*)base;
  CHECK_STATUS(pvmm_copy_to_mapping(b, NULL, 16, -1), pvmm_status_invalid_argument, "source is null");
  CHECK_STATUS(pvmm_copy_from_mapping(NULL, b, 16, -1), pvmm_status_invalid_argument, "destination is null");
  CHECK_STATUS(pvmm_copy_to_mapping(b + gran - 8, host, 16, -1), pvmm_status_not_mapped, "is not mapped");
  CHECK_STATUS(pvmm_copy_from_mapping(host, b + gran - 8, 16, -1), pvmm_status_not_mapped, "is not mapped");
  CHECK_STATUS(pvmm_copy_to_mapping(b, host, SIZE_MAX, -1), pvmm_status_out_of_range, "destination");
  CHECK_STATUS(pvmm_copy_from_mapping(host, b, SIZE_MAX, -1), pvmm_status_out_of_range, "source");
  CHECK_STATUS(pvmm_copy_to_mapping(b, host, 3 * gran, -1), pvmm_status_out_of_range, "past the end");
  CHECK_STATUS(pvmm_copy_from_mapping(host, b, sizeof host + 4096 * 64, -1), pvmm_status_not_mapped, "");
  CHECK_OK(pvmm_copy_to_mapping(b, host, sizeof host, -1)); /* and the good copy still works */
  return check_failures;
}

static int read_only(void) {
  if (setup(0)) return 77;
  CHECK_STATUS(pvmm_copy_to_mapping(base, host, 16, 0), pvmm_status_not_permitted, "read-only");
  CHECK_OK(pvmm_copy_from_mapping(host, base, 16, 0)); /* reading is allowed */
  pvmm_stream s;
  pvmm_stream_ref on;
  if (pvmm_stream_create(0, &s) != pvmm_status_ok || pvmm_stream_native(s, &on) != pvmm_status_ok) return 77;
  CHECK_STATUS(pvmm_copy_async(base, host, 16, on), pvmm_status_not_permitted, "read-only");
  CHECK_OK(pvmm_stream_synchronize(on));
  CHECK_OK(pvmm_stream_release(s));
  return check_failures;
}

static int async(void) {
  if (setup(1)) return 77;
  pvmm_stream s;
  pvmm_stream_ref on;
  if (pvmm_stream_create(0, &s) != pvmm_status_ok || pvmm_stream_native(s, &on) != pvmm_status_ok) return 77;
  unsigned char* b = (unsigned char*)base;
  CHECK_STATUS(pvmm_copy_async(b + gran, host, 16, on), pvmm_status_not_mapped, "destination");
  CHECK_STATUS(pvmm_copy_async(host, b + gran, 16, on), pvmm_status_not_mapped, "source");
  CHECK_STATUS(pvmm_copy_async(b + gran - 8, host, 16, on), pvmm_status_not_mapped, "");
  CHECK_STATUS(pvmm_copy_async((void*)0x10, host, 16, on), pvmm_status_not_mapped, "destination");
  CHECK_STATUS(pvmm_copy_async(host, (void*)0x10, 16, on), pvmm_status_not_mapped, "source");
  CHECK_STATUS(pvmm_copy_async(host, b, SIZE_MAX, on), pvmm_status_out_of_range, "");
  CHECK_STATUS(pvmm_copy_async(b, host, SIZE_MAX, on), pvmm_status_out_of_range, "");
  CHECK_STATUS(pvmm_copy_async(b, host, 3 * gran, on), pvmm_status_out_of_range, "past the end");
  CHECK_OK(pvmm_copy_async(b, host, sizeof host, on));
  CHECK_OK(pvmm_stream_synchronize(on));
  CHECK_OK(pvmm_stream_release(s));
  return check_failures;
}

/* Item 19: a SIZE_MAX byte count is out_of_memory (or a specific refusal), never "a C++ exception reached". */
static int huge_counts(void) {
  pvmm_bootstrap b[2];
  if (pvmm_bootstrap_create_threads(1, b) != pvmm_status_ok) return 77;
  unsigned char mine[8] = {0}, all[8];
  pvmm_status s = pvmm_bootstrap_allgather(b[0], mine, SIZE_MAX, all, INT64_MAX);
  CHECK(s == pvmm_status_out_of_memory);
  CHECK(strstr(pvmm_last_error_message(), "reached the C interface") == NULL);
  pvmm_bootstrap_release(b[0]);
  if (pvmm_bootstrap_create_threads(2, b) != pvmm_status_ok) return 77;
  s = pvmm_bootstrap_send(b[0], 1, 0, mine, SIZE_MAX, pvmm_monotonic_ns() + 1000000);
  CHECK(s == pvmm_status_out_of_memory);
  CHECK(strstr(pvmm_last_error_message(), "reached the C interface") == NULL);
  pvmm_bootstrap_release(b[0]);
  pvmm_bootstrap_release(b[1]);
  return check_failures;
}

int main(void) {
  run_in_child("copy_to/from_mapping: NULL, unmapped, past the end, SIZE_MAX", to_mapping, 30);
  run_in_child("copies into read-only memory", read_only, 30);
  run_in_child("copy_async: unmapped, garbage, SIZE_MAX, past the end", async, 30);
  run_in_child("SIZE_MAX byte counts to the bootstrap", huge_counts, 30);
  return check_summary("c_api/copies");
}
