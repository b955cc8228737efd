// pvmm/types.hpp - the value types shared by every part of the interface.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>

#include <pvmm/detail/handle_value.hpp>
#include <pvmm/error.hpp>

namespace pvmm {

/// Where physical memory lives, or which processor an access right is for.
struct location {
  enum class kind : std::uint8_t { device, host, host_numa };
  kind type = kind::device;
  int id = 0;  ///< device ordinal, or NUMA node for host_numa; 0 for host

  static constexpr location device(int ordinal) noexcept { return {kind::device, ordinal}; }
  static constexpr location host() noexcept { return {kind::host, 0}; }
  static constexpr location host_numa(int node) noexcept { return {kind::host_numa, node}; }

  friend constexpr bool operator==(location a, location b) noexcept { return a.type == b.type && a.id == b.id; }
  friend constexpr bool operator!=(location a, location b) noexcept { return !(a == b); }
};

/// Shareable handle kinds an allocation may be exported as; combine with |.
enum class handle_types : std::uint32_t { none = 0, posix_fd = 1u << 0, fabric = 1u << 1 };
constexpr handle_types operator|(handle_types a, handle_types b) noexcept {
  return static_cast<handle_types>(static_cast<std::uint32_t>(a) | static_cast<std::uint32_t>(b));
}
constexpr handle_types operator&(handle_types a, handle_types b) noexcept {
  return static_cast<handle_types>(static_cast<std::uint32_t>(a) & static_cast<std::uint32_t>(b));
}
constexpr bool contains(handle_types set, handle_types which) noexcept {
  return (set & which) == which && which != handle_types::none;
}

/// What to create physical memory with. Read back from an allocation by physical_allocation::properties().
struct allocation_properties {
  pvmm::location location = pvmm::location::device(0);
  handle_types exportable = handle_types::none;  ///< handle types the allocation may be exported as
  bool gpu_direct_rdma = false;                  ///< usable by GPUDirect RDMA (device capability)
  bool compression = false;                      ///< generic compression (device capability)
};

/// Access a location has to a mapped range. New mappings start with none.
enum class access : std::uint8_t { none, read, read_write };

/// One access grant: this location gets this access.
struct access_descriptor {
  pvmm::location location;
  pvmm::access access = pvmm::access::read_write;
};

/// Borrowed access grants for one call: a braced list ({rw0, rw1}), any contiguous container built at run time
/// (std::vector, std::array), or a pointer and a count. It only refers to the caller's grants, which must outlive
/// the call (a braced list lives until the end of the full expression, so passing one directly is safe).
class access_list {
 public:
  constexpr access_list() noexcept = default;
  constexpr access_list(const access_descriptor* grants, std::size_t count) noexcept : data_(grants), size_(count) {}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-list-lifetime"  // a parameter type: the list outlives the call
#endif
  constexpr access_list(std::initializer_list<access_descriptor> grants) noexcept
      : data_(grants.begin()), size_(grants.size()) {}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
  template <class Container, class = std::enable_if_t<std::is_convertible_v<
                                 decltype(std::declval<const Container&>().data()), const access_descriptor*>>>
  constexpr access_list(const Container& grants) noexcept : data_(grants.data()), size_(grants.size()) {}

  constexpr const access_descriptor* data() const noexcept { return data_; }
  constexpr std::size_t size() const noexcept { return size_; }
  constexpr bool empty() const noexcept { return size_ == 0; }
  constexpr const access_descriptor* begin() const noexcept { return data_; }
  constexpr const access_descriptor* end() const noexcept { return data_ + size_; }

 private:
  const access_descriptor* data_ = nullptr;
  std::size_t size_ = 0;
};

/// Allocation granularities for a set of properties.
struct granularity {
  std::size_t minimum = 0;      ///< sizes and offsets must be multiples of this
  std::size_t recommended = 0;  ///< the fastest multiple to use
};

/// What a device can do, one record per feature; each record is filled by that feature's part of the backend.
/// Queried, never assumed.
struct capabilities {
  /// Virtual memory management: physical memory, reservations, mappings, access.
  struct vmm_features {
    bool supported = false;               ///< VMM works at all
    bool host_location = false;           ///< physical memory on the host, mapped for this device
    bool host_numa_location = false;      ///< physical memory on a host NUMA node
    bool compression = false;             ///< generic compression
    bool gpu_direct_rdma = false;         ///< GPUDirect RDMA on VMM allocations
    bool map_at_physical_offset = false;  ///< map from a nonzero offset into a physical allocation
    bool map_part_of_allocation = false;  ///< map less than the whole allocation (offset 0, a smaller size)
    /// The host (a grant to location::host() or host_numa(n)) may be given access to this device's memory.
    /// Host-located memory can always be granted to the host where host_location is supported.
    bool host_access_to_device_memory = false;
    int host_numa_id = -1;  ///< NUMA node nearest the device, -1 when unknown
  } vmm;
  /// Export and import of physical memory between processes.
  struct sharing_features {
    bool posix_fd = false;  ///< export/import as POSIX fd
    bool fabric = false;    ///< export/import as fabric handle (support, not permission: IMEX decides that)
    bool dmabuf = false;    ///< dma-buf export of mapped device memory (pvmm/dmabuf.hpp), what a NIC registers
  } sharing;
  /// Multicast objects.
  struct multicast_features {
    bool supported = false;
  } multicast;
  /// Stream-ordered memory pools (pvmm/memory_pool.hpp).
  struct pool_features {
    bool supported = false;      ///< pools of this device's memory
    bool host_location = false;  ///< pools of host memory for this device
    /// pool_properties::max_size is enforced. Not claimed on CUDA: driver 580 on H200 reserved 32 MiB for a pool
    /// created with maxSize 8 MiB and kept allocating past it.
    bool max_size = false;
    /// Pools exportable as POSIX fd, with their allocations exported as pool_pointer_export.
    bool ipc_posix_fd = false;
  } pools;
  /// Managed (unified) memory (pvmm/managed.hpp).
  struct managed_features {
    bool supported = false;          ///< managed allocations
    bool concurrent_access = false;  ///< host and device may use managed memory at once; prefetch to a device
    /// Pages move to the processor that uses them (CUDA: concurrent access; AMD: XNACK, that is ManagedMemory and
    /// PageableMemoryAccess). Without it, managed memory on AMD is host memory the device reads over the bus.
    bool pages_migrate = false;
    bool pageable_memory_access = false;  ///< the device reads ordinary (malloc) host memory coherently
    bool host_numa_locations = false;     ///< advice and prefetch name host NUMA nodes (CUDA 12.2's location ABI)
    bool location_attributes = false;     ///< range attributes read back host NUMA nodes (a CUDA 13.0 driver)
  } managed;
  /// Page-locked host memory (pvmm/pinned.hpp).
  struct host_memory_features {
    bool pinned = false;                          ///< page-locked allocations
    bool registration = false;                    ///< page-locking memory the program already has
    bool mapped = false;                          ///< the device reaches page-locked memory through a device pointer
    bool device_pointer_is_host_pointer = false;  ///< that device pointer equals the host pointer
  } host_memory;
};

/// The backend's handle of physical memory (CUmemGenericAllocationHandle, hipMemGenericAllocationHandle_t as
/// an integer, the host backend's memfd). A distinct type from multicast_handle: the two cannot be swapped.
struct allocation_handle : detail::handle_value<allocation_handle> {};

/// The backend's handle of a multicast object (CUmemGenericAllocationHandle from cuMulticastCreate).
struct multicast_handle : detail::handle_value<multicast_handle> {};

/// One device as the backend sees it.
struct device_info {
  int ordinal = 0;
  std::string name;
  std::string identifier;  ///< PCI bus id or similar, empty when unknown
  pvmm::capabilities capabilities;
  std::size_t total_memory = 0;
};

/// The configured backend and the software under it.
struct backend_info {
  std::string name;             ///< "cuda", "hip", "host"
  std::string runtime_version;  ///< the runtime or driver API version found, empty when none
  std::string driver_version;   ///< the kernel driver / OS version
  bool available = false;       ///< false: no driver, no runtime or no device; see unavailable_reason
  std::string unavailable_reason;
  errc unavailable_code = errc::backend_unavailable;  ///< runtime_too_old where the runtime is too old
  /// Devices the runtime sees that the backend refuses (a runtime too old, a version misread): nonzero means
  /// a GPU is here but nothing will run on it, which pvmm-info --check and the suite report as a failure.
  int refused_devices = 0;
};

/// Free and total memory of a device, in bytes.
struct memory_info {
  std::size_t free = 0;
  std::size_t total = 0;
  /// True where `free` is shared with the whole system (host RAM) and moves with other activity, so a
  /// before/after comparison cannot detect a leak.
  bool shared_with_system = false;
};

/// A fabric handle: 64 opaque bytes, a value type that may be copied and sent anywhere.
/// It does not keep the memory alive: the exporter must keep its allocation until importers are done.
struct fabric_handle {
  std::array<std::uint8_t, 64> bytes{};
  friend bool operator==(const fabric_handle& a, const fabric_handle& b) noexcept { return a.bytes == b.bytes; }
  friend bool operator!=(const fabric_handle& a, const fabric_handle& b) noexcept { return !(a == b); }
};

}  // namespace pvmm
