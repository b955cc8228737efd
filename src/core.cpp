// Errors, diagnostics, fault injection and device queries: the neutral layer's shared pieces.
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include <pvmm/device.hpp>
#include <pvmm/diagnostics.hpp>
#include <pvmm/error.hpp>
#include <pvmm/exported_fd.hpp>
#include <pvmm/testing.hpp>

#include "state.hpp"

namespace pvmm {

const char* to_string(errc code) noexcept {
  switch (code) {
    case errc::invalid_argument:
      return "invalid_argument";
    case errc::invalid_size:
      return "invalid_size";
    case errc::unaligned:
      return "unaligned";
    case errc::invalid_alignment:
      return "invalid_alignment";
    case errc::invalid_device:
      return "invalid_device";
    case errc::invalid_location:
      return "invalid_location";
    case errc::out_of_range:
      return "out_of_range";
    case errc::overlapping_mapping:
      return "overlapping_mapping";
    case errc::partial_mapping:
      return "partial_mapping";
    case errc::not_mapped:
      return "not_mapped";
    case errc::busy:
      return "busy";
    case errc::already_released:
      return "already_released";
    case errc::invalid_handle:
      return "invalid_handle";
    case errc::handle_type_not_requested:
      return "handle_type_not_requested";
    case errc::not_supported:
      return "not_supported";
    case errc::not_permitted:
      return "not_permitted";
    case errc::address_unavailable:
      return "address_unavailable";
    case errc::out_of_memory:
      return "out_of_memory";
    case errc::backend_unavailable:
      return "backend_unavailable";
    case errc::runtime_too_old:
      return "runtime_too_old";
    case errc::timeout:
      return "timeout";
    case errc::peer_rejected:
      return "peer_rejected";
    case errc::protocol_error:
      return "protocol_error";
    case errc::system_error:
      return "system_error";
    case errc::backend_error:
      return "backend_error";
  }
  return "unknown_error";
}

std::string error::message() const {
  std::string out = fmt::format("{}({}): {}", operation.empty() ? "pvmm" : operation, arguments, to_string(code));
  if (!detail.empty()) out += fmt::format(": {}", detail);
  if (!native_name.empty()) out += fmt::format(" [{} = {}]", native_name, native_code);
  if (!hint.empty()) out += fmt::format(" (hint: {})", hint);
  return out;
}

void exported_fd::reset() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

live_objects query_live_objects() noexcept {
  return {detail::live_allocations.load(), detail::live_reservations.load(), detail::live_mappings.load()};
}

namespace detail {

std::atomic<std::size_t> live_allocations{0};
std::atomic<std::size_t> live_reservations{0};
std::atomic<std::size_t> live_mappings{0};

// Fault injection state: process-wide by design (a test arms it, then calls the code under test).
namespace {
std::atomic<std::size_t> backend_calls{0};
std::atomic<std::size_t> fail_at_call{0};  // absolute call number that fails; 0 = disarmed
}  // namespace

bool inject_failure_now() noexcept {
  std::size_t n = backend_calls.fetch_add(1, std::memory_order_relaxed) + 1;
  std::size_t target = fail_at_call.load(std::memory_order_relaxed);
  if (target == 0 || n != target) return false;
  fail_at_call.store(0);
  return true;
}

error injected_failure(const char* call) {
  error e = make_error(errc::backend_error, {}, {}, fmt::format("fault injected into backend call {}", call));
  e.native_name = "PVMM_INJECTED_FAILURE";
  e.native_code = -1;
  return e;
}

error errno_error(errc code, const char* call, int err, std::string context) {
  error e;
  e.code = code;
  e.detail = context.empty() ? fmt::format("{} failed: {}", call, std::strerror(err))
                             : fmt::format("{}: {} failed: {}", context, call, std::strerror(err));
  const char* name = strerrorname_np(err);
  e.native_name = name ? name : "errno";
  e.native_code = err;
  return e;
}

bool numa_node_exists(int node) {
  return node >= 0 && ::access(fmt::format("/sys/devices/system/node/node{}", node).c_str(), F_OK) == 0;
}

std::string describe(location where) {
  switch (where.type) {
    case location::kind::device:
      return fmt::format("device {}", where.id);
    case location::kind::host:
      return "host";
    case location::kind::host_numa:
      return fmt::format("host NUMA node {}", where.id);
  }
  return fmt::format("location kind {}", static_cast<int>(where.type));
}

std::string describe(const allocation_properties& p) {
  return fmt::format("{{location={}, exportable={}{}, rdma={}, compression={}}}", describe(p.location),
                     contains(p.exportable, handle_types::posix_fd) ? "posix_fd " : "",
                     contains(p.exportable, handle_types::fabric) ? "fabric" : "", p.gpu_direct_rdma, p.compression);
}

const char* describe(access a) noexcept {
  switch (a) {
    case access::none:
      return "none";
    case access::read:
      return "read";
    case access::read_write:
      return "read_write";
  }
  return "invalid";
}

result<capabilities> device_capabilities(int ordinal) {
  // Device attributes never change while the process runs; caching them keeps validation off the driver.
  static std::mutex cache_mutex;
  static std::vector<std::pair<bool, capabilities>> cache;
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    if (ordinal >= 0 && static_cast<std::size_t>(ordinal) < cache.size() && cache[ordinal].first)
      return cache[ordinal].second;
  }
  auto info = call_backend("device", [&] { return backend::device(ordinal); });
  if (!info) return std::move(info).error();
  std::lock_guard<std::mutex> lock(cache_mutex);
  if (cache.size() <= static_cast<std::size_t>(ordinal)) cache.resize(ordinal + 1);
  cache[ordinal] = {true, info->capabilities};
  return info->capabilities;
}

result<int> cached_device_count() {
  // The device count is fixed once the driver has started; a count of 0 is not cached (nothing to speed up).
  static std::atomic<int> known{0};
  if (int n = known.load(std::memory_order_relaxed); n > 0) return n;
  auto count = call_backend("device_count", [] { return backend::device_count(); });
  if (count && *count > 0) known.store(*count, std::memory_order_relaxed);
  return count;
}

result<granularity> cached_granularity(const allocation_properties& p) {
  // Granularities depend only on the properties and never change: asking the driver twice per create
  // (minimum and recommended) would add measurable time to every allocation.
  struct entry {
    allocation_properties key;
    granularity value;
  };
  static std::mutex cache_mutex;
  static std::vector<entry> cache;
  auto same = [&](const allocation_properties& k) {
    return k.location == p.location && k.exportable == p.exportable && k.gpu_direct_rdma == p.gpu_direct_rdma &&
           k.compression == p.compression;
  };
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    for (auto& e : cache)
      if (same(e.key)) return e.value;
  }
  auto g = call_backend("allocation_granularity", [&] { return backend::allocation_granularity(p); });
  if (!g) return g;
  std::lock_guard<std::mutex> lock(cache_mutex);
  if (cache.size() < 64) cache.push_back({p, *g});
  return g;
}

status check_location(location where, const char* operation, lazy_args arguments) {
  switch (where.type) {
    case location::kind::device: {
      auto count = cached_device_count();
      if (!count) return in_operation(std::move(count).error(), operation, arguments);
      if (*count == 0) {
        auto b = backend::info();
        return make_error(b.available ? errc::backend_unavailable : b.unavailable_code, operation, arguments,
                          b.available ? "no device" : b.unavailable_reason);
      }
      if (where.id < 0 || where.id >= *count)
        return make_error(errc::invalid_device, operation, arguments,
                          fmt::format("device {} does not exist; {} device(s) present", where.id, *count));
      return {};
    }
    case location::kind::host:
      if (where.id != 0)
        return make_error(errc::invalid_location, operation, arguments,
                          fmt::format("host location id must be 0, got {}", where.id));
      return {};
    case location::kind::host_numa:
      if (!numa_node_exists(where.id))
        return make_error(errc::invalid_location, operation, arguments,
                          fmt::format("NUMA node {} does not exist on this host (/sys/devices/system/node)", where.id));
      return {};
  }
  return make_error(errc::invalid_location, operation, arguments,
                    fmt::format("unknown location kind {}", static_cast<int>(where.type)));
}

}  // namespace detail

backend_info query_backend() { return detail::backend::info(); }

result<int> device_count() {
  return detail::call_backend("device_count", [] { return detail::backend::device_count(); });
}

result<device_info> query_device(int ordinal) {
  const char* op = "pvmm::query_device";
  auto args = [&] { return fmt::format("ordinal={}", ordinal); };
  if (auto ok = detail::check_location(location::device(ordinal), op, args); !ok) return std::move(ok).error();
  auto info = detail::call_backend("device", [&] { return detail::backend::device(ordinal); });
  if (!info) return detail::in_operation(std::move(info).error(), op, args);
  return info;
}

result<granularity> query_granularity(const allocation_properties& properties) {
  const char* op = "pvmm::query_granularity";
  auto args = [&] { return detail::describe(properties); };
  if (auto ok = detail::check_location(properties.location, op, args); !ok) return std::move(ok).error();
  auto g = detail::cached_granularity(properties);
  if (!g) return detail::in_operation(std::move(g).error(), op, args);
  return g;
}

result<memory_info> query_memory(int ordinal) {
  const char* op = "pvmm::query_memory";
  auto args = [&] { return fmt::format("ordinal={}", ordinal); };
  if (auto ok = detail::check_location(location::device(ordinal), op, args); !ok) return std::move(ok).error();
  auto m = detail::call_backend("memory", [&] { return detail::backend::memory(ordinal); });
  if (!m) return detail::in_operation(std::move(m).error(), op, args);
  return m;
}

namespace testing {
void fail_nth_backend_call(std::size_t n) noexcept {
  detail::fail_at_call.store(n == 0 ? 0 : detail::backend_calls.load() + n);
}
std::size_t backend_call_count() noexcept { return detail::backend_calls.load(); }
}  // namespace testing

}  // namespace pvmm

namespace pvmm::testing {
status copy_to_mapping(void* destination, const void* source, std::size_t size, int device) {
  if (size == 0) return {};  // nothing to move; the pointers may be null (memcpy must not see them)
  auto ok = detail::backend::copy_to_mapping(destination, source, size, device);
  if (!ok) return detail::in_operation(std::move(ok).error(), "pvmm::testing::copy_to_mapping", "");
  return {};
}
status copy_from_mapping(void* destination, const void* source, std::size_t size, int device) {
  if (size == 0) return {};  // nothing to move; the pointers may be null (memcpy must not see them)
  auto ok = detail::backend::copy_from_mapping(destination, source, size, device);
  if (!ok) return detail::in_operation(std::move(ok).error(), "pvmm::testing::copy_from_mapping", "");
  return {};
}
result<bool> write_faults(void* address) {
  auto r = detail::backend::write_faults(address);
  if (!r) return detail::in_operation(std::move(r).error(), "pvmm::testing::write_faults", "");
  return r;
}
}  // namespace pvmm::testing
