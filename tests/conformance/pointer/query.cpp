// pvmm::query_pointer: every kind of memory pvmm makes answers its kind, range and device for its first byte, an
// interior byte and its last byte; one past the end answers what lies there; given back, it answers none. And the
// registration overlap rule (pvmm/pinned.hpp) asks the same registry.
#include <cstdio>

#include "memory.hpp"

using namespace pvmm;
using namespace pvmm_test;

namespace {
constexpr std::size_t mib = pointer_mib;

/// Checks what `p` answers against the range [base, +size) of `kind` on `device`.
void check_range(const void* p, memory_kind kind, const void* base, std::size_t size, int device) {
  auto a = query_pointer(p).value();
  CHECK(a.kind == kind);
  CHECK(a.base == base);
  CHECK(a.size == size);
  CHECK(a.device == device);
}

/// First byte, an interior byte and the last byte of [base, +size) answer the range; one past the end does not.
void check_edges(const void* base, std::size_t size, memory_kind kind, int device) {
  const auto* b = static_cast<const char*>(base);
  for (const char* p : {b, b + size / 2 + 1, b + size - 1}) check_range(p, kind, base, size, device);
  auto past = query_pointer(b + size).value();
  CHECK(!(past.kind == kind && past.base == base));  // none, or the next range
  if (past.kind != memory_kind::none) CHECK(past.base == b + size);
}

void check_none(const void* p) {
  auto a = query_pointer(p).value();
  CHECK(a.kind == memory_kind::none);
  CHECK(a.base == nullptr);
  CHECK(a.size == 0);
  CHECK(a.device == -1);
}

/// Releases `owner`, then checks that its first byte answers none.
template <class Owner>
void check_none_after_release(Owner& owner) {
  const void* was = owner.data();
  PVMM_CHECK_OK(owner.release());
  check_none(was);
}

std::string range_text(const void* data, std::size_t size) {
  char buffer[96];
  std::snprintf(buffer, sizeof buffer, "[%p, +%#zx)", data, size);
  return buffer;
}

/// Registering [p, +size) fails with invalid_argument naming `what` and its range; nothing is left registered.
void check_refused(void* p, std::size_t size, const char* what, const void* base, std::size_t range_size) {
  auto done = register_host_memory(p, size);
  PVMM_CHECK_ERRC(done, errc::invalid_argument);
  if (done) {
    (void)unregister_host_memory(p);
    return;
  }
  CHECK(done.error().detail.find(what) != std::string::npos);
  CHECK(done.error().detail.find(range_text(base, range_size)) != std::string::npos);
  PVMM_CHECK_ERRC(host_registration::create(p, size), errc::invalid_argument);
  PVMM_CHECK_ERRC(unregister_host_memory(p), errc::not_registered);
}
}  // namespace

TEST_SUITE("pointer") {
  PVMM_CASE("query_pointer: null is invalid_argument, memory pvmm did not make is none") {
    PVMM_CHECK_ERRC(query_pointer(nullptr), errc::invalid_argument);
    int on_stack = 0;
    check_none(&on_stack);
    std::vector<char> heap(4096);
    check_none(heap.data());
  }

  PVMM_CASE("query_pointer: a reservation answers device, mapped only where a mapping is, and none once freed") {
    PVMM_REQUIRE_DEVICE();
    auto v = vmm_range::make();
    const std::size_t g = granule();
    const void* base = v.range.at(0);
    check_edges(base, 4 * g, memory_kind::device, -1);  // unmapped bytes: no device's memory is there
    auto mapped = query_pointer(v.mapped() + g / 2).value();
    CHECK(mapped.kind == memory_kind::device);
    CHECK(mapped.base == base);
    CHECK(mapped.size == 4 * g);
    CHECK(mapped.mapped);
    CHECK(mapped.device == 0);
    CHECK_FALSE(mapped.device_accessible_from_host);
    CHECK_FALSE(query_pointer(v.range.at<char>(0)).value().mapped);
    CHECK_FALSE(query_pointer(v.range.at<char>(2 * g)).value().mapped);  // one past the mapping
    PVMM_CHECK_OK(v.range.unmap(g, g));
    CHECK_FALSE(query_pointer(v.mapped()).value().mapped);
    PVMM_CHECK_OK(v.range.release());
    check_none(base);
  }

  PVMM_CASE("query_pointer: pool allocations (owned and raw) answer pool on the pool's device, none once freed") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_CAPABILITY(caps().pools.supported, "memory pools");
    auto pool = memory_pool::create({}).value();
    auto s = stream::create(0).value();
    auto owned = pool.allocate(mib, s).value();
    void* raw = pool.allocate_async(mib / 2, s).value();
    check_edges(owned.data(), mib, memory_kind::pool, 0);
    check_edges(raw, mib / 2, memory_kind::pool, 0);
    CHECK_FALSE(query_pointer(raw).value().device_accessible_from_host);
    const void* was = owned.data();
    PVMM_CHECK_OK(owned.free_async(s));
    PVMM_CHECK_OK(free_async(raw, s));
    PVMM_CHECK_OK(s.synchronize());
    check_none(was);
    check_none(raw);
  }

  PVMM_CASE("query_pointer: managed memory answers managed, its attach mode as last asked, and none once freed") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_CAPABILITY(caps().managed.supported, "managed memory");
    auto m = managed_allocation::create(mib, attach_mode::host).value();
    check_edges(m.data(), m.size(), memory_kind::managed, 0);
    auto a = query_pointer(m.data()).value();
    CHECK(a.attach == attach_mode::host);
    CHECK(a.device_accessible_from_host);
    auto s = stream::create(0).value();
    PVMM_CHECK_OK(attach_async(m.data(), m.size(), attach_mode::global, s));
    PVMM_CHECK_OK(s.synchronize());
    CHECK(query_pointer(m.data()).value().attach == attach_mode::global);
    check_none_after_release(m);
  }

  PVMM_CASE("query_pointer: pinned and registered memory answer their kind, host (-1), and their options") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_CAPABILITY(caps().host_memory.pinned, "page-locked host memory");
    PVMM_REQUIRE_CAPABILITY(caps().host_memory.registration, "host memory registration");
    pinned_options options;
    options.portable = false;
    options.mapped = false;
    auto p = pinned_allocation::create(mib, options).value();
    check_edges(p.data(), mib, memory_kind::pinned, -1);
    auto a = query_pointer(p.data()).value();
    CHECK(a.device_accessible_from_host);
    CHECK_FALSE(a.host_options.portable);
    CHECK_FALSE(a.host_options.mapped);
    {
      auto r = registered_range::make(options);
      check_edges(r.pages + r.page, 2 * r.page, memory_kind::registered, -1);
      check_none(r.pages);  // the page before the registration is the program's own
      CHECK_FALSE(query_pointer(r.pages + 2 * r.page).value().host_options.mapped);
      PVMM_CHECK_OK(r.registration.release());
      check_none(r.pages + r.page);
    }
    check_none_after_release(p);
  }

  PVMM_CASE("registering memory pvmm made for devices is invalid_argument naming it, pinned stays already_registered") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_CAPABILITY(caps().host_memory.registration, "host memory registration");
    auto v = vmm_range::make();
    const std::size_t g = granule();
    check_refused(v.mapped(), g, "address reservation", v.range.at(0), 4 * g);
    check_refused(v.range.at(0), 4096, "address reservation", v.range.at(0), 4 * g);  // not mapped there
    auto s = stream::create(0).value();
    if (caps().pools.supported) {
      auto pool = memory_pool::create({}).value();
      auto m = pool.allocate(mib, s).value();
      PVMM_CHECK_OK(s.synchronize());
      check_refused(static_cast<char*>(m.data()) + 4096, 4096, "pool allocation", m.data(), mib);
      PVMM_CHECK_OK(m.free_async(s));
    }
    if (caps().managed.supported) {
      auto m = managed_allocation::create(mib).value();
      check_refused(m.data(), m.size(), "managed allocation", m.data(), m.size());
    }
    if (caps().host_memory.pinned) {
      auto p = pinned_allocation::create(mib).value();
      PVMM_CHECK_ERRC(register_host_memory(static_cast<char*>(p.data()) + 4096, 4096), errc::already_registered);
    }
    // A registration that starts before a registered range and runs into it is refused naming that range.
    auto r = registered_range::make();
    auto across = register_host_memory(r.pages, 2 * r.page);
    PVMM_CHECK_ERRC(across, errc::already_registered);
    if (!across) CHECK(across.error().detail.find(range_text(r.pages + r.page, 2 * r.page)) != std::string::npos);
    PVMM_CHECK_OK(s.synchronize());
  }
}
