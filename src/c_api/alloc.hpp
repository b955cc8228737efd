// The C interface of the allocators: what alloc.cpp (caching allocator, arena) and alloc_sleeping.cpp share.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <pvmm/caching_allocator.hpp>
#include <pvmm/growable_arena.hpp>
#include <pvmm/sleeping_allocator.hpp>

#include "c_api/abi.hpp"
#include "c_api/common.hpp"
#include "core/operation.hpp"

namespace pvmm::c_api {

/// The sleeping allocator behind a handle, with the C callbacks it calls (their records live as long as it does).
struct c_sleeping {
  struct callback {
    pvmm_backing_callback fn;
    void* user;
  };
  explicit c_sleeping(sleeping_allocator a) : allocator(std::move(a)) {}
  c_sleeping(c_sleeping&& other) noexcept
      : callbacks(std::move(other.callbacks)), allocator(std::move(other.allocator)) {}
  c_sleeping& operator=(c_sleeping&&) = delete;
  status release() noexcept { return allocator.release(); }
  std::mutex lock;                                               // guards callbacks
  std::map<std::uint64_t, std::unique_ptr<callback>> callbacks;  // declared first: destroyed after the allocator
  sleeping_allocator allocator;
};

namespace alloc_c {

inline stream_ref alloc_stream(pvmm_stream_ref s) { return stream_ref(stream_handle{s.native}, s.device); }

inline pvmm_status version_error(const char* op, const char* type, std::size_t given, std::size_t known) {
  return fail(errc::version_mismatch, op,
              std::string(type) + ".struct_size is " + std::to_string(given) + "; this library knows " +
                  std::to_string(known) + " (set it with PVMM_INIT(" + type + "))");
}

/// The tags a C caller named: `count` strings, none NULL.
inline result<std::vector<std::string>> to_tags(const char* const* tags, std::size_t count, const char* op) {
  std::vector<std::string> out;
  if (count == 0) return out;
  if (tags == nullptr) return detail::operation{op}.fail(errc::invalid_argument, "tags is NULL with tag_count > 0");
  for (std::size_t i = 0; i < count; ++i) {
    if (tags[i] == nullptr)
      return detail::operation{op}.fail(errc::invalid_argument, "tags[" + std::to_string(i) + "] is NULL");
    out.emplace_back(tags[i]);
  }
  return out;
}

inline void run_c_callback(const backing_change& c, void* user) {
  const auto* cb = static_cast<const c_sleeping::callback*>(user);
  pvmm_backing_change out{c.address, c.size, c.old_generation, c.new_generation, static_cast<int>(c.reason), c.tag};
  cb->fn(&out, cb->user);
}

/// An output stats struct: written as far as its struct_size holds (from the first published size on).
template <class Out>
pvmm_status write_stats(Out* out, const Out& full, const char* op, const char* type) {
  if (!size_readable<Out>(out->struct_size)) return version_error(op, type, out->struct_size, sizeof(Out));
  write_prefix(out, full);
  return pvmm_status_ok;
}

/// An entry point that writes an allocator's statistics: `out` required; to_c(allocator) gives the whole C struct,
/// written as far as out's struct_size holds (write_stats; `out_type` names the struct).
template <class T, class Out, class ToC>
pvmm_status stats_entry(kind type, std::uint64_t id, const char* op, Out* out, const char* out_type,
                        ToC&& to_c) noexcept {
  return guard(op, [&]() -> pvmm_status {
    if (out == nullptr) return null_argument(op, "out");
    auto owner = find<T>(type, id, op);
    if (!owner) return fail(owner.error());
    return write_stats(out, to_c(static_cast<const T&>(**owner)), op, out_type);
  });
}

/// The release entry point of an allocator that refuses while it has live blocks: live(allocator) counts them;
/// busy (the handle stays) names the count and `what` ("blocks are still allocated").
template <class T, class Live>
pvmm_status release_idle(kind type, std::uint64_t id, const char* op, const char* what, Live&& live) noexcept {
  return guard(op, [&]() -> pvmm_status {
    {
      auto owner = find<T>(type, id, op);
      if (!owner) return fail(owner.error());
      if (const auto n = live(static_cast<const T&>(**owner)))
        return fail(errc::busy, op, std::to_string(n) + " " + what + " (the handle stays)");
    }
    return release_entry<T>(type, id, op);
  });
}

}  // namespace alloc_c
}  // namespace pvmm::c_api
