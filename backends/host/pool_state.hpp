// Host backend, feature "pool": what its files share. A pool is one sparse memfd (of its maximum size, or the
// machine's memory) mapped once; blocks are suballocated from it (pool_blocks.cpp), the file is made, sealed and
// checked in pool_file.cpp, and the backend's entry points are in pool.cpp.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/pool.hpp"
#include "worker_stream.hpp"

namespace pvmm::detail::backend::host {

constexpr std::size_t pool_granularity = std::size_t{2} << 20;  // a pool's size rounds to this, like CUDA's pools
// The unit in which a pool reserves memory and gives it back, as the drivers' pools do (tools/probes/pool_chunks.cpp,
// CUDA 13.0 and HIP on NVIDIA, driver 580): one 1 MiB block reserves 32 MiB, 33 blocks 64 MiB, a 257 MiB block
// 288 MiB; a release threshold gives back whole chunks. A pool smaller than this has one chunk of its size.
constexpr std::size_t pool_chunk = std::size_t{32} << 20;
constexpr std::size_t pool_alignment = 256;  // of every block, as the drivers align pool allocations

/// Shared with importers: one per 256-byte unit of the pool, past its memory in the file, for the block that
/// starts there. Written by the exporter, never read by it (a peer can write it too: invariant 16); an importer
/// reads it to refuse a stale or widened pointer export, which only protects the importer.
struct unit_state {
  std::atomic<std::uint64_t> generation;  // odd while the block is live, and unlike any earlier life of it
  std::atomic<std::uint64_t> size;        // the live block's size as allocated (what its owners are built with)
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "shared between processes");

std::size_t pool_file_bytes(std::size_t capacity);  // memory, then the control table, then a header page

/// Which freed memory work on a stream may take, as the pool's reuse policies say.
enum class reuse { no, now, after_wait };
struct reuse_policy {
  bool follow = true, opportunistic = true, internal = true;
};
constexpr std::uint64_t sequence_unknown = ~std::uint64_t{0};  // a free whose task is still being enqueued
/// How a freed block came to be free. `stream` is null when its stream is gone (its queue was drained, so the
/// free completed) or when the memory was given back and is fresh.
struct free_origin {
  const std::shared_ptr<worker_stream>& stream;
  std::uint64_t sequence;  // the free's place on `stream`
  bool completed;
};
/// Whether work on `on` may take a block freed as `freed` says: the drivers' measured rules (pool_blocks.cpp).
reuse may_reuse(const reuse_policy& policy, const free_origin& freed, const worker_stream& on);

struct pool_block {
  std::size_t size = 0;  // rounded to pool_alignment
  enum class state { live, pending, free } what = state::live;
  // live:
  std::weak_ptr<worker_stream> allocated_on;         // weak: a released stream's object goes with its user
  std::uint64_t allocated_after = sequence_unknown;  // the allocation's place there, which the host must see done
  std::uint64_t generation = 0;                      // odd, as the table says while live
  std::size_t requested = 0;                         // the size asked for, as the table says
  // pending and free:
  bool any_stream = false;                // no stream to follow: every stream may take it
  std::weak_ptr<worker_stream> freed_on;  // else the stream the free was enqueued on
  std::uint64_t free_sequence = 0;        // ... and its place there
  std::uint64_t ticket = 0;               // the free that made it pending (its pieces share it)
};

/// Freed blocks by (size, offset), so the best fit is one lower_bound away.
using size_index = std::set<std::pair<std::size_t, std::size_t>>;
struct stream_frees {
  size_index done, pending;
};

struct host_pool {
  ~host_pool();
  std::mutex lock;
  int fd = -1;  // -1 in an importer, which only maps the file
  bool imported = false;
  unsigned char* base = nullptr;
  std::size_t capacity = 0;  // the pool's maximum; the file holds the control table and header past it
  unit_state& unit(std::size_t offset) {
    return reinterpret_cast<unit_state*>(base + capacity)[offset / pool_alignment];
  }
  int device = 0;
  reuse_policy policy;
  std::uint64_t used = 0, used_high = 0, reserved_high = 0;
  std::uint64_t threshold = 0;  // the drivers' default

  // The suballocator (pool_blocks.cpp); everything below is used under `lock`.
  std::vector<bool> committed;               // per pool_chunk; the last one ends at `capacity`
  std::uint64_t reserved_bytes = 0;          // of the committed chunks
  std::map<std::size_t, pool_block> blocks;  // by offset; [0, end) is covered by blocks
  std::size_t end = 0;
  std::uint64_t next_generation = 1, next_ticket = 0;
  std::map<std::weak_ptr<worker_stream>, stream_frees, std::owner_less<>> by_stream;  // freed on a stream
  size_index any_stream;  // freed, and free for every stream
  /// Where each free's pieces lie (split by reuse, merged with neighbours freed on the same stream), until it has
  /// both run and been given its place (in either order).
  struct free_span {
    std::size_t from = 0, to = 0;
    bool ran = false, placed = false;
  };
  std::unordered_map<std::uint64_t, free_span> spans;

  std::uint64_t reserved() const { return reserved_bytes; }
  std::size_t chunk_bytes(std::size_t c) const { return std::min(pool_chunk, capacity - c * pool_chunk); }
  /// Commits every chunk under [offset, offset + size).
  status commit(std::size_t offset, std::size_t size);
  /// What trim gives back: `at_least_keep` (trim_to: the drivers keep at least `keep` bytes) or `at_most_keep`
  /// (a release threshold at a synchronize: whole chunks go while more than the threshold is reserved, measured).
  enum class trim_rule { at_least_keep, at_most_keep };
  /// Gives back committed chunks that hold no live or pending block, from the top, as `rule` says; first lowers
  /// the end past freed blocks whose free completed.
  void trim(std::uint64_t keep, trim_rule rule);

  struct placement {
    std::size_t offset = 0;
    std::shared_ptr<worker_stream> wait_on;  // internal dependencies: `on` waits for this stream ...
    std::uint64_t wait_for = 0;              // ... to reach this sequence first
  };
  /// Takes a block of `size` (rounded; `requested` was asked for) for work on `on`: the best fitting freed block the
  /// policy lets `on` take, else the top block grown, else new memory at the end; marks it live. Streams it locked go
  /// into `held`, so that their last reference is never dropped under the lock.
  result<placement> take(std::size_t size, std::size_t requested, const std::shared_ptr<worker_stream>& on,
                         std::vector<std::shared_ptr<worker_stream>>& held);
  /// Marks the live block at `offset` pending on `on` under a new ticket (returned), its place there unknown.
  std::uint64_t release(std::size_t offset, const std::shared_ptr<worker_stream>& on);
  /// The free `ticket` was enqueued at `sequence`: its pieces learn their place.
  void enqueued(std::uint64_t ticket, std::uint64_t sequence);
  /// The free `ticket` (of `size` bytes) has run: its pieces become free and coalesce.
  void completed(std::size_t size, std::uint64_t ticket);

 private:
  size_index& index_of(const pool_block& b);
  void unindex(std::size_t offset, const pool_block& b);
  void index(std::size_t offset, const pool_block& b);
  bool mergeable(const pool_block& a, const pool_block& b) const;
  void coalesce(std::size_t from, std::size_t to);
  void lower_end(bool any_completed);
  void forget_gone_streams();
  /// The block holding `offset`: the last one starting at or below it.
  std::map<std::size_t, pool_block>::iterator block_holding(std::size_t offset);
  /// Marks one `half` (ran or placed) of free `ticket` done, forgetting its span once both are; the span, or
  /// nothing where no free has this ticket.
  std::optional<free_span> settle(std::uint64_t ticket, bool free_span::*half);
};

/// Pool files (pool_file.cpp): a new pool's sealed file, mapped; and a peer's file checked and mapped.
result<std::shared_ptr<host_pool>> make_pool(std::size_t max_size, int device);
result<std::shared_ptr<host_pool>> map_imported(int fd, int device);

/// A pointer export's driver record, as this backend writes it.
struct pointer_record {
  std::uint32_t magic;
  std::uint32_t reserved;
  std::uint64_t generation;
  std::uint64_t offset;
  std::uint64_t size;  // as allocated: the table's size of the block
  std::uint64_t capacity;
};
constexpr std::uint32_t pointer_magic = 0x706d7670;  // "pvmp"
static_assert(sizeof(pointer_record) <= sizeof(pool_pointer_record), "fits the drivers' 64 bytes");

}  // namespace pvmm::detail::backend::host
