// The pickle writer (observe/pickle.hpp) and PyTorch's snapshot dictionary written with it.
#include "observe/pickle.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <new>

#include <fmt/format.h>

#include "core/enum_text.hpp"
#include "core/operation.hpp"
#include "observe/observe.hpp"

namespace pvmm {
namespace detail::observe {

void pickle_writer::integer(std::int64_t v) {
  if (v >= 0 && v < 256) {
    out_ += 'K';  // BININT1
    out_ += static_cast<char>(v);
  } else if (v >= 0 && v < 65536) {
    out_ += 'M';  // BININT2
    out_ += static_cast<char>(v & 0xff);
    out_ += static_cast<char>(v >> 8);
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    out_ += 'J';  // BININT: 4 bytes, signed
    const auto u = static_cast<std::uint32_t>(static_cast<std::int32_t>(v));
    for (int i = 0; i < 4; ++i) out_ += static_cast<char>((u >> (8 * i)) & 0xff);
  } else {
    unsigned char b[8];
    const auto u = static_cast<std::uint64_t>(v);
    for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>((u >> (8 * i)) & 0xff);
    long1(b, 8);
  }
}

void pickle_writer::unsigned_integer(std::uint64_t v) {
  if (v <= static_cast<std::uint64_t>(INT64_MAX)) return integer(static_cast<std::int64_t>(v));
  unsigned char b[9];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>((v >> (8 * i)) & 0xff);
  b[8] = 0;  // the sign byte: the top bit of b[7] is set
  long1(b, 9);
}

void pickle_writer::long1(const unsigned char* bytes, int count) {
  // Drop high bytes that only repeat the sign of the byte below them.
  while (count > 1 && ((bytes[count - 1] == 0x00 && (bytes[count - 2] & 0x80) == 0) ||
                       (bytes[count - 1] == 0xff && (bytes[count - 2] & 0x80) != 0)))
    --count;
  out_ += '\x8a';  // LONG1
  out_ += static_cast<char>(count);
  out_.append(reinterpret_cast<const char*>(bytes), static_cast<std::size_t>(count));
}

void pickle_writer::string(std::string_view s) {
  out_ += 'X';  // BINUNICODE: 4-byte length, UTF-8 bytes
  const auto n = static_cast<std::uint32_t>(s.size());
  for (int i = 0; i < 4; ++i) out_ += static_cast<char>((n >> (8 * i)) & 0xff);
  out_.append(s.data(), s.size());
}

namespace {
const char* state_name(block_state s) noexcept {
  static constexpr const char* texts[] = {"active_allocated", "active_awaiting_free", "inactive"};
  return enum_text(s, texts, "inactive");
}

void empty_list(pickle_writer& w) {
  w.begin_list();
  w.end_list();
}

struct unsigned_field {
  const char* key;
  std::uint64_t value;
};

/// key, value for each of `fields`, in their order.
void unsigned_fields(pickle_writer& w, std::initializer_list<unsigned_field> fields) {
  for (const auto& f : fields) w.key(f.key), w.unsigned_integer(f.value);
}

void write_block(pickle_writer& w, const snapshot_block& b) {
  w.begin_dict();
  unsigned_fields(w, {{"address", b.address}, {"size", b.size}, {"requested_size", b.requested_size}});
  w.key("state"), w.string(state_name(b.state));
  w.key("frames"), empty_list(w);
  w.key("pvmm_label"), w.string(b.label);
  w.end_dict();
}

void write_segment(pickle_writer& w, const snapshot_segment& s) {
  w.begin_dict();
  w.key("device"), w.integer(s.device);
  unsigned_fields(w, {{"address", s.address},
                      {"total_size", s.total_size},
                      {"allocated_size", s.allocated_size()},
                      {"active_size", s.active_size()},
                      {"requested_size", s.requested_size()},
                      {"stream", s.stream}});
  w.key("segment_type"), w.string("large");
  w.key("segment_pool_id"), w.integer(s.pool_id[0]), w.integer(s.pool_id[1]), w.tuple2_end();
  w.key("is_expandable"), w.boolean(s.is_expandable);
  w.key("frames"), empty_list(w);
  w.key("pvmm_kind"), w.string(s.kind);
  w.key("pvmm_label"), w.string(s.label);
  w.key("blocks");
  w.begin_list();
  for (const auto& b : s.blocks) write_block(w, b);
  w.end_list();
  w.end_dict();
}

void write_entry(pickle_writer& w, const trace_entry& e) {
  w.begin_dict();
  w.key("action"), w.string(e.action);
  unsigned_fields(w, {{"addr", e.address}, {"size", e.size}, {"stream", e.stream}});
  w.key("time_us"), w.integer(e.time_us);
  w.key("frames"), empty_list(w);
  w.key("device_free"), w.integer(0);
  w.end_dict();
}
}  // namespace
}  // namespace detail::observe

result<std::string> snapshot_pickle(const memory_snapshot& snapshot) {
  const detail::operation op{"pvmm::snapshot_pickle"};
  try {
    detail::observe::pickle_writer w;
    w.begin_dict();
    w.key("segments");
    w.begin_list();
    for (const auto& s : snapshot.segments) detail::observe::write_segment(w, s);
    w.end_list();
    w.key("device_traces");
    w.begin_list();
    for (const auto& device : snapshot.device_traces) {
      w.begin_list();
      for (const auto& e : device) detail::observe::write_entry(w, e);
      w.end_list();
    }
    w.end_list();
    w.key("allocator_settings");
    w.begin_dict();
    w.end_dict();
    w.key("pvmm_version"), w.integer(1);
    w.end_dict();
    return w.finish();
  } catch (const std::bad_alloc&) {
    return op.fail(errc::out_of_memory, "memory ran out while writing the snapshot's pickle");
  }
}

status write_snapshot(const memory_snapshot& snapshot, const std::string& path) {
  auto args = [&] { return fmt::format("path='{}'", path); };
  const detail::operation op{"pvmm::write_snapshot", args};
  if (path.empty()) return op.fail(errc::invalid_argument, "the path is empty");
  auto bytes = snapshot_pickle(snapshot);
  if (!bytes) return op.wrap(std::move(bytes).error());
  std::FILE* f = std::fopen(path.c_str(), "wbe");  // e: close-on-exec (invariant 14)
  if (f == nullptr) {
    const int e = errno;
    return op.fail(errc::system_error, fmt::format("cannot open '{}' for writing: {}", path, std::strerror(e)),
                   "check that the directory exists and is writable");
  }
  const bool written = std::fwrite(bytes->data(), 1, bytes->size(), f) == bytes->size();
  const int e = errno;
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed)
    return op.fail(errc::system_error,
                   fmt::format("writing {} bytes to '{}' failed: {}", bytes->size(), path, std::strerror(e)));
  return {};
}

status dump_snapshot(const std::string& path) {
  auto s = take_memory_snapshot();
  if (!s) return std::move(s).error();
  return write_snapshot(*s, path);
}

}  // namespace pvmm
