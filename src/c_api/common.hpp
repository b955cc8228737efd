// The C interface's machinery (pvmm/pvmm.h): the handle registry, this thread's last error, and the wrapper every
// entry point runs in so no C++ exception crosses into C.
//
// Handles are registry entries, not pointers: a handle is (type tag, generation, index + 1) in 64 bits, and an entry
// holds a std::shared_ptr to the C++ owner. Chosen over heap objects with a magic field because telling a freed or
// double-freed handle from a live one never reads freed memory (a magic check must, which is undefined behaviour and
// what ASan reports), a foreign value is recognised without dereferencing it, and a lookup hands out a reference, so
// a release racing another thread's call cannot free the object under it.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <pvmm/pvmm.h>
#include <pvmm/error.hpp>

namespace pvmm::c_api {

enum class kind : std::uint8_t {
  allocation = 1,
  reservation,
  growable,
  pinned,
  managed,
  bootstrap,
  team,
  window,
  stream,
  event,
  pool,
  listener,
  connection,
  imported,
  pool_allocation,
  last = pool_allocation
};
const char* kind_name(kind k) noexcept;

/// Records `e` as this thread's last error and returns its code.
pvmm_status fail(const error& e) noexcept;
pvmm_status fail(errc code, const char* operation, std::string detail, std::string arguments = {}) noexcept;

/// Every entry point: runs `body` (returning pvmm_status or a pvmm::status) and turns whatever it throws into a status.
template <class Body>
pvmm_status guard(const char* operation, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(errc::out_of_memory, operation, "memory ran out inside pvmm (std::bad_alloc)");
  } catch (const pvmm::exception& e) {
    return fail(e.error());
  } catch (const std::exception& e) {
    return fail(errc::backend_error, operation, std::string("a C++ exception reached the C interface: ") + e.what());
  } catch (...) {
    return fail(errc::backend_error, operation, "an exception of unknown type reached the C interface");
  }
}

/// The status of a C++ result: ok, or its error recorded.
template <class R>
pvmm_status report(const R& r) noexcept {
  return r ? pvmm_status_ok : fail(r.error());
}

/// A null out-parameter or input pointer.
pvmm_status null_argument(const char* operation, const char* name) noexcept;
/// struct_size of a caller's struct against the one this library knows.
bool size_known(std::size_t given, std::size_t known) noexcept;
pvmm_status wrong_size(const char* operation, const char* type, std::size_t given, std::size_t known) noexcept;

/// Owners behind handles.
class registry {
 public:
  std::uint64_t add(kind type, std::shared_ptr<void> object);
  /// The object of `id`, or an error naming what is wrong with the handle (null, foreign, another type, released).
  result<std::shared_ptr<void>> find(kind type, std::uint64_t id, const char* operation);
  /// Removes the entry (the handle is dead from now on) and returns its object.
  result<std::shared_ptr<void>> take(kind type, std::uint64_t id, const char* operation);

 private:
  struct slot {
    std::uint32_t generation = 1;
    kind type{};
    std::shared_ptr<void> object;
  };
  result<std::size_t> locate(kind type, std::uint64_t id, const char* operation);
  std::mutex mutex_;
  std::vector<slot> slots_;
  std::vector<std::uint32_t> free_;
};
registry& handles();

template <class T>
result<std::shared_ptr<T>> find(kind type, std::uint64_t id, const char* operation) {
  auto r = handles().find(type, id, operation);
  if (!r) return std::move(r).error();
  return std::static_pointer_cast<T>(std::move(*r));
}
template <class T>
result<std::shared_ptr<T>> take(kind type, std::uint64_t id, const char* operation) {
  auto r = handles().take(type, id, operation);
  if (!r) return std::move(r).error();
  return std::static_pointer_cast<T>(std::move(*r));
}

/// Registers a new owner and writes its handle.
template <class Handle, class Owner>
pvmm_status adopt(kind type, Owner&& owner, Handle* out) {
  auto object = std::make_shared<std::decay_t<Owner>>(std::forward<Owner>(owner));
  out->id = handles().add(type, std::move(object));
  return pvmm_status_ok;
}
/// Registers the owner a C++ call made, or records the call's failure (`out` untouched).
template <class Handle, class Owner>
pvmm_status adopt_result(kind type, result<Owner>&& made, Handle* out) {
  if (!made) return fail(made.error());
  return adopt(type, std::move(*made), out);
}

/// Copies `text` into a fixed C array, truncated and terminated.
void copy_text(char* to, std::size_t capacity, const std::string& text) noexcept;

}  // namespace pvmm::c_api

/// Look up handle `h` of type T (kind K) into `name`, or return the failure.
#define PVMM_C_FIND(T, K, name, h, op)                                            \
  auto name##_found = ::pvmm::c_api::find<T>(::pvmm::c_api::kind::K, (h).id, op); \
  if (!name##_found) return ::pvmm::c_api::fail(name##_found.error());            \
  std::shared_ptr<T> name = std::move(*name##_found)
/// `name` = the value of a C++ call returning result<T>, or return its failure recorded.
#define PVMM_C_TRY(name, expression) \
  auto name = (expression);          \
  if (!name) return ::pvmm::c_api::fail(name.error())
#define PVMM_C_NEED(pointer, op) \
  if ((pointer) == nullptr) return ::pvmm::c_api::null_argument(op, #pointer)
#define PVMM_C_SIZE(pointer, T, op)                                  \
  if (!::pvmm::c_api::size_known((pointer)->struct_size, sizeof(T))) \
  return ::pvmm::c_api::wrong_size(op, #T, (pointer)->struct_size, sizeof(T))

namespace pvmm::c_api {

/// A creating entry point: `out` required; make() gives the result<Owner> registered under a new handle.
template <class Handle, class Make>
pvmm_status create_entry(kind type, const char* operation, Handle* out, Make&& make) noexcept {
  return guard(operation, [&] {
    if (out == nullptr) return null_argument(operation, "out");
    return adopt_result(type, make(), out);
  });
}

/// The release entry point of an owner whose release() reports: the handle dies first (a second release is
/// already_released, never a double free), then the owner gives its resource back.
template <class T>
pvmm_status release_entry(kind type, std::uint64_t id, const char* operation) noexcept {
  return guard(operation, [&] {
    auto owner = take<T>(type, id, operation);
    if (!owner) return fail(owner.error());
    return report((*owner)->release());
  });
}

/// An entry point that reads one value of a handle's owner into `*out` (required; `out_name` names it in the
/// error): read(owner) gives the value.
template <class T, class Out, class Read>
pvmm_status read_entry(kind type, std::uint64_t id, const char* operation, Out* out, const char* out_name,
                       Read&& read) noexcept {
  return guard(operation, [&] {
    if (out == nullptr) return null_argument(operation, out_name);
    auto owner = find<T>(type, id, operation);
    if (!owner) return fail(owner.error());
    *out = read(static_cast<const T&>(**owner));
    return pvmm_status_ok;
  });
}

/// The (data, size) entry point of a memory owner: `data` required, `size` optional.
template <class T>
pvmm_status data_entry(kind type, std::uint64_t id, const char* operation, void** data, std::size_t* size) noexcept {
  return read_entry<T>(type, id, operation, data, "data", [&](const T& owner) {
    if (size != nullptr) *size = owner.size();
    return static_cast<void*>(owner.data());
  });
}

}  // namespace pvmm::c_api
