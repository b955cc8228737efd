// pvmm/descriptor.hpp - a serializable description of an exported buffer made of several chunks, so the
// importer rebuilds the same contiguous layout. The bytes travel any way the caller likes (with the fds over
// ipc::send_fds, or in a fabric-handle world over MPI); parse() trusts nothing in them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <pvmm/allocation.hpp>
#include <pvmm/error.hpp>
#include <pvmm/owned_fd.hpp>
#include <pvmm/reservation.hpp>
#include <pvmm/types.hpp>

namespace pvmm {

class growable_buffer;

struct chunk_descriptor {
  std::uint64_t offset = 0;  ///< where the chunk starts in the buffer
  std::uint64_t size = 0;
  std::uint32_t fd_slot = 0;  ///< index into the fds sent with the descriptor (posix_fd)
  fabric_handle fabric;       ///< the chunk's fabric handle (fabric)
};

struct buffer_descriptor {
  handle_types kind = handle_types::posix_fd;  ///< exactly one of posix_fd and fabric
  std::int32_t device = 0;  ///< the exporter's device ordinal (informational: importers choose their own)
  std::uint64_t size = 0;   ///< total bytes: the chunks cover [0, size) back to back
  std::vector<chunk_descriptor> chunks;

  /// Fixed-layout bytes: magic "PVMMBUF1", version, then the fields above (native byte order).
  std::vector<std::uint8_t> serialize() const;
  /// Validates everything: magic, version, kind, lengths (no truncation, no trailing bytes), chunks back to
  /// back from 0 with nonzero sizes adding up to `size`, fd slots distinct and below `fds_received`.
  /// Fails with errc::protocol_error saying what is wrong.
  static result<buffer_descriptor> parse(const std::uint8_t* data, std::size_t length, std::size_t fds_received);
};

/// A descriptor and the fds it refers to (empty for fabric), ready to send.
struct exported_buffer {
  buffer_descriptor descriptor;
  std::vector<owned_fd> fds;
};

/// Describes chunks laid out back to back, exporting each as `kind` (handle_types::posix_fd or ::fabric).
result<exported_buffer> export_buffer(const std::vector<physical_allocation>& chunks, handle_types kind);
/// Describes a growable buffer's mapped chunks.
result<exported_buffer> export_buffer(const growable_buffer& buffer, handle_types kind);

/// An imported buffer: one reservation with every chunk mapped where the descriptor says.
struct imported_buffer {
  address_reservation range;
  std::vector<physical_allocation> chunks;
  void* data() const noexcept { return range.address(); }
  std::size_t size() const noexcept { return range.size(); }
};

/// Imports every chunk (fds are borrowed: close them afterwards), maps the same layout in one reservation aligned
/// to `alignment` (0 or a power of two, as for address_reservation::reserve) and grants `grants`.
/// On any failure nothing stays imported, reserved or mapped.
result<imported_buffer> import_buffer(const buffer_descriptor& descriptor, const int* fds, std::size_t fd_count,
                                      access_list grants, std::size_t alignment = 0);
/// import_buffer with the fds as they arrive from ipc::receive_fds (still owned by the caller).
result<imported_buffer> import_buffer(const buffer_descriptor& descriptor, const std::vector<owned_fd>& fds,
                                      access_list grants, std::size_t alignment = 0);

}  // namespace pvmm
