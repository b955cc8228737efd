// Host backend, feature "managed": managed memory is anonymous mapped memory. Advice and the last prefetch are kept
// per run of pages that share them (split where advice changes, merged where it no longer differs), so the records
// cost what the distinct ranges cost, not what the pages do (an untouched 16 GiB range is one record). They have the
// effects a host can give them: a prefetch populates the pages in stream order (MADV_POPULATE_WRITE) and moves them to
// a NUMA node it names (move_pages); a preferred NUMA node becomes the range's memory policy (mbind). Those effects are
// hints, as on a GPU: where the kernel refuses one (a container without NUMA rights), the advice is still recorded and
// answered.
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/managed.hpp"
#include "host.hpp"
#include "worker_stream.hpp"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace pvmm::detail::backend {
using namespace host;

namespace {

constexpr int mpol_default = 0, mpol_preferred = 1;
constexpr unsigned mpol_mf_move = 1u << 1;

/// One page's advice and last prefetch. Processors in masks: bits 0-15 devices, 16 the host, 17-63 NUMA nodes.
struct page_state {
  bool read_mostly = false;
  bool has_preferred = false, has_prefetch = false;
  location preferred, prefetched;
  std::uint64_t accessed_by = 0;

  bool operator==(const page_state& o) const {
    return read_mostly == o.read_mostly && has_preferred == o.has_preferred && has_prefetch == o.has_prefetch &&
           (!has_preferred || preferred == o.preferred) && (!has_prefetch || prefetched == o.prefetched) &&
           accessed_by == o.accessed_by;
  }
};

int bit_of(location l) {
  switch (l.type) {
    case location::kind::device:
      return l.id < 16 ? l.id : -1;
    case location::kind::host:
      return 16;
    case location::kind::host_numa:
      return l.id < 47 ? 17 + l.id : -1;
  }
  return -1;
}
location location_of_bit(int bit) {
  return bit < 16 ? location::device(bit) : bit == 16 ? location::host() : location::host_numa(bit - 17);
}

/// One managed allocation: its size, and its page runs by first page (a run lasts until the next key; the first
/// key is always 0).
struct managed_range {
  std::size_t size = 0;
  std::map<std::size_t, page_state> runs;

  /// Makes `page` start a run (a copy of the run holding it), and returns that run.
  std::map<std::size_t, page_state>::iterator split_at(std::size_t page) {
    auto it = runs.upper_bound(page);
    auto holder = std::prev(it);
    if (holder->first == page) return holder;
    return runs.emplace_hint(it, page, holder->second);
  }
  /// Runs [first, last) pages with `change` applied to each, then merged with equal neighbours.
  template <class Change>
  void update(std::size_t first, std::size_t last, Change change) {
    auto begin = split_at(first);
    auto end = last * page_size() < size ? split_at(last) : runs.end();
    for (auto it = begin; it != end; ++it) change(it->second);
    auto from = begin == runs.begin() ? begin : std::prev(begin);
    while (from != end && std::next(from) != runs.end()) {
      auto next = std::next(from);
      if (next->second == from->second) {
        const bool stop = next == end;
        runs.erase(next);
        if (stop) break;
      } else {
        if (next == end) break;
        from = next;
      }
    }
  }
};

// Managed ranges by address (the neutral layer checked that a range lies in one). Process-wide because the memory is.
std::mutex lock;
std::map<const unsigned char*, managed_range> ranges;

/// The range holding `pointer`, and the pages [first, last) of [pointer, pointer + size) in it. Call under `lock`.
std::pair<managed_range*, std::pair<std::size_t, std::size_t>> pages_of(const void* pointer, std::size_t size) {
  const auto* p = static_cast<const unsigned char*>(pointer);
  auto it = ranges.upper_bound(p);
  if (it == ranges.begin()) return {nullptr, {0, 0}};
  --it;
  const std::size_t offset = static_cast<std::size_t>(p - it->first);
  if (offset >= it->second.size) return {nullptr, {0, 0}};
  const std::size_t first = offset / page_size(),
                    last = (std::min(offset + size, it->second.size) + page_size() - 1) / page_size();
  return {&it->second, {first, last}};
}

error not_managed(const void* pointer) {
  return make_error(errc::invalid_argument, fmt::format("{} is not host-backend managed memory", pointer));
}

/// The whole pages under [pointer, pointer + size).
std::pair<void*, std::size_t> page_span(const void* pointer, std::size_t size) {
  const auto start = reinterpret_cast<std::uintptr_t>(pointer) / page_size() * page_size();
  const auto end = (reinterpret_cast<std::uintptr_t>(pointer) + size + page_size() - 1) / page_size() * page_size();
  return {reinterpret_cast<void*>(start), end - start};
}

void set_policy(const void* pointer, std::size_t size, int mode, int node) {
  auto [at, length] = page_span(pointer, size);
  unsigned long mask = node >= 0 ? 1ul << node : 0;
  (void)::syscall(SYS_mbind, at, length, mode, node >= 0 ? &mask : nullptr, node >= 0 ? 65ul : 0ul,
                  node >= 0 ? mpol_mf_move : 0u);  // a hint: refused where the kernel allows no NUMA policy
}

void move_to_node(const void* pointer, std::size_t size, int node) {
  auto [at, length] = page_span(pointer, size);
  const std::size_t count = length / page_size();
  constexpr std::size_t batch = 1024;
  std::vector<void*> pages(batch);
  std::vector<int> nodes(batch, node), status(batch);
  for (std::size_t i = 0; i < count; i += batch) {
    const std::size_t n = std::min(batch, count - i);
    for (std::size_t k = 0; k < n; ++k) pages[k] = static_cast<unsigned char*>(at) + (i + k) * page_size();
    (void)::syscall(SYS_move_pages, 0, n, pages.data(), nodes.data(), status.data(), 0);  // a hint, as above
  }
}

}  // namespace

result<capabilities::managed_features> managed_capabilities(int) {
  capabilities::managed_features f;
  f.supported = true;
  f.concurrent_access = true;
  f.pages_migrate = false;          // one processor: nothing to migrate between (NUMA moves happen on request only)
  f.pageable_memory_access = true;  // the device is the CPU
  f.host_numa_locations = true;
  f.location_attributes = true;
  return f;
}

result<void*> allocate_managed(std::size_t size, attach_mode) {
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return errno_error(errc::out_of_memory, "mmap", errno, "allocating managed memory");
  std::lock_guard<std::mutex> guard(lock);
  managed_range r;
  r.size = size;
  try {  // records are made after the mapping: a failure to make them must not leave it ownerless
    r.runs.emplace(0, page_state{});
    ranges.emplace(static_cast<const unsigned char*>(p), std::move(r));
  } catch (...) {
    ::munmap(p, size);
    throw;
  }
  return p;
}

status free_managed(void* pointer) {
  std::size_t size = 0;
  {
    std::lock_guard<std::mutex> guard(lock);
    auto it = ranges.find(static_cast<const unsigned char*>(pointer));
    if (it == ranges.end()) return not_managed(pointer);
    size = it->second.size;
    ranges.erase(it);
  }
  if (::munmap(pointer, size) != 0) return errno_error(errc::system_error, "munmap", errno);
  return {};
}

status advise_managed(const void* pointer, std::size_t size, advice what, location where) {
  {
    std::lock_guard<std::mutex> guard(lock);
    auto [range, span] = pages_of(pointer, size);
    if (!range) return not_managed(pointer);
    const int bit = bit_of(where);
    if ((what == advice::set_accessed_by || what == advice::unset_accessed_by) && bit < 0)
      return make_error(errc::invalid_location, fmt::format("the host backend cannot record {}", describe(where)));
    // Each pair of advice sets or clears one property of the pages.
    const bool set =
        what == advice::set_read_mostly || what == advice::set_preferred_location || what == advice::set_accessed_by;
    const std::uint64_t mask = bit < 0 ? 0 : std::uint64_t{1} << bit;
    range->update(span.first, span.second, [&](page_state& pg) {
      switch (what) {
        case advice::set_read_mostly:
        case advice::unset_read_mostly:
          pg.read_mostly = set;
          break;
        case advice::set_preferred_location:
        case advice::unset_preferred_location:
          pg.has_preferred = set;
          if (set) pg.preferred = where;
          break;
        case advice::set_accessed_by:
        case advice::unset_accessed_by:
          pg.accessed_by = set ? pg.accessed_by | mask : pg.accessed_by & ~mask;
          break;
      }
    });
  }
  if (what == advice::set_preferred_location && where.type == location::kind::host_numa)
    set_policy(pointer, size, mpol_preferred, where.id);
  else if (what == advice::unset_preferred_location)
    set_policy(pointer, size, mpol_default, -1);
  return {};
}

status prefetch_managed(const void* pointer, std::size_t size, location to, stream_handle s, int) {
  auto on = find_stream(s);
  if (!on) return unknown_stream(s);
  {
    std::lock_guard<std::mutex> guard(lock);
    auto [range, span] = pages_of(pointer, size);
    if (!range) return not_managed(pointer);
    range->update(span.first, span.second, [&](page_state& pg) {
      pg.has_prefetch = true;
      pg.prefetched = to;  // the request, as the drivers record it
    });
  }
  on->enqueue([pointer, size, to] {
    auto [at, length] = page_span(pointer, size);
    if (::madvise(at, length, MADV_POPULATE_WRITE) != 0) (void)::madvise(at, length, MADV_WILLNEED);  // before 5.14
    if (to.type == location::kind::host_numa) move_to_node(pointer, size, to.id);
  });
  return {};
}

result<range_attributes> query_managed_range(const void* pointer, std::size_t size) {
  std::lock_guard<std::mutex> guard(lock);
  auto [range, span] = pages_of(pointer, size);
  if (!range) return not_managed(pointer);
  range_attributes a;
  // Every run overlapping the pages: each stands for all of its pages, so the per-page aggregation is unchanged.
  auto it = std::prev(range->runs.upper_bound(span.first));
  const auto& first = it->second;
  a.read_mostly = true;
  bool same_preferred = first.has_preferred, same_prefetch = first.has_prefetch;
  std::uint64_t everyone = ~std::uint64_t{0};
  for (; it != range->runs.end() && it->first < span.second; ++it) {
    const auto& pg = it->second;
    a.read_mostly = a.read_mostly && pg.read_mostly;
    same_preferred = same_preferred && pg.has_preferred && pg.preferred == first.preferred;
    same_prefetch = same_prefetch && pg.has_prefetch && pg.prefetched == first.prefetched;
    everyone &= pg.accessed_by;
  }
  // A host NUMA node as preferred location is applied but reads back as none: CUDA 13.0's driver (580, H200)
  // reports no preferred location for it (measured), and pvmm answers the same everywhere.
  if (same_preferred && first.preferred.type != location::kind::host_numa) a.preferred_location = first.preferred;
  if (same_prefetch) a.last_prefetch_location = first.prefetched;
  for (int bit = 0; bit < 64; ++bit)
    if (everyone & (std::uint64_t{1} << bit)) a.accessed_by.push_back(location_of_bit(bit));
  return a;
}

status attach_managed(stream_handle s, int, const void*, std::size_t, attach_mode) {
  // One processor: who may use the memory changes nothing; the stream is still checked as the drivers check it.
  if (!find_stream(s)) return unknown_stream(s);
  return {};
}

}  // namespace pvmm::detail::backend
