// A caching allocate that fails leaves the allocator as it found it (issue 48, item 7): the chunks it created are
// given back, and the failed size does not enter the slack's measure (else cached chunks are never reused again).
#include <sys/resource.h>

#include <pvmm/caching_allocator.hpp>

#include "open_fds.hpp"
#include "support.hpp"

using namespace pvmm;
using namespace pvmm_test;

namespace {
/// Lowers the soft fd limit to `headroom` above the fds open now for the object's life.
struct fd_limit {
  rlimit saved{};
  explicit fd_limit(std::size_t headroom) {
    ::getrlimit(RLIMIT_NOFILE, &saved);
    rlimit low = saved;
    low.rlim_cur = static_cast<rlim_t>(open_fd_count() + headroom + 8);
    ::setrlimit(RLIMIT_NOFILE, &low);
  }
  ~fd_limit() { ::setrlimit(RLIMIT_NOFILE, &saved); }
};

/// Four one-chunk blocks (the live high mark: four chunks), freed: four chunks cached.
void cache_four_chunks(caching_allocator& a, stream_ref s) {
  void* p[4];
  for (auto& x : p) x = a.allocate(a.chunk_size(), s).value();
  for (auto& x : p) PVMM_CHECK_OK(a.deallocate(x, s));
}
}  // namespace

PVMM_CASE("caching allocator: a failed allocate gives back the chunks it created and leaves the slack alone") {
  PVMM_REQUIRE_DEVICE();
  PVMM_REQUIRE_CAPABILITY(caps().vmm.supported, "virtual memory management");
  if (query_backend().name != "host") {
    report_skip("the host backend's chunks are memfds: a low fd limit makes chunk creation fail part way");
    return;
  }
  auto s = stream::create(0).value();
  auto a = caching_allocator::create().value();
  cache_four_chunks(a, s);
  const auto created = a.stats().chunks_created;
  REQUIRE(created == 4);
  const auto live = query_live_objects();
  {
    fd_limit low(20);                                                          // about 20 chunks can be made, not 200
    PVMM_CHECK_ERRC(a.allocate(200 * a.chunk_size(), s), errc::system_error);  // out of fds, said so
  }
  // As it found it, less what pressure gives back: no chunk the failed call created is held.
  CHECK(query_live_objects().allocations <= live.allocations);
  CHECK(a.stats().reserved <= std::uint64_t{4} * a.chunk_size());
  CHECK(a.stats().live_blocks == 0);
  // The slack measures live bytes up to four chunks still: a four-chunk block cached whole is reused, one more
  // four-chunk request stitches cached chunks rather than creating four new ones.
  cache_four_chunks(a, s);
  const auto before = a.stats().chunks_created;
  void* big = a.allocate(4 * a.chunk_size(), s).value();
  CHECK(a.stats().chunks_created == before);  // the cached chunks were stitched, none created
  CHECK(a.stats().reserved == std::uint64_t{4} * a.chunk_size());
  PVMM_CHECK_OK(a.deallocate(big, s));
}
