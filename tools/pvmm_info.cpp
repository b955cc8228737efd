// pvmm-info: what the configured backend and its devices support, and (--check) a self-check of each feature.
#include <fcntl.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <pvmm/pvmm.hpp>
#include <pvmm/testing.hpp>

extern char** environ;

namespace {

const char* yes_no(bool b) { return b ? "yes" : "no"; }

std::string bytes(std::size_t n) {
  if (n >= (std::size_t{1} << 30) && n % (std::size_t{1} << 30) == 0) return fmt::format("{} GiB", n >> 30);
  if (n >= (std::size_t{1} << 20) && n % (std::size_t{1} << 20) == 0) return fmt::format("{} MiB", n >> 20);
  if (n >= (std::size_t{1} << 10) && n % (std::size_t{1} << 10) == 0) return fmt::format("{} KiB", n >> 10);
  if (n >= (std::size_t{1} << 30)) return fmt::format("{:.1f} GiB", static_cast<double>(n) / (1 << 30));
  return fmt::format("{} B", n);
}

void print_devices(int count) {
  for (int d = 0; d < count; ++d) {
    auto info = pvmm::query_device(d);
    if (!info) {
      fmt::print("device {}: {}\n", d, info.error().message());
      continue;
    }
    const auto& c = info->capabilities;
    fmt::print("\ndevice {}: {}{}\n", d, info->name, info->identifier.empty() ? "" : " [" + info->identifier + "]");
    fmt::print("  {:<34} {}\n", "memory", bytes(info->total_memory));
    const std::pair<const char*, bool> rows[] = {
        {"virtual memory management", c.vmm.supported},
        {"POSIX fd handles", c.sharing.posix_fd},
        {"fabric handles", c.sharing.fabric},
        {"multicast objects", c.multicast.supported},
        {"GPUDirect RDMA with VMM", c.vmm.gpu_direct_rdma},
        {"host-located memory", c.vmm.host_location},
        {"host-NUMA-located memory", c.vmm.host_numa_location},
        {"generic compression", c.vmm.compression},
        {"map from a physical offset", c.vmm.map_at_physical_offset},
        {"map part of an allocation", c.vmm.map_part_of_allocation},
        {"host access to device memory", c.vmm.host_access_to_device_memory},
        {"memory pools", c.pools.supported},
        {"memory pools of host memory", c.pools.host_location},
        {"pool maximum size enforced", c.pools.max_size},
        {"pool sharing (POSIX fd)", c.pools.ipc_posix_fd},
        {"managed memory", c.managed.supported},
        {"managed: concurrent access", c.managed.concurrent_access},
        {"managed: pages migrate", c.managed.pages_migrate},
        {"pageable memory access", c.managed.pageable_memory_access},
        {"managed: host NUMA locations", c.managed.host_numa_locations},
        {"managed: location attributes", c.managed.location_attributes},
        {"page-locked allocations", c.host_memory.pinned},
        {"host memory registration", c.host_memory.registration},
        {"mapped page-locked memory", c.host_memory.mapped},
        {"device pointer = host pointer", c.host_memory.device_pointer_is_host_pointer},
    };
    for (auto& [name, value] : rows) fmt::print("  {:<34} {}\n", name, yes_no(value));
    fmt::print("  {:<34} {}\n", "nearest host NUMA node", c.vmm.host_numa_id);
    auto show = [&](const char* what, pvmm::location where) {
      pvmm::allocation_properties p;
      p.location = where;
      auto g = pvmm::query_granularity(p);
      if (g)
        fmt::print("  {:<34} minimum {}, recommended {}\n", fmt::format("granularity ({})", what), bytes(g->minimum),
                   bytes(g->recommended));
      else
        fmt::print("  {:<34} {}\n", fmt::format("granularity ({})", what), pvmm::to_string(g.code()));
    };
    show("device", pvmm::location::device(d));
    if (c.vmm.host_numa_location)
      show("host NUMA", pvmm::location::host_numa(c.vmm.host_numa_id < 0 ? 0 : c.vmm.host_numa_id));
  }
}

// ---- self-check ----

struct outcome {
  enum kind { pass, fail, not_supported } what;
  std::string detail;
};

outcome from_error(const pvmm::error& e) {
  return {e.code == pvmm::errc::not_supported || e.code == pvmm::errc::not_permitted ? outcome::not_supported
                                                                                     : outcome::fail,
          e.message()};
}

/// Child mode: receive one fd, import, map, check the parent's bytes, write ours, answer.
int serve_import(int sock, std::size_t size) {
  auto answer = [&](const std::string& text) {
    (void)pvmm::ipc::send_fds(sock, nullptr, 0, text.data(), text.size());
    return text == "ok" ? 0 : 1;
  };
  try {
    auto message = pvmm::ipc::receive_fds(sock, 1, 16).value();
    if (message.fds.size() != 1) return answer("no fd arrived");
    auto memory = pvmm::physical_allocation::import_posix_fd(message.fds[0].get(), size).value();
    auto range = pvmm::address_reservation::reserve(size).value();
    void* p = range.map_and_grant(0, memory, 0, size, {{pvmm::location::device(0), pvmm::access::read_write}}).value();
    std::vector<unsigned char> seen(size);
    pvmm::testing::copy_from_mapping(seen.data(), p, size).value();
    for (auto b : seen)
      if (b != 0x5A) return answer("the parent's bytes did not arrive");
    std::vector<unsigned char> mine(size, 0xC3);
    pvmm::testing::copy_to_mapping(p, mine.data(), size).value();
    return answer("ok");
  } catch (const pvmm::exception& e) {
    return answer(e.what());
  }
}

outcome check_cross_process(const pvmm::physical_allocation& memory, void* mapped, std::size_t size) {
  auto fd = memory.export_posix_fd();
  if (!fd) return from_error(fd.error());
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return {outcome::fail, "socketpair failed"};
  int child_end = ::fcntl(sv[1], F_DUPFD, 0);  // survives exec
  ::close(sv[1]);
  std::string self = "/proc/self/exe", sock = std::to_string(child_end), sz = std::to_string(size);
  std::string mode = "--serve-import";
  char* argv[] = {self.data(), mode.data(), sock.data(), sz.data(), nullptr};
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv, environ);
  ::close(child_end);
  if (rc != 0) {
    ::close(sv[0]);
    return {outcome::fail, fmt::format("posix_spawn: {}", std::strerror(rc))};
  }
  int raw = fd->get();
  auto sent = pvmm::ipc::send_fds(sv[0], &raw, 1, "x", 1);
  auto reply = sent ? pvmm::ipc::receive_fds(sv[0], 0, 4096, std::chrono::milliseconds(60000))
                    : pvmm::result<pvmm::ipc::received>(sent.error());
  ::close(sv[0]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  if (!reply) return {outcome::fail, reply.error().message()};
  std::string text(reply->payload.begin(), reply->payload.end());
  if (text != "ok") return {outcome::fail, "child: " + text};
  std::vector<unsigned char> back(size);
  if (auto ok = pvmm::testing::copy_from_mapping(back.data(), mapped, size); !ok) return from_error(ok.error());
  for (auto b : back)
    if (b != 0xC3) return {outcome::fail, "the child's write is not visible to the exporter"};
  return {outcome::pass, "exec'd child imported the fd over SCM_RIGHTS, wrote; the exporter saw it"};
}

int self_check() {
  std::vector<std::pair<std::string, outcome>> results;
  auto run = [&](const std::string& name, auto&& body) {
    try {
      results.emplace_back(name, body());
    } catch (const pvmm::exception& e) {
      results.emplace_back(name, from_error(e.error()));
    }
  };
  auto caps = pvmm::query_device(0).value().capabilities;
  pvmm::allocation_properties props;
  if (caps.sharing.posix_fd) props.exportable = pvmm::handle_types::posix_fd;
  const std::size_t size = pvmm::query_granularity(props).value().minimum;
  pvmm::physical_allocation memory;
  pvmm::address_reservation range;
  void* mapped = nullptr;
  const pvmm::access_descriptor rw{pvmm::location::device(0), pvmm::access::read_write};

  run("allocate physical memory", [&] {
    memory = pvmm::physical_allocation::create(props, size).value();
    return outcome{outcome::pass, fmt::format("{} on device 0", bytes(size))};
  });
  run("reserve and map", [&] {
    range = pvmm::address_reservation::reserve(2 * size).value();
    mapped = range.map(0, memory, 0, size).value();
    auto a = pvmm::query_access(pvmm::location::device(0), mapped).value();
    if (a != pvmm::access::none) return outcome{outcome::fail, "a new mapping already had access"};
    return outcome{outcome::pass, "new mapping starts with no access"};
  });
  run("grant access, write, read back", [&] {
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
    auto m = pvmm::physical_allocation::create(fp, size);
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
  run("teardown", [&] {
    range = {};
    memory = {};
    auto live = pvmm::query_live_objects();
    if (live.allocations || live.reservations || live.mappings)
      return outcome{outcome::fail, fmt::format("left {} allocations, {} reservations, {} mappings", live.allocations,
                                                live.reservations, live.mappings)};
    return outcome{outcome::pass, "nothing left"};
  });

  int failures = 0;
  fmt::print("\nself-check on device 0:\n");
  for (auto& [name, o] : results) {
    const char* label = o.what == outcome::pass ? "pass" : o.what == outcome::fail ? "FAIL" : "not supported";
    failures += o.what == outcome::fail;
    fmt::print("  {:<36} {:<14} {}\n", name, label, o.detail);
  }
  fmt::print(
      "self-check: {} passed, {} failed, {} not supported\n",
      std::count_if(results.begin(), results.end(), [](auto& r) { return r.second.what == outcome::pass; }), failures,
      std::count_if(results.begin(), results.end(), [](auto& r) { return r.second.what == outcome::not_supported; }));
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 3 && args[0] == "--serve-import") return serve_import(std::stoi(args[1]), std::stoull(args[2]));
  bool check = false;
  for (auto& a : args) {
    if (a == "--check") {
      check = true;
    } else {
      fmt::print(
          "usage: pvmm-info [--check]\n  prints the backend and each device's capabilities;\n"
          "  --check also runs a self-check of every feature and exits non-zero on a failure\n");
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  auto b = pvmm::query_backend();
  fmt::print("pvmm {} backend\n", b.name);
  fmt::print("  runtime: {}\n  driver:  {}\n", b.runtime_version.empty() ? "-" : b.runtime_version,
             b.driver_version.empty() ? "-" : b.driver_version);
  auto count = pvmm::device_count();
  if (b.refused_devices > 0) {
    // GPUs are here but the backend will not use them: a check that passed now would prove nothing.
    fmt::print("  devices: 0 usable of {} present ({})\n", b.refused_devices, b.unavailable_reason);
    if (check) fmt::print("self-check: FAIL: {} device(s) present, all refused by the backend\n", b.refused_devices);
    return check ? 1 : 0;
  }
  if (!b.available || !count || *count == 0) {
    fmt::print("  devices: 0 ({})\n", !b.unavailable_reason.empty() ? b.unavailable_reason
                                      : count                       ? std::string("no device")
                                                                    : count.error().message());
    if (check) fmt::print("self-check: 0 passed, 0 failed, all not supported (no device here)\n");
    return 0;
  }
  fmt::print("  devices: {}\n", *count);
  print_devices(*count);
  return check ? self_check() : 0;
}
