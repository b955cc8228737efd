// pvmm-info: the backend and each device's capabilities, as a text table or as JSON. One list of fields feeds both,
// so the two cannot disagree.
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "info.hpp"

namespace pvmm_info {

std::string bytes(std::size_t n) {
  if (n >= (std::size_t{1} << 30) && n % (std::size_t{1} << 30) == 0) return fmt::format("{} GiB", n >> 30);
  if (n >= (std::size_t{1} << 20) && n % (std::size_t{1} << 20) == 0) return fmt::format("{} MiB", n >> 20);
  if (n >= (std::size_t{1} << 10) && n % (std::size_t{1} << 10) == 0) return fmt::format("{} KiB", n >> 10);
  if (n >= (std::size_t{1} << 30)) return fmt::format("{:.1f} GiB", static_cast<double>(n) / (1 << 30));
  return fmt::format("{} B", n);
}

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        // Other control characters must be escaped; bytes >= 0x80 pass through (JSON text is UTF-8).
        if (c < 0x20)
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        else
          out += ch;
    }
  }
  return out + "\"";
}

namespace {

const char* yes_no(bool b) { return b ? "yes" : "no"; }
const char* json_bool(bool b) { return b ? "true" : "false"; }

/// One capability: its record and member name (as in pvmm::capabilities), the table's label, its value.
struct field {
  const char* record;
  const char* member;
  const char* label;
  bool value;
};

/// Every boolean capability, record by record in the struct's order (vmm.host_numa_id, the one integer, is
/// printed beside them).
std::vector<field> fields(const pvmm::capabilities& c) {
  return {
      {"vmm", "supported", "virtual memory management", c.vmm.supported},
      {"vmm", "host_location", "host-located memory", c.vmm.host_location},
      {"vmm", "host_numa_location", "host-NUMA-located memory", c.vmm.host_numa_location},
      {"vmm", "compression", "generic compression", c.vmm.compression},
      {"vmm", "gpu_direct_rdma", "GPUDirect RDMA with VMM", c.vmm.gpu_direct_rdma},
      {"vmm", "map_at_physical_offset", "map from a physical offset", c.vmm.map_at_physical_offset},
      {"vmm", "map_part_of_allocation", "map part of an allocation", c.vmm.map_part_of_allocation},
      {"vmm", "host_access_to_device_memory", "host access to device memory", c.vmm.host_access_to_device_memory},
      {"sharing", "posix_fd", "POSIX fd handles", c.sharing.posix_fd},
      {"sharing", "fabric", "fabric handles", c.sharing.fabric},
      {"sharing", "dmabuf", "dma-buf export", c.sharing.dmabuf},
      {"multicast", "supported", "multicast objects", c.multicast.supported},
      {"pools", "supported", "memory pools", c.pools.supported},
      {"pools", "host_location", "memory pools of host memory", c.pools.host_location},
      {"pools", "max_size", "pool maximum size enforced", c.pools.max_size},
      {"pools", "ipc_posix_fd", "pool sharing (POSIX fd)", c.pools.ipc_posix_fd},
      {"managed", "supported", "managed memory", c.managed.supported},
      {"managed", "concurrent_access", "managed: concurrent access", c.managed.concurrent_access},
      {"managed", "pages_migrate", "managed: pages migrate", c.managed.pages_migrate},
      {"managed", "pageable_memory_access", "pageable memory access", c.managed.pageable_memory_access},
      {"managed", "host_numa_locations", "managed: host NUMA locations", c.managed.host_numa_locations},
      {"managed", "location_attributes", "managed: location attributes", c.managed.location_attributes},
      {"host_memory", "pinned", "page-locked allocations", c.host_memory.pinned},
      {"host_memory", "registration", "host memory registration", c.host_memory.registration},
      {"host_memory", "mapped", "mapped page-locked memory", c.host_memory.mapped},
      {"host_memory", "device_pointer_is_host_pointer", "device pointer = host pointer",
       c.host_memory.device_pointer_is_host_pointer},
  };
}

/// One granularity the table shows: which, and the answer or the error code.
struct granularity_row {
  const char* key;    ///< JSON key
  const char* label;  ///< in the text table
  pvmm::result<pvmm::granularity> value;
};

std::vector<granularity_row> granularities(int device, const pvmm::capabilities& c) {
  auto query = [](pvmm::location where) {
    pvmm::allocation_properties p;
    p.location = where;
    return pvmm::query_granularity(p);
  };
  std::vector<granularity_row> rows;
  rows.push_back({"device", "device", query(pvmm::location::device(device))});
  if (c.vmm.host_numa_location)
    rows.push_back(
        {"host_numa", "host NUMA", query(pvmm::location::host_numa(c.vmm.host_numa_id < 0 ? 0 : c.vmm.host_numa_id))});
  return rows;
}

}  // namespace

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
    for (auto& f : fields(c)) fmt::print("  {:<34} {}\n", f.label, yes_no(f.value));
    fmt::print("  {:<34} {}\n", "nearest host NUMA node", c.vmm.host_numa_id);
    for (auto& g : granularities(d, c)) {
      const auto label = fmt::format("granularity ({})", g.label);
      if (g.value)
        fmt::print("  {:<34} minimum {}, recommended {}\n", label, bytes(g.value->minimum),
                   bytes(g.value->recommended));
      else
        fmt::print("  {:<34} {}\n", label, pvmm::to_string(g.value.code()));
    }
  }
}

std::string backend_json(const pvmm::backend_info& b) {
  return fmt::format(
      "{{\"name\": {}, \"runtime_version\": {}, \"driver_version\": {}, \"available\": {}, "
      "\"unavailable_reason\": {}, \"refused_devices\": {}}}",
      json_string(b.name), json_string(b.runtime_version), json_string(b.driver_version), json_bool(b.available),
      json_string(b.unavailable_reason), b.refused_devices);
}

std::string devices_json(int count) {
  std::string out = "[";
  for (int d = 0; d < count; ++d) {
    if (d) out += ", ";
    auto info = pvmm::query_device(d);
    if (!info) {
      out += fmt::format("{{\"ordinal\": {}, \"error\": {}}}", d, json_string(info.error().message()));
      continue;
    }
    const auto& c = info->capabilities;
    out +=
        fmt::format("{{\"ordinal\": {}, \"name\": {}, \"identifier\": {}, \"total_memory\": {}, \"capabilities\": {{",
                    d, json_string(info->name), json_string(info->identifier), info->total_memory);
    // The fields come grouped by record, so a record ends where the next one's name starts; vmm's one integer
    // member closes its record.
    const char* open = nullptr;
    auto close = [&] {
      if (open && std::string_view(open) == "vmm") out += fmt::format(", \"host_numa_id\": {}", c.vmm.host_numa_id);
      if (open) out += "}";
    };
    for (auto& f : fields(c)) {
      if (!open || std::string_view(open) != f.record) {
        close();
        out += fmt::format("{}{}: {{", open ? ", " : "", json_string(f.record));
        open = f.record;
      } else {
        out += ", ";
      }
      out += fmt::format("{}: {}", json_string(f.member), json_bool(f.value));
    }
    close();
    out += "}, \"granularities\": {";
    bool first = true;
    for (auto& g : granularities(d, c)) {
      out += first ? "" : ", ";
      first = false;
      if (g.value)
        out += fmt::format("{}: {{\"minimum\": {}, \"recommended\": {}}}", json_string(g.key), g.value->minimum,
                           g.value->recommended);
      else
        out += fmt::format("{}: {{\"error\": {}}}", json_string(g.key), json_string(pvmm::to_string(g.value.code())));
    }
    out += "}}";
  }
  return out + "]";
}

}  // namespace pvmm_info
