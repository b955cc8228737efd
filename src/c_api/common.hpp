// The C interface's machinery (pvmm/pvmm.h): the handle registry, this thread's last error, and the wrapper every
// entry point runs in so no C++ exception crosses into C.
//
// Handles are registry entries, not pointers: a handle is (type tag, generation, index + 1) in 64 bits, and an entry
// (entry<T>) holds the C++ owner and its reference count. Chosen over heap objects with a magic field because telling a
// freed or double-freed handle from a live one never reads freed memory (a magic check must, which is undefined
// behaviour and what ASan reports), a foreign value is recognised without dereferencing it, and a lookup hands out a
// reference, so a release racing another thread's call cannot free the object under it. Teardown runs when the last
// reference drops (entry_base): a release never changes the object while another call reads it.
#pragma once

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <pvmm/pvmm.h>
#include <pvmm/error.hpp>

#include "core/no_throw.hpp"

namespace pvmm::c_api {

/// The handle kinds, tags and names: one list (pvmm/c/handles.h).
enum class kind : std::uint8_t {
#define PVMM_C_KIND_ENUMERATOR(name, tag, what) name = tag,
  PVMM_C_HANDLE_LIST(PVMM_C_KIND_ENUMERATOR)
#undef PVMM_C_KIND_ENUMERATOR
};
#define PVMM_C_KIND_COUNT(name, tag, what) +1
constexpr std::uint8_t kind_count = 0 PVMM_C_HANDLE_LIST(PVMM_C_KIND_COUNT);
#undef PVMM_C_KIND_COUNT
const char* kind_name(kind k) noexcept;

/// Records `e` as this thread's last error and returns its code.
pvmm_status fail(const error& e) noexcept;
pvmm_status fail(errc code, const char* operation, std::string detail, std::string arguments = {}) noexcept;

/// Records a failure from static texts only (nothing allocated: the out-of-memory path of the guard). `operation`
/// and `detail` must outlive the record (string literals).
pvmm_status fail_static(errc code, const char* operation, const char* detail, const char* what) noexcept;

/// Every entry point: runs `body` (returning pvmm_status or a pvmm::status) and turns whatever it throws into a status
/// (detail::catch_all: std::bad_alloc and std::length_error are out_of_memory). The out-of-memory path allocates
/// nothing.
template <class Body>
pvmm_status guard(const char* operation, Body&& body) noexcept {
  return detail::catch_all(
      [&]() -> pvmm_status { return body(); },
      [&](const detail::caught_exception& c) -> pvmm_status {
        if (c.carried != nullptr) return fail(*c.carried);
        return fail_static(c.code, operation, c.detail, c.what);
      },
      [&]() noexcept { return fail_static(errc::out_of_memory, operation, detail::out_of_memory_text, nullptr); });
}

/// The status of a C++ result: ok, or its error recorded.
template <class R>
pvmm_status report(const R& r) noexcept {
  return r ? pvmm_status_ok : fail(r.error());
}

/// A null out-parameter or input pointer.
pvmm_status null_argument(const char* operation, const char* name) noexcept;

/// A registered owner and its references: the registry's own and one per call in flight. Teardown (the owner's
/// destructor, or release() by the last holder) runs when the last reference drops, so a release racing a call on
/// the same handle never changes the object under that call: the call finishes on the object it looked up.
class entry_base {
 public:
  virtual ~entry_base() = default;
  virtual void* object() noexcept = 0;
  void retain() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
  /// Drops one reference; true when it was the last (the caller now holds the entry alone and deletes it).
  bool drop_is_last() noexcept { return refs_.fetch_sub(1, std::memory_order_acq_rel) == 1; }
  void drop() noexcept {
    if (drop_is_last()) delete this;
  }

 private:
  std::atomic<long> refs_{1};
};
template <class T>
class entry final : public entry_base {
 public:
  template <class U>
  explicit entry(U&& value) : value_(std::forward<U>(value)) {}
  void* object() noexcept override { return &value_; }

 private:
  T value_;
};

/// The registry's reference to an entry whose handle was just killed (registry::take).
class taken {
 public:
  explicit taken(entry_base* e) noexcept : entry_(e) {}
  taken(taken&& other) noexcept : entry_(std::exchange(other.entry_, nullptr)), alone_(other.alone_) {}
  taken& operator=(taken&&) = delete;
  ~taken() {
    if (entry_ == nullptr) return;
    if (alone_)
      delete entry_;
    else
      entry_->drop();
  }
  /// The object, when no call is inside it any more (this was the last reference): the caller may tear it down
  /// and report how that went. nullptr otherwise: the reference is dropped now and the teardown runs when the last
  /// call in flight ends (its destructor).
  template <class T>
  T* alone() noexcept {
    if (entry_ == nullptr) return nullptr;
    if (alone_ || entry_->drop_is_last()) {
      alone_ = true;
      return static_cast<T*>(entry_->object());
    }
    entry_ = nullptr;
    return nullptr;
  }

 private:
  entry_base* entry_;
  bool alone_ = false;
};

/// Owners behind handles.
class registry {
 public:
  /// Registers `object` (its one reference becomes the registry's); on a throw the caller still owns it.
  std::uint64_t add(kind type, entry_base* object);
  /// A new reference to the object of `id` (dropped with the shared_ptr), or an error naming what is wrong with
  /// the handle (null, foreign, another type, released).
  result<std::shared_ptr<void>> find(kind type, std::uint64_t id, const char* operation);
  /// Removes the entry (the handle is dead from now on) and hands over the registry's reference.
  result<taken> take(kind type, std::uint64_t id, const char* operation);

 private:
  struct slot {
    std::uint32_t generation = 1;
    kind type{};
    entry_base* object = nullptr;
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
inline result<taken> take(kind type, std::uint64_t id, const char* operation) {
  return handles().take(type, id, operation);
}

/// Registers a new owner and writes its handle.
template <class Handle, class Owner>
pvmm_status adopt(kind type, Owner&& owner, Handle* out) {
  auto object = std::make_unique<entry<std::decay_t<Owner>>>(std::forward<Owner>(owner));
  out->id = handles().add(type, object.get());
  object.release();  // the registry's now
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
/// already_released, never a double free), then the owner gives its resource back - here, reporting how it went,
/// when no other call is inside it; otherwise when that call ends (the owner's destructor).
template <class T>
pvmm_status release_entry(kind type, std::uint64_t id, const char* operation) noexcept {
  return guard(operation, [&] {
    auto owner = take(type, id, operation);
    if (!owner) return fail(owner.error());
    if (T* alone = owner->template alone<T>()) return report(alone->release());
    return pvmm_status_ok;
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

/// An entry point that acts on a handle's owner: act(owner) gives the pvmm_status (report(...) of a C++ call).
template <class T, class Act>
pvmm_status call_entry(kind type, std::uint64_t id, const char* operation, Act&& act) noexcept {
  return guard(operation, [&]() -> pvmm_status {
    auto owner = find<T>(type, id, operation);
    if (!owner) return fail(owner.error());
    return act(**owner);
  });
}

/// An entry point that writes the value of a C++ call through its outputs: each of `required` (pointer, name)
/// checked in order (NULL: the failure names it), then make() gives the result, whose failure is recorded with the
/// outputs untouched; write(value) fills them.
template <class Make, class Write>
pvmm_status outputs_call(const char* operation, std::initializer_list<std::pair<const void*, const char*>> required,
                         Make&& make, Write&& write) noexcept {
  return guard(operation, [&]() -> pvmm_status {
    for (const auto& out : required)
      if (out.first == nullptr) return null_argument(operation, out.second);
    auto made = make();
    if (!made) return fail(made.error());
    write(*made);
    return pvmm_status_ok;
  });
}

/// outputs_call on a handle's owner (found after the outputs are checked): make(owner) gives the result.
template <class T, class Make, class Write>
pvmm_status outputs_entry(kind type, std::uint64_t id, const char* operation,
                          std::initializer_list<std::pair<const void*, const char*>> required, Make&& make,
                          Write&& write) noexcept {
  return outputs_call(
      operation, required,
      [&]() -> decltype(make(std::declval<T&>())) {
        auto owner = find<T>(type, id, operation);
        if (!owner) return std::move(owner).error();
        return make(**owner);
      },
      std::forward<Write>(write));
}

/// outputs_entry into one `*out` (required; `out_name` names it in the error).
template <class T, class Out, class Make>
pvmm_status value_entry(kind type, std::uint64_t id, const char* operation, Out* out, const char* out_name,
                        Make&& make) noexcept {
  return outputs_entry<T>(type, id, operation, {{out, out_name}}, std::forward<Make>(make),
                          [out](auto& value) { *out = value; });
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
