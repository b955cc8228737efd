// buffer_descriptor: the wire format, its validation, and export/import of multi-chunk buffers.
#include <fcntl.h>
#include <algorithm>

#include <cstring>
#include <set>

#include <fmt/format.h>

#include <pvmm/descriptor.hpp>
#include <pvmm/growable_buffer.hpp>

#include "core/checked_math.hpp"
#include "core/describe.hpp"
#include "core/device.hpp"
#include "core/operation.hpp"

namespace pvmm {
namespace {

constexpr char magic[8] = {'P', 'V', 'M', 'M', 'B', 'U', 'F', '1'};
constexpr std::uint32_t version = 1;
constexpr std::size_t header_bytes = 8 + 4 + 4 + 4 + 8 + 4;  // magic, version, kind, device, size, count
constexpr std::size_t chunk_bytes = 8 + 8 + 4 + 4 + 64;      // offset, size, fd slot, reserved, fabric
constexpr std::uint32_t max_chunks = 1u << 20;

template <class T>
void put(std::uint8_t*& p, const T& v) {
  std::memcpy(p, &v, sizeof v);
  p += sizeof v;
}

template <class T>
T get(const std::uint8_t*& p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  p += sizeof v;
  return v;
}

/// A chunk that cannot be imported or mapped as the descriptor says. Only what the peer controls is its
/// fault (protocol_error): an fd that is not importable memory or a size or layout that does not match it
/// (the host backend notices at import, CUDA only when mapping). Local failures — no fds or memory left,
/// a capability this backend lacks, a driver error — keep their own code: blaming the peer would send the
/// user looking in the wrong process.
enum class stage { import, map };

error descriptor_mismatch(error e, std::size_t chunk, stage at, const detail::operation& op) {
  // Mapping a whole imported allocation is always supported: where the driver says otherwise (CUDA answers
  // CUDA_ERROR_NOT_SUPPORTED to a map of another size than the allocation's), the size was a lie.
  const bool lie_at_map = at == stage::map && e.code == errc::not_supported;
  switch (lie_at_map ? errc::invalid_size : e.code) {
    case errc::invalid_handle:
    case errc::invalid_argument:
    case errc::invalid_size:
    case errc::unaligned:
    case errc::out_of_range:
      e.detail = fmt::format("chunk {} does not match the memory it names: {}", chunk, e.detail);
      e.code = errc::protocol_error;
      return op.take_over(std::move(e));
    default:
      e.detail = fmt::format("chunk {}: {}", chunk, e.detail);
      return op.take_over(std::move(e));
  }
}

error malformed(std::string detail) {
  const detail::operation op{"pvmm::buffer_descriptor::parse"};
  return op.fail(errc::protocol_error, std::move(detail),
                 "the sender and receiver must run compatible pvmm versions; never trust a peer's layout");
}

}  // namespace

std::vector<std::uint8_t> buffer_descriptor::serialize() const {
  std::vector<std::uint8_t> out(header_bytes + chunks.size() * chunk_bytes);
  std::uint8_t* p = out.data();
  put(p, magic);
  put(p, version);
  put(p, static_cast<std::uint32_t>(kind));
  put(p, device);
  put(p, size);
  put(p, static_cast<std::uint32_t>(chunks.size()));
  for (const auto& c : chunks) {
    put(p, c.offset);
    put(p, c.size);
    put(p, c.fd_slot);
    put(p, std::uint32_t{0});
    put(p, c.fabric.bytes);
  }
  return out;
}

result<buffer_descriptor> buffer_descriptor::parse(const std::uint8_t* data, std::size_t length,
                                                   std::size_t fds_received) {
  if (!data || length < header_bytes)
    return malformed(fmt::format("{} bytes is shorter than the {}-byte header", length, header_bytes));
  if (std::memcmp(data, magic, 8) != 0) return malformed("the magic bytes are not PVMMBUF1");
  const std::uint8_t* p = data + 8;
  if (auto v = get<std::uint32_t>(p); v != version)
    return malformed(fmt::format("descriptor version {} (this pvmm reads version {})", v, version));
  buffer_descriptor d;
  auto kind = get<std::uint32_t>(p);
  if (kind != static_cast<std::uint32_t>(handle_types::posix_fd) &&
      kind != static_cast<std::uint32_t>(handle_types::fabric))
    return malformed(fmt::format("unknown handle kind {}", kind));
  d.kind = static_cast<handle_types>(kind);
  d.device = get<std::int32_t>(p);
  d.size = get<std::uint64_t>(p);
  auto count = get<std::uint32_t>(p);
  if (d.device < 0) return malformed(fmt::format("device {} is negative", d.device));
  if (count == 0 || count > max_chunks) return malformed(fmt::format("{} chunks (1 to {} allowed)", count, max_chunks));
  const std::size_t expected = header_bytes + std::size_t{count} * chunk_bytes;
  if (length != expected)
    return malformed(fmt::format("{} bytes for {} chunks: expected exactly {} ({})", length, count, expected,
                                 length < expected ? "truncated" : "trailing bytes"));
  std::set<std::uint32_t> slots;
  std::uint64_t next = 0;
  d.chunks.resize(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    auto& c = d.chunks[i];
    c.offset = get<std::uint64_t>(p);
    c.size = get<std::uint64_t>(p);
    c.fd_slot = get<std::uint32_t>(p);
    // Reserved for a later version: a sender that sets it speaks a format this pvmm does not know.
    if (auto reserved = get<std::uint32_t>(p); reserved != 0)
      return malformed(fmt::format("chunk {} has reserved field {:#x}; it must be 0", i, reserved));
    std::memcpy(c.fabric.bytes.data(), p, 64);
    p += 64;
    if (c.size == 0) return malformed(fmt::format("chunk {} has size 0", i));
    if (c.offset != next)
      return malformed(
          fmt::format("chunk {} starts at {:#x}, but the chunks before it end at {:#x}", i, c.offset, next));
    if (c.size > d.size || next > d.size - c.size)
      return malformed(fmt::format("chunk {} ends past the buffer size {:#x}", i, d.size));
    next += c.size;
    if (d.kind == handle_types::posix_fd) {
      if (c.fd_slot >= fds_received)
        return malformed(fmt::format("chunk {} names fd slot {}, but {} fd(s) arrived", i, c.fd_slot, fds_received));
      if (!slots.insert(c.fd_slot).second) return malformed(fmt::format("fd slot {} is used twice", c.fd_slot));
    }
  }
  if (next != d.size)
    return malformed(fmt::format("the chunks cover {:#x} bytes, the header says {:#x}", next, d.size));
  return d;
}

result<exported_buffer> export_buffer(const std::vector<physical_allocation>& chunks, handle_types kind) {
  auto args = [&] { return fmt::format("chunks={}, kind={}", chunks.size(), static_cast<int>(kind)); };
  const detail::operation op{"pvmm::export_buffer", args};
  if (chunks.empty()) return op.fail(errc::invalid_argument, "no chunks to export");
  if (kind != handle_types::posix_fd && kind != handle_types::fabric)
    return op.fail(errc::invalid_argument,
                   "kind must be exactly one of handle_types::posix_fd and handle_types::fabric");
  exported_buffer out;
  out.descriptor.kind = kind;
  for (const auto& c : chunks) {
    chunk_descriptor cd;
    cd.offset = out.descriptor.size;
    cd.size = c.size();
    if (!c.valid()) return op.fail(errc::already_released, "a chunk is empty");
    if (kind == handle_types::posix_fd) {
      auto fd = c.export_posix_fd();
      if (!fd) return std::move(fd).error();
      cd.fd_slot = static_cast<std::uint32_t>(out.fds.size());
      out.fds.push_back(std::move(*fd));
    } else {
      auto h = c.export_fabric();
      if (!h) return std::move(h).error();
      cd.fabric = *h;
    }
    auto total = detail::checked_add(out.descriptor.size, c.size());
    if (!total) return op.fail(errc::out_of_range, "the chunks' sizes add up past 2^64");
    out.descriptor.size = *total;
    out.descriptor.chunks.push_back(cd);
  }
  auto props = chunks.front().properties();
  if (!props) return op.wrap(std::move(props).error());
  // Host-located chunks report device 0: the field is informational, importers choose their own devices.
  if (props->location.type == location::kind::device) out.descriptor.device = props->location.id;
  return out;
}

result<exported_buffer> export_buffer(const growable_buffer& buffer, handle_types kind) {
  return export_buffer(buffer.chunks(), kind);
}

result<imported_buffer> import_buffer(const buffer_descriptor& d, const int* fds, std::size_t fd_count,
                                      access_list grants, std::size_t alignment) {
  auto args = [&] {
    return fmt::format("size={:#x}, chunks={}, fds={}, grants={}, alignment={:#x}", d.size, d.chunks.size(), fd_count,
                       grants.size(), alignment);
  };
  const detail::operation op{"pvmm::import_buffer", args};
  // Re-validate a descriptor built by hand the same way as one that arrived as bytes.
  auto bytes = d.serialize();
  auto checked = buffer_descriptor::parse(bytes.data(), bytes.size(), fd_count);
  if (!checked) return op.wrap(std::move(checked).error());
  if (d.kind == handle_types::posix_fd && !fds)
    return op.fail(errc::invalid_argument, "no fds for a posix_fd descriptor");
  if (d.kind == handle_types::posix_fd)  // the caller's own array: a closed fd is the caller's mistake, not the peer's
    for (std::size_t i = 0; i < fd_count; ++i)
      if (fds[i] < 0 || ::fcntl(fds[i], F_GETFD) < 0)
        return op.fail(errc::invalid_argument, fmt::format("fds[{}] = {} is not open", i, fds[i]));
  imported_buffer out;  // on any early return its destructor undoes everything done so far
  for (const auto& c : d.chunks) {
    auto chunk = d.kind == handle_types::posix_fd ? physical_allocation::import_posix_fd(fds[c.fd_slot], c.size)
                                                  : physical_allocation::import_fabric(c.fabric, c.size);
    if (!chunk) return descriptor_mismatch(std::move(chunk).error(), out.chunks.size(), stage::import, op);
    out.chunks.push_back(std::move(*chunk));
  }
  auto range = address_reservation::reserve(d.size, alignment);
  if (!range) return std::move(range).error();
  out.range = std::move(*range);
  for (std::size_t i = 0; i < d.chunks.size(); ++i) {
    auto p = out.range.map(d.chunks[i].offset, out.chunks[i], 0, d.chunks[i].size);
    if (!p) return descriptor_mismatch(std::move(p).error(), i, stage::map, op);
  }
  if (auto ok = out.range.set_access(0, d.size, grants); !ok) return std::move(ok).error();
  return out;
}

result<imported_buffer> import_buffer(const buffer_descriptor& descriptor, const std::vector<owned_fd>& fds,
                                      access_list grants, std::size_t alignment) {
  std::vector<int> raw(fds.size());
  std::transform(fds.begin(), fds.end(), raw.begin(), [](const owned_fd& fd) { return fd.get(); });
  return import_buffer(descriptor, raw.data(), raw.size(), grants, alignment);
}

}  // namespace pvmm
