// The accessors users expect from std::optional / std::expected on result<T>, and equality on every handle type.
#include <string>
#include <type_traits>

#include <pvmm/growable_buffer.hpp>
#include <pvmm/memory_pool.hpp>
#include <pvmm/reservation.hpp>

#include "support.hpp"

using namespace pvmm;

TEST_SUITE("api") {
  TEST_CASE("result<T>: const and rvalue access, value_or, and an error that throws instead of being undefined") {
    const result<std::string> good(std::string("pvmm"));
    CHECK(*good == "pvmm");
    CHECK(good->size() == 4);
    CHECK(good.value_or("other") == "pvmm");
    result<std::string> moved(std::string("taken"));
    std::string taken = *std::move(moved);
    CHECK(taken == "taken");

    const result<std::string> bad(error{errc::invalid_argument, "op", "", "detail", "", 0, ""});
    CHECK(bad.value_or("fallback") == "fallback");
    CHECK(result<std::string>(error{errc::busy, "op", "", "", "", 0, ""}).value_or(std::string("rv")) == "rv");
    CHECK_THROWS_AS((void)*bad, pvmm::exception);
    CHECK_THROWS_AS((void)bad->size(), pvmm::exception);
  }

  TEST_CASE("every handle type compares with == and !=") {
    CHECK(stream_handle{1} == stream_handle{1});
    CHECK(stream_handle{1} != stream_handle{2});
    CHECK(event_handle{3} == event_handle{3});
    CHECK(event_handle{3} != event_handle{4});
    CHECK(pool_handle{5} == pool_handle{5});
    CHECK(pool_handle{5} != pool_handle{6});
    CHECK(allocation_handle{7} == allocation_handle{7});
    CHECK(multicast_handle{8} != multicast_handle{9});
    fabric_handle f{};
    CHECK(f == fabric_handle{});
    pool_id a{}, b{};
    b.bytes[0] = 1;
    CHECK(a != b);
    static_assert(!std::is_convertible_v<stream_handle, event_handle>, "handle types stay distinct");
  }

  TEST_CASE("owners over shared state stay move-only with noexcept moves and destructor (detail::move_only)") {
    auto move_only = [](auto tag) {
      using T = typename decltype(tag)::type;
      return !std::is_copy_constructible_v<T> && !std::is_copy_assignable_v<T> &&
             std::is_nothrow_default_constructible_v<T> && std::is_nothrow_move_constructible_v<T> &&
             std::is_nothrow_move_assignable_v<T> && std::is_nothrow_destructible_v<T>;
    };
    CHECK(move_only(std::common_type<physical_allocation>{}));
    CHECK(move_only(std::common_type<multicast_object>{}));
    CHECK(move_only(std::common_type<address_reservation>{}));
    CHECK(move_only(std::common_type<growable_buffer>{}));
    CHECK(move_only(std::common_type<memory_pool>{}));
  }
}
