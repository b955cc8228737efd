// ABI growth of the C interface's structs (pvmm/pvmm.h): fields are only ever appended, and struct_size may be any
// size from the struct's first published one up to this library's. An input struct's prefix is read and the rest
// takes the defaults (its init function's values); an output struct gets as many bytes as the caller's holds.
#pragma once

#include <cstddef>
#include <cstring>

#include <pvmm/pvmm.h>

#include "c_api/common.hpp"

namespace pvmm::c_api {

/// The size of a struct as first published (version 100). A struct that grows gets a specialisation naming its
/// first appended field.
template <class T>
struct first_published {
  static constexpr std::size_t size = sizeof(T);
};
// A struct that grew: its first published size ends where `first_appended` begins.
#define PVMM_C_FIRST_PUBLISHED(T, first_appended)                    \
  template <>                                                        \
  struct first_published<T> {                                        \
    static constexpr std::size_t size = offsetof(T, first_appended); \
  };
PVMM_C_FIRST_PUBLISHED(pvmm_team_options, access_devices)    // appended in 0.2
PVMM_C_FIRST_PUBLISHED(pvmm_bootstrap_ops, abort_status)     // appended in 0.2
PVMM_C_FIRST_PUBLISHED(pvmm_window_options, stream_signals)  // appended in 0.3
PVMM_C_FIRST_PUBLISHED(pvmm_caching_options, grow_in_place)  // appended in 0.2
#undef PVMM_C_FIRST_PUBLISHED

/// struct_size is one this library can read: from the first published size of T up to its own.
template <class T>
bool size_readable(std::size_t given) noexcept {
  return given >= first_published<T>::size && given <= sizeof(T);
}
pvmm_status wrong_size(const char* operation, const char* type, std::size_t given, std::size_t first,
                       std::size_t known) noexcept;

/// A copy of the caller's input struct: the struct_size bytes it gave over `defaults` (the init function's
/// values), so fields a caller compiled before them never saw keep their defaults.
template <class T>
T read_prefix(const T& given, T defaults) noexcept {
  std::memcpy(static_cast<void*>(&defaults), &given, given.struct_size);
  defaults.struct_size = sizeof(T);
  return defaults;
}
/// Writes `full` into the caller's output struct, as many bytes as its struct_size holds.
template <class T>
void write_prefix(T* out, T full) noexcept {
  const std::size_t n = out->struct_size;
  full.struct_size = n;
  std::memcpy(static_cast<void*>(out), &full, n);
}

/// A creating entry point over the caller's options struct C (one that never grew; `c_name` names its type):
/// options and `out` required, in that order, then its struct_size checked; make(options) registers the new owner
/// under `out` (adopt_result) or records why not.
template <class C, class Handle, class Make>
pvmm_status options_entry(const char* operation, const C* options, const char* c_name, Handle* out,
                          Make&& make) noexcept {
  static_assert(first_published<C>::size == sizeof(C), "the struct grew: read it with read_prefix");
  return guard(operation, [&]() -> pvmm_status {
    if (options == nullptr) return null_argument(operation, "options");
    if (out == nullptr) return null_argument(operation, "out");
    if (!size_readable<C>(options->struct_size))
      return wrong_size(operation, c_name, options->struct_size, first_published<C>::size, sizeof(C));
    return make(*options);
  });
}

/// options_entry over an optional options struct, which may have grown: `out` required; the caller's prefix read
/// over `defaults` (PVMM_INIT's; read_prefix), NULL options read as `defaults`.
template <class C, class Handle, class Make>
pvmm_status optional_options_entry(const char* operation, const C* options, C defaults, const char* c_name, Handle* out,
                                   Make&& make) noexcept {
  return guard(operation, [&]() -> pvmm_status {
    if (out == nullptr) return null_argument(operation, "out");
    if (options != nullptr && !size_readable<C>(options->struct_size))
      return wrong_size(operation, c_name, options->struct_size, first_published<C>::size, sizeof(C));
    return make(options != nullptr ? read_prefix(*options, defaults) : defaults);
  });
}

}  // namespace pvmm::c_api

/// The caller's struct `pointer` of type T has a readable struct_size, or the entry point fails. For a struct that
/// never grew (read and written in place); one that grew is read with read_prefix / written with write_prefix.
#define PVMM_C_SIZE(pointer, T, op)                                                                       \
  static_assert(::pvmm::c_api::first_published<T>::size == sizeof(T), #T " grew: use read/write_prefix"); \
  if (!::pvmm::c_api::size_readable<T>((pointer)->struct_size))                                           \
  return ::pvmm::c_api::wrong_size(op, #T, (pointer)->struct_size, ::pvmm::c_api::first_published<T>::size, sizeof(T))
/// `name`: a copy of the caller's options struct `pointer` of type T (its struct_size checked), or T's defaults
/// (PVMM_INIT) where `pointer` is NULL.
#define PVMM_C_OPTIONS(name, pointer, T, op) \
  T name = PVMM_INIT(T);                     \
  if ((pointer) != nullptr) {                \
    PVMM_C_SIZE(pointer, T, op);             \
    name = *(pointer);                       \
  }                                          \
  (void)0
