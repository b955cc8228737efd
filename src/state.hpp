// Neutral-layer state: the ownership graph behind the public owners, and the helpers every operation uses.
//
// Ownership graph (each edge a shared_ptr, so teardown order follows from the types):
//   physical_allocation / multicast_object ──▶ allocation_state ◀── mapping_record ◀── reservation_state
// An allocation_state releases its backend handle exactly once, when its last owner or mapping goes.
// A reservation_state unmaps its remaining mappings, then frees (address, size) exactly as reserved.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

#include <pvmm/error.hpp>
#include <pvmm/types.hpp>

#include "backend.hpp"
#include "checked_math.hpp"
#include "flat_map.hpp"

namespace pvmm::detail {

// Live-object counters (pvmm/diagnostics.hpp). Process-wide because leaks are process-wide; atomics
// because owners are created and destroyed on any thread.
extern std::atomic<std::size_t> live_allocations;
extern std::atomic<std::size_t> live_reservations;
extern std::atomic<std::size_t> live_mappings;

struct allocation_state {
  enum class kind : std::uint8_t { memory, multicast };
  allocation_state(native_handle h, std::size_t sz, std::size_t gran, allocation_properties props, kind k)
      : handle(h), size(sz), granularity(gran), properties(props), what(k) {
    ++live_allocations;
  }
  allocation_state(const allocation_state&) = delete;
  allocation_state& operator=(const allocation_state&) = delete;
  ~allocation_state();
  /// Releases the backend handle once; later calls are no-ops.
  status release_handle();

  native_handle handle;
  std::size_t size;
  std::size_t granularity;           // minimum granularity offsets/sizes must respect
  allocation_properties properties;  // as requested at creation, or read back at import
  kind what;
  bool released = false;
};

struct mapping_record {
  std::size_t size = 0;
  std::shared_ptr<allocation_state> memory;
  std::size_t memory_offset = 0;
  /// A thread is mapping, unmapping or granting this mapping outside the lock: other threads get errc::busy
  /// instead of acting on a mapping that is changing under them (invariant 15).
  bool busy = false;
};

struct reservation_state {
  reservation_state(void* a, std::size_t s) : address(a), size(s) { ++live_reservations; }
  reservation_state(const reservation_state&) = delete;
  reservation_state& operator=(const reservation_state&) = delete;
  ~reservation_state();
  status unmap_all();
  /// Frees (address, size) exactly once.
  status free_range();

  void* address;
  bool freed = false;
  std::size_t size;
  flat_map<std::size_t, mapping_record> mappings;  // keyed by offset in the reservation
};

/// Fault injection and call counting, applied to every backend call that is a step of an operation.
/// Teardown and rollback calls (release, unmap of a dying reservation, free) bypass it: injecting there
/// would only simulate the leak that rollback exists to prevent.
bool inject_failure_now() noexcept;
error injected_failure(const char* call);

template <class F>
auto call_backend(const char* name, F&& f) -> decltype(f()) {
  if (inject_failure_now()) return injected_failure(name);
  return f();
}

/// An operation's arguments as text, formatted only if an error needs them: formatting on every call would
/// cost more than the driver calls pvmm wraps. Holds a reference to a callable that outlives the call.
class lazy_args {
 public:
  lazy_args() = default;
  lazy_args(const char* text) : text_(text) {}
  lazy_args(const std::string& text) : text_(text.c_str()) {}
  template <class F, class = std::enable_if_t<std::is_invocable_r_v<std::string, const F&>>>
  lazy_args(const F& f) : object_(&f), call_([](const void* o) { return (*static_cast<const F*>(o))(); }) {}
  std::string operator()() const { return call_ ? call_(object_) : std::string(text_ ? text_ : ""); }

 private:
  const char* text_ = nullptr;
  const void* object_ = nullptr;
  std::string (*call_)(const void*) = nullptr;
};

/// An error pvmm raises by itself (no native error).
inline error make_error(errc code, std::string operation, lazy_args arguments, std::string detail,
                        std::string hint = {}) {
  error e;
  e.code = code;
  e.operation = std::move(operation);
  e.arguments = arguments();
  e.detail = std::move(detail);
  e.hint = std::move(hint);
  return e;
}

/// Adds the neutral operation and its arguments to an error a backend reported.
inline error in_operation(error e, const char* operation, lazy_args arguments) {
  if (e.operation.empty()) e.operation = operation;
  if (e.arguments.empty()) e.arguments = arguments();
  return e;
}

/// An operating-system call failed with `err`: the errno name and code, strerror, and what was being done.
error errno_error(errc code, const char* call, int err, std::string context = {});
/// Whether the host has NUMA node `node` (/sys/devices/system/node).
bool numa_node_exists(int node);

std::string describe(location where);
std::string describe(const allocation_properties& properties);
const char* describe(access a) noexcept;

/// The device count and granularities, asked of the backend once (they never change).
result<int> cached_device_count();
result<granularity> cached_granularity(const allocation_properties& properties);
/// Validates a location for physical memory or access (device ordinal exists, ids in range).
status check_location(location where, const char* operation, lazy_args arguments);
/// Cached capabilities of a device (attributes are immutable for the life of the process).
result<capabilities> device_capabilities(int ordinal);

}  // namespace pvmm::detail
