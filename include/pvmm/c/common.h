/* pvmm/c/common.h - the conventions every part shares: export macros, the version, status codes, the last error,
 * PVMM_INIT, PVMM_WAIT_FOREVER, the handle types (part of pvmm/pvmm.h, C11; include <pvmm/pvmm.h> for everything). */
#ifndef PVMM_C_COMMON_H
#define PVMM_C_COMMON_H

#include <pvmm/c/handles.h>
#include <pvmm/errc_list.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define PVMM_C_API __attribute__((visibility("default")))
#else
#define PVMM_C_API
#endif
#ifdef __cplusplus
#define PVMM_C_NOEXCEPT noexcept /* no exception ever leaves an entry point */
#else
#define PVMM_C_NOEXCEPT
#endif

/** The version of this interface: major * 10000 + minor * 100 + patch of the library that declares it. */
#define PVMM_C_API_VERSION 100
PVMM_C_API int pvmm_c_api_version(void) PVMM_C_NOEXCEPT;

/* ---- status codes and the last error ------------------------------------------------------------------------- */

/** pvmm_status_ok, or one of PVMM_ERRC_LIST: pvmm_status_invalid_argument (1), ..., equal to pvmm::errc. */
typedef enum pvmm_status {
  pvmm_status_ok = 0,
#define PVMM_C_STATUS_ENUMERATOR(name, value, meaning) pvmm_status_##name = value,
  PVMM_ERRC_LIST(PVMM_C_STATUS_ENUMERATOR)
#undef PVMM_C_STATUS_ENUMERATOR
      pvmm_status_force_int = 0x7fffffff
} pvmm_status;

/** The stable name of a code ("overlapping_mapping"; "ok" for 0, "unknown" for a value not in the list). */
PVMM_C_API const char* pvmm_status_name(int status) PVMM_C_NOEXCEPT;

/** This thread's last failure (pvmm_status_ok when none since the thread began or pvmm_clear_last_error). The
 * strings stay valid until this thread's next failing pvmm call or pvmm_clear_last_error; never NULL (""). */
PVMM_C_API pvmm_status pvmm_last_error_code(void) PVMM_C_NOEXCEPT;
PVMM_C_API const char* pvmm_last_error_message(void) PVMM_C_NOEXCEPT; /**< one line holding everything below */
PVMM_C_API const char* pvmm_last_error_operation(void) PVMM_C_NOEXCEPT;
PVMM_C_API const char* pvmm_last_error_arguments(void) PVMM_C_NOEXCEPT;
PVMM_C_API const char* pvmm_last_error_detail(void) PVMM_C_NOEXCEPT;
PVMM_C_API const char* pvmm_last_error_native_name(void)
    PVMM_C_NOEXCEPT; /**< "CUDA_ERROR_INVALID_VALUE", "EBADF", or "" */
PVMM_C_API long long pvmm_last_error_native_code(void) PVMM_C_NOEXCEPT;
PVMM_C_API const char* pvmm_last_error_hint(void) PVMM_C_NOEXCEPT;
PVMM_C_API void pvmm_clear_last_error(void) PVMM_C_NOEXCEPT;

/** The timeout that waits without deadline (every int64_t timeout_ms; pvmm/pvmm.h states the rule). */
#define PVMM_WAIT_FOREVER ((int64_t)-1)

/** A struct's defaults, struct_size set: `pvmm_window_options o = PVMM_INIT(pvmm_window_options);`. Every struct
 * with a struct_size has its defaults in PVMM_C_DEFAULTS_<type>(F), F(field, value) per field that is not zero; the
 * library reads fields a shorter (older) struct lacks from the same list. (A designated initializer in C, which
 * -Wmissing-field-initializers accepts; a value in C++.) */
#ifdef __cplusplus
#define PVMM_C_ASSIGN_(field, value) init_.field = (value);
#define PVMM_INIT(type)                                  \
  ([] {                                                  \
    type init_{};                                        \
    init_.struct_size = sizeof(type);                    \
    PVMM_C_DEFAULTS_##type(PVMM_C_ASSIGN_) return init_; \
  }())
#else
#define PVMM_C_DESIGNATE_(field, value) .field = (value),
#define PVMM_INIT(type) \
  { PVMM_C_DEFAULTS_##type(PVMM_C_DESIGNATE_).struct_size = sizeof(type) }
#endif

/* The handle types come from pvmm/c/handles.h (one list: types, kind tags, names). */

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PVMM_C_COMMON_H */
