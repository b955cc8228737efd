// The accessors users expect from std::optional / std::expected on result<T>, and equality on every handle type.
#include <string>
#include <type_traits>

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
}
