// pvmm-info --check: runs every feature once on device 0 (VMM and sharing here, the stream-ordered features in
// self_check_features.cpp), then checks that nothing is left; prints the results as text or JSON.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <pvmm/testing.hpp>

#include "info.hpp"

namespace pvmm_info {

outcome from_error(const pvmm::error& e) {
  return {e.code == pvmm::errc::not_supported || e.code == pvmm::errc::not_permitted ? outcome::not_supported
                                                                                     : outcome::fail,
          e.message()};
}

std::vector<unsigned char> pattern(std::size_t size, unsigned seed) {
  std::vector<unsigned char> out(size);
  for (std::size_t i = 0; i < size; ++i) out[i] = pattern_byte(i, seed);
  return out;
}

std::string compare_pattern(const unsigned char* data, std::size_t size, unsigned seed) {
  for (std::size_t i = 0; i < size; ++i)
    if (data[i] != pattern_byte(i, seed))
      return fmt::format("byte {} of {} is {:#04x}, expected {:#04x}", i, size, data[i], pattern_byte(i, seed));
  return {};
}

namespace {

/// The exporter's side of "export to an exec'd process": the child maps the fd, checks 0x5A, writes 0xC3.
outcome check_cross_process(const pvmm::physical_allocation& memory, void* mapped, std::size_t size) {
  auto fd = memory.export_posix_fd();
  if (!fd) return from_error(fd.error());
  child c;
  if (auto started = spawn_child("--serve-import", {std::to_string(size)}, c); started.what != outcome::pass)
    return started;
  int raw = fd->get();
  if (auto sent = pvmm::ipc::send_fds(c.socket, &raw, 1, "x", 1); !sent) {
    (void)finish_child(c);
    return {outcome::fail, sent.error().message()};
  }
  if (auto answer = finish_child(c); answer.what != outcome::pass) return answer;
  std::vector<unsigned char> back(size);
  if (auto ok = pvmm::testing::copy_from_mapping(back.data(), mapped, size); !ok) return from_error(ok.error());
  for (auto b : back)
    if (b != 0xC3) return {outcome::fail, "the child's write is not visible to the exporter"};
  return {outcome::pass, "exec'd child imported the fd over SCM_RIGHTS, wrote; the exporter saw it"};
}

}  // namespace

std::vector<check_result> self_check() {
  std::vector<check_result> results;
  auto run = [&](const std::string& name, auto&& body) {
    try {
      results.push_back({name, body()});
    } catch (const pvmm::exception& e) {
      results.push_back({name, from_error(e.error())});
    }
  };
  auto device = pvmm::query_device(0);
  if (!device) return {{"query device 0", {outcome::fail, device.error().message()}}};
  const auto caps = device->capabilities;
  pvmm::allocation_properties props;
  if (caps.sharing.posix_fd) props.exportable = pvmm::handle_types::posix_fd;
  std::size_t size = 0;
  pvmm::physical_allocation memory;
  pvmm::address_reservation range;
  void* mapped = nullptr;
  const pvmm::access_descriptor rw{pvmm::location::device(0), pvmm::access::read_write};

  run("allocate physical memory", [&] {
    size = pvmm::query_granularity(props).value().minimum;
    memory = pvmm::physical_allocation::create(size, props).value();
    return outcome{outcome::pass, fmt::format("{} on device 0", bytes(size))};
  });
  run("reserve and map", [&] {
    range = pvmm::address_reservation::reserve(2 * size).value();
    void* p = range.map(0, memory, 0, size).value();
    auto a = pvmm::query_access(pvmm::location::device(0), p).value();
    if (a != pvmm::access::none) return outcome{outcome::fail, "a new mapping already had access"};
    mapped = p;
    return outcome{outcome::pass, "new mapping starts with no access"};
  });
  run("grant access, write, read back", [&] {
    if (!mapped) return outcome{outcome::not_supported, "no mapping to grant access to"};
    range.set_access(0, size, {rw}).value();
    std::vector<unsigned char> out(size, 0x5A), in(size);
    pvmm::testing::copy_to_mapping(mapped, out.data(), size).value();
    pvmm::testing::copy_from_mapping(in.data(), mapped, size).value();
    return in == out ? outcome{outcome::pass, "read_write granted; data round-tripped"}
                     : outcome{outcome::fail, "data read back differs"};
  });
  run("export and import in this process", [&] {
    if (!caps.sharing.posix_fd) return outcome{outcome::not_supported, "device has no POSIX fd handles"};
    auto fd = memory.export_posix_fd().value();
    auto imported = pvmm::physical_allocation::import_posix_fd(fd.get(), size).value();
    void* alias = range.map_and_grant(size, imported, 0, size, {rw}).value();
    std::vector<unsigned char> in(size);
    pvmm::testing::copy_from_mapping(in.data(), alias, size).value();
    range.unmap(size, size).value();
    for (auto b : in)
      if (b != 0x5A) return outcome{outcome::fail, "the import does not show the exporter's data"};
    return outcome{outcome::pass, "second mapping of the import sees the data"};
  });
  run("export to an exec'd process", [&] {
    if (!caps.sharing.posix_fd) return outcome{outcome::not_supported, "device has no POSIX fd handles"};
    return check_cross_process(memory, mapped, size);
  });
  run("fabric handles", [&] {
    pvmm::allocation_properties fp;
    fp.exportable = pvmm::handle_types::fabric;
    auto m = pvmm::physical_allocation::create(size, fp);
    if (!m) return from_error(m.error());
    auto h = m->export_fabric();
    if (!h) return from_error(h.error());
    return outcome{outcome::pass, "exported a fabric handle"};
  });
  run("multicast objects", [&] {
    // Capability only: creating a multicast object is left to programs that mean it.
    if (!caps.multicast.supported) return outcome{outcome::not_supported, "device reports no multicast support"};
    pvmm::multicast_properties mp;
    mp.team_size = 1;
    mp.size = size;
    auto g = pvmm::multicast_granularity(mp);
    if (!g) return from_error(g.error());
    return outcome{outcome::pass, fmt::format("supported; granularity {} (no object created)", bytes(g->minimum))};
  });

  // The stream-ordered checks copy through device memory: the VMM mapping, else a pool allocation.
  device_scratch scratch{mapped, size};
  pvmm::memory_pool scratch_pool;
  pvmm::stream scratch_stream;
  pvmm::pool_allocation scratch_allocation;
  if (!mapped && caps.pools.supported) {
    run("device memory from a pool (no VMM)", [&] {
      scratch_pool = pvmm::memory_pool::create({}).value();
      scratch_stream = pvmm::stream::create(0).value();
      scratch_allocation = scratch_pool.allocate(std::size_t{1} << 20, scratch_stream).value();
      scratch_stream.synchronize().value();
      scratch = {scratch_allocation.data(), scratch_allocation.size()};
      return outcome{outcome::pass, "1 MiB for the stream-ordered checks"};
    });
  }
  auto with_scratch = [&](auto&& body) {
    return [&, body] {
      return scratch.data ? body() : outcome{outcome::not_supported, "no device memory (neither VMM nor pools)"};
    };
  };
  run("streams and events", with_scratch([&] { return check_streams(scratch); }));
  run("memory pool round trip", [&] { return check_pool(caps); });
  run("pool export to an exec'd process", [&] { return check_pool_sharing(caps); });
  run("managed memory", [&] { return check_managed(caps); });
  run("page-locked allocation", with_scratch([&] { return check_pinned(caps, scratch); }));
  run("host memory registration", with_scratch([&] { return check_registration(caps, scratch); }));

  run("teardown", [&] {
    if (scratch_allocation) scratch_allocation.free_async(scratch_stream).value();
    scratch_stream = {};
    scratch_pool = {};
    range = {};
    memory = {};
    auto live = pvmm::query_live_objects();
    if (live == pvmm::live_objects{}) return outcome{outcome::pass, "nothing left"};
    return outcome{outcome::fail,
                   fmt::format("left {} allocations, {} reservations, {} mappings, {} streams, {} events, {} pools, "
                               "{} pool allocations, {} managed, {} pinned, {} registrations",
                               live.allocations, live.reservations, live.mappings, live.streams, live.events,
                               live.pools, live.pool_allocations, live.managed, live.pinned, live.registrations)};
  });
  return results;
}

int print_self_check(const std::vector<check_result>& results) {
  auto count = [&](outcome::kind k) {
    return std::count_if(results.begin(), results.end(), [&](auto& r) { return r.result.what == k; });
  };
  fmt::print("\nself-check on device 0:\n");
  for (auto& [name, o] : results) {
    const char* label = o.what == outcome::pass ? "pass" : o.what == outcome::fail ? "FAIL" : "not supported";
    fmt::print("  {:<36} {:<14} {}\n", name, label, o.detail);
  }
  fmt::print("self-check: {} passed, {} failed, {} not supported\n", count(outcome::pass), count(outcome::fail),
             count(outcome::not_supported));
  return count(outcome::fail) ? 1 : 0;
}

std::string self_check_json(const std::vector<check_result>& results) {
  std::string out = "[";
  for (auto& [name, o] : results) {
    const char* label = o.what == outcome::pass ? "pass" : o.what == outcome::fail ? "fail" : "not_supported";
    out += fmt::format("{}{{\"name\": {}, \"result\": \"{}\", \"detail\": {}}}", out.size() > 1 ? ", " : "",
                       json_string(name), label, json_string(o.detail));
  }
  return out + "]";
}

}  // namespace pvmm_info
