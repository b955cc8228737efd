// A pool's settings and statistics: usage and high marks, release threshold and reuse policies (read and
// changed after creation, as cuMemPoolGetAttribute / SetAttribute allow), trimming, and per-device access.
#include <pvmm/memory_pool.hpp>

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "backend/pool.hpp"
#include "core/describe.hpp"
#include "core/device.hpp"
#include "core/operation.hpp"
#include "pool/pool_state.hpp"

namespace pvmm {
namespace detail {

status set_attributes(pool_handle h, std::uint64_t release_threshold, bool follow, bool opportunistic, bool internal,
                      const operation& op) {
  using backend::pool_attribute;
  const std::pair<pool_attribute, std::uint64_t> values[] = {
      {pool_attribute::release_threshold, release_threshold},
      {pool_attribute::reuse_follow_event_dependencies, follow},
      {pool_attribute::reuse_opportunistic, opportunistic},
      {pool_attribute::reuse_internal_dependencies, internal},
  };
  for (auto [which, value] : values)
    PVMM_TRY(op.step("set_pool_attribute", [&, w = which, v = value] { return backend::set_pool_attribute(h, w, v); }));
  return {};
}

namespace {
/// One attribute read as a step of `op` (fault injection and call counting see it).
result<std::uint64_t> get_attribute(pool_handle h, backend::pool_attribute which, const operation& op) {
  return op.step("get_pool_attribute", [&] { return backend::get_pool_attribute(h, which); });
}
}  // namespace

}  // namespace detail

result<pool_attributes> memory_pool::attributes() const {
  const detail::operation op{"pvmm::memory_pool::attributes"};
  if (!state_) return detail::empty_pool(op);
  using detail::backend::pool_attribute;
  auto get = [&](pool_attribute which) { return detail::get_attribute(state_->handle, which, op); };
  PVMM_TRY_ASSIGN(threshold, get(pool_attribute::release_threshold));
  PVMM_TRY_ASSIGN(follow, get(pool_attribute::reuse_follow_event_dependencies));
  PVMM_TRY_ASSIGN(opportunistic, get(pool_attribute::reuse_opportunistic));
  PVMM_TRY_ASSIGN(internal, get(pool_attribute::reuse_internal_dependencies));
  pool_attributes a;
  a.release_threshold = threshold;
  a.reuse_follow_event_dependencies = follow != 0;
  a.reuse_opportunistic = opportunistic != 0;
  a.reuse_internal_dependencies = internal != 0;
  return a;
}

status memory_pool::set_attributes(const pool_attributes& a) const {
  auto args = [&] {
    return fmt::format("release_threshold={:#x}, follow={}, opportunistic={}, internal={}", a.release_threshold,
                       a.reuse_follow_event_dependencies, a.reuse_opportunistic, a.reuse_internal_dependencies);
  };
  const detail::operation op{"pvmm::memory_pool::set_attributes", args};
  if (!state_) return detail::empty_pool(op);
  return detail::set_attributes(state_->handle, a.release_threshold, a.reuse_follow_event_dependencies,
                                a.reuse_opportunistic, a.reuse_internal_dependencies, op);
}

result<pool_usage> memory_pool::usage() const {
  const detail::operation op{"pvmm::memory_pool::usage"};
  if (!state_) return detail::empty_pool(op);
  using detail::backend::pool_attribute;
  auto get = [&](pool_attribute which) { return detail::get_attribute(state_->handle, which, op); };
  pool_usage u;
  PVMM_TRY_ASSIGN(rc, get(pool_attribute::reserved_current));
  PVMM_TRY_ASSIGN(rh, get(pool_attribute::reserved_high));
  PVMM_TRY_ASSIGN(uc, get(pool_attribute::used_current));
  PVMM_TRY_ASSIGN(uh, get(pool_attribute::used_high));
  // A reset sets a high mark to the current value on CUDA and to 0 on HIP: pvmm reports CUDA's meaning everywhere.
  u.reserved_current = rc;
  u.reserved_high = std::max(rh, rc);
  u.used_current = uc;
  u.used_high = std::max(uh, uc);
  return u;
}

status memory_pool::reset_high_marks() const {
  const detail::operation op{"pvmm::memory_pool::reset_high_marks"};
  if (!state_) return detail::empty_pool(op);
  using detail::backend::pool_attribute;
  for (auto which : {pool_attribute::reserved_high, pool_attribute::used_high})
    PVMM_TRY(
        op.step("set_pool_attribute", [&] { return detail::backend::set_pool_attribute(state_->handle, which, 0); }));
  return {};
}

status memory_pool::set_release_threshold(std::uint64_t bytes) const {
  auto args = [&] { return fmt::format("bytes={:#x}", bytes); };
  const detail::operation op{"pvmm::memory_pool::set_release_threshold", args};
  if (!state_) return detail::empty_pool(op);
  return op.step("set_pool_attribute", [&] {
    return detail::backend::set_pool_attribute(state_->handle, detail::backend::pool_attribute::release_threshold,
                                               bytes);
  });
}

status memory_pool::trim_to(std::size_t keep) const {
  auto args = [&] { return fmt::format("keep={:#x}", keep); };
  const detail::operation op{"pvmm::memory_pool::trim_to", args};
  if (!state_) return detail::empty_pool(op);
  return op.step("trim_pool", [&] { return detail::backend::trim_pool(state_->handle, keep); });
}

status memory_pool::set_access(access_list grants) const {
  auto args = [&] { return fmt::format("grants={}", grants.size()); };
  const detail::operation op{"pvmm::memory_pool::set_access", args};
  if (!state_) return detail::empty_pool(op);
  if (grants.empty()) return op.fail(errc::invalid_argument, "no access grants given");
  // The pool's own device is not the driver's to change; a pool of host memory has none (CUDA's host pools are the
  // host's alone until a device is granted).
  std::vector<access_descriptor> others;
  for (const auto& g : grants) {
    if (g.location.type != location::kind::device)
      return op.fail(errc::invalid_location,
                     fmt::format("pools grant devices only, not {}", detail::describe(g.location)));
    PVMM_TRY(detail::check_location(g.location, op));
    if (!state_->host_located && g.location.id == state_->device) {
      if (g.access != access::read_write)
        return op.fail(errc::invalid_argument,
                       fmt::format("the pool's own device {} always has read_write access", state_->device));
      continue;
    }
    others.push_back(g);
  }
  if (others.empty()) return {};
  return op.step("set_pool_access",
                 [&] { return detail::backend::set_pool_access(state_->handle, others.data(), others.size()); });
}

result<access> memory_pool::query_access(location where) const {
  auto args = [&] { return fmt::format("location={}", detail::describe(where)); };
  const detail::operation op{"pvmm::memory_pool::query_access", args};
  if (!state_) return detail::empty_pool(op);
  if (where.type != location::kind::device)
    return op.fail(errc::invalid_location, fmt::format("pools grant devices only, not {}", detail::describe(where)));
  PVMM_TRY(detail::check_location(where, op));
  if (!state_->host_located && where.id == state_->device) return access::read_write;
  return op.step("get_pool_access", [&] { return detail::backend::get_pool_access(state_->handle, where); });
}

}  // namespace pvmm
