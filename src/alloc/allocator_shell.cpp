// The stream-ordered allocators' shared shell (allocator_shell.hpp).
#include "alloc/allocator_shell.hpp"

#include <chrono>

#include <fmt/format.h>

#include "stream/stream_checks.hpp"

namespace pvmm::detail::shell {

error empty_owner(const operation& op, const char* type) {
  return op.fail(errc::already_released, fmt::format("this {} is empty (released or moved from)", type));
}

status check_stream_of(stream_ref on, int device, const operation& op, const char* whose) {
  if (auto ok = check_stream(on, op); !ok) return ok;
  if (on.device() != device)
    return op.fail(errc::invalid_device,
                   fmt::format("the stream is of device {}, the {} of device {}", on.device(), whose, device));
  return {};
}

result<event> event_cache::record(int device, stream_ref on, const operation& op, std::uint64_t* ns) {
  const auto t0 = ns ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  auto add_time = [&] {
    if (ns)
      *ns += static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
  };
  event e;
  if (!spare_.empty()) {
    e = std::move(spare_.back());
    spare_.pop_back();
  } else {
    auto made = event::create(device);
    if (!made) {
      add_time();
      return op.wrap(std::move(made).error());
    }
    e = std::move(*made);
  }
  auto ok = e.record(on);
  add_time();
  if (!ok) {
    spare_.push_back(std::move(e));
    return op.wrap(std::move(ok).error());
  }
  return e;
}

}  // namespace pvmm::detail::shell
