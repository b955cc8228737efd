// pvmm-info --check, the stream-ordered features: streams and events, pools (and pool sharing with an exec'd
// process), managed and page-locked memory. Each writes a pattern through one path and reads it back through
// another; each object is released before the check returns, so the teardown check sees what leaked.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <pvmm/testing.hpp>

#include "info.hpp"

namespace pvmm_info {

namespace {

outcome mismatch(const char* where, const std::string& why) {
  return {outcome::fail, fmt::format("{}: {}", where, why)};
}

/// Copies `seed`'s pattern from `source` (host memory the caller filled) to `device` and back into `back` on `s`, then
/// reads the device memory once more into pageable memory: both host copies must hold the pattern.
outcome device_round_trip(const pvmm::stream& s, void* device, const void* source, void* back, std::size_t size,
                          unsigned seed) {
  std::vector<unsigned char> pageable(size);
  s.copy_async(device, source, size).value();
  s.copy_async(pageable.data(), device, size).value();
  s.copy_async(back, device, size).value();
  s.synchronize().value();
  if (auto why = compare_pattern(pageable.data(), size, seed); !why.empty()) return mismatch("device memory", why);
  if (auto why = compare_pattern(static_cast<const unsigned char*>(back), size, seed); !why.empty())
    return mismatch("copied back", why);
  return {outcome::pass, ""};
}

}  // namespace

outcome check_streams(const device_scratch& memory) {
  const std::size_t size = memory.size;
  auto s = pvmm::stream::create(0).value();
  auto e = pvmm::event::create(0).value();
  const auto out = pattern(size, 11);
  std::vector<unsigned char> in(size);
  s.copy_async(memory.data, out.data(), size).value();
  s.copy_async(in.data(), memory.data, size).value();
  e.record(s).value();
  e.synchronize().value();
  if (!e.query().value()) return {outcome::fail, "the event is not complete after its synchronize"};
  if (!s.query().value()) return {outcome::fail, "the stream has work left after its last event completed"};
  if (auto why = compare_pattern(in.data(), size, 11); !why.empty()) return mismatch("copied back", why);
  // The device memory itself, read outside the stream where it is a mapping (a pool allocation has no other path).
  std::vector<unsigned char> direct(size);
  if (pvmm::testing::copy_from_mapping(direct.data(), memory.data, size)) {
    if (auto why = compare_pattern(direct.data(), size, 11); !why.empty()) return mismatch("device memory", why);
  }
  return {outcome::pass, fmt::format("host -> device -> host ({}) in stream order; event recorded, synchronized, "
                                     "complete",
                                     bytes(size))};
}

outcome check_pool(const pvmm::capabilities& caps) {
  if (!caps.pools.supported) return {outcome::not_supported, "device reports no memory pools"};
  const std::size_t size = std::size_t{1} << 20;
  auto pool = pvmm::memory_pool::create({}).value();
  auto writer = pvmm::stream::create(0).value();
  auto reader = pvmm::stream::create(0).value();
  auto written = pvmm::event::create(0).value();
  auto memory = pool.allocate(size, writer).value();
  const auto out = pattern(size, 21);
  writer.copy_async(memory.data(), out.data(), size).value();
  written.record(writer).value();
  // Read on a second stream ordered after the write by the event: a different path than the write's.
  reader.wait(written).value();
  std::vector<unsigned char> in(size);
  reader.copy_async(in.data(), memory.data(), size).value();
  reader.synchronize().value();
  const auto used = pool.usage().value().used_current;
  if (used < size) return {outcome::fail, fmt::format("usage says {} bytes used with {} allocated", used, size)};
  memory.free_async(reader).value();
  reader.synchronize().value();
  if (auto why = compare_pattern(in.data(), size, 21); !why.empty()) return mismatch("read on a second stream", why);
  const auto after = pool.usage().value();
  if (after.used_current != 0)
    return {outcome::fail, fmt::format("usage says {} bytes used after the free completed", after.used_current)};
  return {outcome::pass, fmt::format("allocate {}, write on one stream, read on another after an event, "
                                     "free_async; used back to 0 (reserved {})",
                                     bytes(size), bytes(after.reserved_current))};
}

outcome check_pool_sharing(const pvmm::capabilities& caps) {
  if (!caps.pools.ipc_posix_fd) return {outcome::not_supported, "device reports no pool sharing as POSIX fd"};
  const std::size_t size = 64 << 10;
  pvmm::pool_properties p;
  p.exportable = pvmm::handle_types::posix_fd;
  auto pool = pvmm::memory_pool::create(p).value();
  auto s = pvmm::stream::create(0).value();
  auto memory = pool.allocate(size, s).value();
  const auto out = pattern(size, 31);
  s.copy_async(memory.data(), out.data(), size).value();
  s.synchronize().value();  // the allocation is complete before it is exported and the importer uses it
  auto exported = pool.export_posix_fd().value();
  const auto record = memory.export_pointer().value();
  child c;
  if (auto started = spawn_child("--serve-pool-import", {}, c); started.what != outcome::pass) return started;
  auto sent = pvmm::ipc::send_pool(c.socket, exported);
  if (sent) sent = pvmm::ipc::send_fds(c.socket, nullptr, 0, &record, sizeof record);
  auto answer = finish_child(c);
  if (!sent) return {outcome::fail, sent.error().message()};
  if (answer.what != outcome::pass) return answer;
  std::vector<unsigned char> in(size);
  s.copy_async(in.data(), memory.data(), size).value();
  memory.free_async(s).value();  // after the importer's free: it answered only once it had freed
  s.synchronize().value();
  if (auto why = compare_pattern(in.data(), size, 32); !why.empty()) return mismatch("the child's write", why);
  return {outcome::pass, "exec'd child imported the pool and a pointer, read ours, wrote, freed; we saw its write"};
}

outcome check_managed(const pvmm::capabilities& caps) {
  if (!caps.managed.supported) return {outcome::not_supported, "device reports no managed memory"};
  const std::size_t size = std::size_t{2} << 20;  // never more: managed memory may be scarce
  auto memory = pvmm::managed_allocation::create(size).value();
  auto* host_view = static_cast<unsigned char*>(memory.data());
  const auto out = pattern(size, 41);
  std::memcpy(host_view, out.data(), size);  // written by the host, through the managed pointer itself
  auto s = pvmm::stream::create(0).value();
  if (caps.managed.concurrent_access) pvmm::prefetch_async(memory.data(), size, pvmm::location::device(0), s).value();
  std::vector<unsigned char> via_stream(size);
  s.copy_async(via_stream.data(), memory.data(), size).value();
  pvmm::prefetch_async(memory.data(), size, pvmm::location::host(), s).value();
  s.synchronize().value();
  if (auto why = compare_pattern(via_stream.data(), size, 41); !why.empty()) return mismatch("stream copy", why);
  if (auto why = compare_pattern(host_view, size, 41); !why.empty()) return mismatch("host read after prefetch", why);
  const auto last = pvmm::query_range(memory.data(), size).value().last_prefetch_location;
  if (!last || !(*last == pvmm::location::host()))
    return {outcome::fail, "the range does not report the host as its last prefetch location"};
  return {outcome::pass, fmt::format("{} written by the host, {}prefetched to the host, read back", bytes(size),
                                     caps.managed.concurrent_access ? "prefetched to device 0, " : "")};
}

outcome check_pinned(const pvmm::capabilities& caps, const device_scratch& device) {
  if (!caps.host_memory.pinned) return {outcome::not_supported, "device reports no page-locked allocations"};
  const std::size_t size = std::min<std::size_t>(device.size, 16 << 10);  // small: RLIMIT_MEMLOCK may be 64 KiB
  auto source = pvmm::pinned_allocation::create(size).value();
  auto back = pvmm::pinned_allocation::create(size).value();
  const auto out = pattern(size, 51);
  std::memcpy(source.data(), out.data(), size);
  auto s = pvmm::stream::create(0).value();
  auto o = device_round_trip(s, device.data, source.data(), back.data(), size, 51);
  if (o.what != outcome::pass) return o;
  return {outcome::pass, fmt::format("{} page-locked -> device -> page-locked in stream order", bytes(size))};
}

outcome check_registration(const pvmm::capabilities& caps, const device_scratch& device) {
  if (!caps.host_memory.registration) return {outcome::not_supported, "device reports no host memory registration"};
  const std::size_t size = std::min<std::size_t>(device.size, 16 << 10);
  std::unique_ptr<void, void (*)(void*)> buffer(std::malloc(2 * size), std::free);
  if (!buffer) throw std::bad_alloc();
  auto* source = static_cast<unsigned char*>(buffer.get());
  auto* back = source + size;
  auto registration = pvmm::host_registration::create(source, 2 * size).value();
  const auto out = pattern(size, 61);
  std::memcpy(source, out.data(), size);
  std::memset(back, 0, size);
  auto s = pvmm::stream::create(0).value();
  auto o = device_round_trip(s, device.data, source, back, size, 61);
  if (o.what != outcome::pass) return o;
  registration.release().value();
  return {outcome::pass, fmt::format("malloc'd {} registered, -> device -> back in stream order", bytes(size))};
}

}  // namespace pvmm_info
