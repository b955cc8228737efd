// Managed memory, one contract on every backend (issue "pools, managed and pinned memory hold one contract"): a
// stream attaches whole allocations only; advice, prefetch and queries on a range off page boundaries round it out
// to the CPU pages it touches. At most 2 MiB of managed memory per case (it may run on a GPU).
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "memory_kinds.hpp"

using namespace pvmm;
using namespace pvmm_test;

namespace {

/// `format` with one argument, as text.
template <class T>
std::string text(const char* format, T value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, value);
  return buffer;
}
}  // namespace

TEST_SUITE("managed") {
  PVMM_CASE(
      "attach_async of part of a managed allocation is invalid_argument naming the allocation, the whole attaches") {
    PVMM_REQUIRE_MANAGED(256);
    auto memory = managed_allocation::create(mib, attach_mode::host).value();
    auto s = stream::create(0).value();
    char* p = static_cast<char*>(memory.data());
    const auto base = text("%p", memory.data());
    for (attach_mode mode : {attach_mode::single, attach_mode::host, attach_mode::global}) {
      auto head = attach_async(p, page_size(), mode, s);  // the start, short of the end
      PVMM_CHECK_ERRC(head, errc::invalid_argument);
      if (!head) {
        CHECK(head.error().detail.find(base) != std::string::npos);  // the allocation's base and size
        CHECK(head.error().detail.find(text("%#zx", mib)) != std::string::npos);
      }
      PVMM_CHECK_ERRC(attach_async(p + page_size(), mib - page_size(), mode, s), errc::invalid_argument);  // the tail
      PVMM_CHECK_ERRC(attach_async(p + 100, 5000, mode, s), errc::invalid_argument);                       // inside
    }
    PVMM_CHECK_ERRC(attach_async(p, 0, attach_mode::single, s), errc::invalid_size);  // no "0 means all"
    PVMM_CHECK_ERRC(attach_async(p + page_size(), mib, attach_mode::single, s), errc::out_of_range);
    // The whole allocation attaches, and the memory is used in the stream's order after it.
    check_attach_to_stream_then_global(memory, s, 9);
  }

  PVMM_CASE("advice on a range off page boundaries covers every page it touches, and a sub-page query reads its page") {
    PVMM_REQUIRE_MANAGED(256);
    const std::size_t pg = page_size();
    auto memory = managed_allocation::create(2 * mib).value();
    char* p = static_cast<char*>(memory.data());
    // [p + 100, p + 5100) touches pages 0 and 1 (of 4 KiB pages; on larger pages, page 0 only).
    const std::size_t touched = (100 + 5000 + pg - 1) / pg;
    PVMM_CHECK_OK(advise(p + 100, 5000, advice::set_read_mostly));
    CHECK(query_range(p, touched * pg).value().read_mostly);             // the whole of the touched pages
    CHECK(query_range(p, 1).value().read_mostly);                        // the byte before the range: its page
    CHECK(query_range(p + touched * pg - 1, 1).value().read_mostly);     // the last byte of the last page
    CHECK_FALSE(query_range(p + touched * pg, pg).value().read_mostly);  // the page after: untouched
    CHECK_FALSE(query_range(p, (touched + 1) * pg).value().read_mostly);
    // Not asserted: a few bytes straddling the last advised page and the next. CUDA 13.0 (driver 580, H100)
    // answered read_mostly for that range, and also for the two whole pages under it, though the second page alone
    // and the three pages from the first both answer not read_mostly: its per-page rule is not pinned down yet.

    PVMM_CHECK_OK(advise(p + pg + 1, 1, advice::set_preferred_location, location::host()));  // one byte of page 1
    CHECK(query_range(p + pg, pg).value().preferred_location == location::host());
    CHECK(query_range(p + 2 * pg - 1, 1).value().preferred_location == location::host());
    CHECK_FALSE(query_range(p, pg).value().preferred_location.has_value());
    CHECK_FALSE(query_range(p + 2 * pg, pg).value().preferred_location.has_value());

    // Unsetting over a sub-page range clears the whole pages it touches.
    PVMM_CHECK_OK(advise(p + pg - 1, 2, advice::unset_read_mostly));  // the last byte of page 0, first of page 1
    CHECK_FALSE(query_range(p, 1).value().read_mostly);
    CHECK_FALSE(query_range(p + 2 * pg - 1, 1).value().read_mostly);
  }

  PVMM_CASE("a prefetch of a range off page boundaries reads back on every page it touches, and on no other") {
    PVMM_REQUIRE_MANAGED(256);
    const std::size_t pg = page_size();
    auto memory = managed_allocation::create(2 * mib).value();
    char* p = static_cast<char*>(memory.data());
    auto s = stream::create(0).value();
    const std::size_t touched = (100 + 5000 + pg - 1) / pg;
    PVMM_CHECK_OK(prefetch_async(p + 100, 5000, location::host(), s));
    PVMM_CHECK_OK(s.synchronize());
    CHECK(query_range(p, touched * pg).value().last_prefetch_location == location::host());
    CHECK(query_range(p + touched * pg - 1, 1).value().last_prefetch_location == location::host());
    CHECK_FALSE(query_range(p + touched * pg, pg).value().last_prefetch_location.has_value());
    CHECK_FALSE(query_range(p, (touched + 1) * pg).value().last_prefetch_location.has_value());
  }
}  // TEST_SUITE
