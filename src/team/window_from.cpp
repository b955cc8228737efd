// symmetric_window::create_from: a window whose own slot is memory the caller made (a physical allocation, or a
// growable buffer's chunks). The same collective steps as create (window.cpp, window_exchange.cpp): one allgather
// of every rank's request, then one chunk step per chunk (a rank with fewer chunks adds nothing at the later
// steps), each checked against what was agreed. What this rank cannot share is refused before any exchange, and
// the refusal travels in the first step's envelope, so every rank fails at once naming this one.
#include <algorithm>
#include <optional>

#include <pvmm/allocation.hpp>
#include <pvmm/growable_buffer.hpp>
#include <pvmm/team.hpp>

#include <fmt/format.h>

#include "core/describe.hpp"
#include "core/ownership.hpp"
#include "team/bootstrap_common.hpp"
#include "team/no_throw.hpp"
#include "team/team_exchange.hpp"
#include "team/window_state.hpp"

namespace pvmm {
using detail::from_request;
namespace {

bool exports_as(handle_types set, handle_types type) {
  return (static_cast<std::uint32_t>(set) & static_cast<std::uint32_t>(type)) != 0;
}

// Why this rank's memory cannot be this team's window slot, or nothing; `handles` gets what every chunk exports.
std::optional<error> refusal(const detail::team_state& t, const std::vector<const physical_allocation*>& memory,
                             const window_options& o, handle_types& handles, std::uint64_t& total,
                             const detail::operation& op) {
  const int me = t.rank();
  if (auto bad = detail::check_timeout(o.timeout, "options.timeout", op); !bad)
    return op.fail(errc::invalid_argument, fmt::format("rank {}: {}", me, bad.error().detail));
  if (o.signal_channels < 0 || o.signal_channels > detail::max_signal_channels)
    return op.fail(errc::invalid_argument, fmt::format("rank {}: signal_channels {} is outside 0..{}", me,
                                                       o.signal_channels, detail::max_signal_channels));
  if (auto path = detail::signal_path_refusal(me, t.options.device, o.signal_channels, o.stream_signals, op))
    return path;
  if (memory.empty()) return op.fail(errc::invalid_argument, fmt::format("rank {}: the memory holds no chunk", me));
  handles = t.handles;
  for (const physical_allocation* c : memory) {
    if (c == nullptr || !c->valid())
      return op.fail(errc::invalid_argument, fmt::format("rank {}: the memory is empty (released or moved from)", me));
    const allocation_properties& p = detail::owner_access::of(*c)->properties;
    if (!(p.location == location::device(t.options.device)))
      return op.fail(errc::invalid_argument,
                     fmt::format("rank {}: the memory ({}) is not on the team's device {}", me, detail::describe(p),
                                 t.options.device),
                     "a window slot is memory on the device the team was created for");
    if (c->size() % t.slot_unit != 0)
      return op.fail(errc::invalid_size,
                     fmt::format("rank {}: a chunk of {:#x} bytes is not a multiple of the team's granularity {:#x}",
                                 me, c->size(), t.slot_unit),
                     "allocate in multiples of the largest granularity of any rank");
    if (t.node_ranks().size() > 1 && !exports_as(p.exportable, handle_types::posix_fd))
      return op.fail(
          errc::handle_type_not_requested,
          fmt::format("rank {}: the memory is not exportable as a POSIX fd, which its node's peers need", me),
          "create it with handle_types::posix_fd in allocation_properties::exportable");
    if (t.node_count > 1 && exports_as(t.handles, handle_types::fabric) &&
        !exports_as(p.exportable, handle_types::fabric))
      return op.fail(errc::handle_type_not_requested,
                     fmt::format("rank {}: the memory has no fabric handle, which peers on other nodes need", me),
                     "create it with handle_types::fabric in allocation_properties::exportable");
    handles = static_cast<handle_types>(static_cast<std::uint32_t>(handles) & static_cast<std::uint32_t>(p.exportable));
    total += c->size();
  }
  if (o.size != 0 && o.size != total)
    return op.fail(errc::invalid_argument,
                   fmt::format("rank {}: options.size {:#x} is not the memory's {:#x} bytes", me, o.size, total),
                   "pass 0 (the memory's size)");
  if (o.max_size != 0 && o.max_size < total)
    return op.fail(errc::invalid_argument,
                   fmt::format("rank {}: max_size {:#x} is below the memory's {:#x} bytes", me, o.max_size, total));
  return std::nullopt;
}

}  // namespace

result<symmetric_window> symmetric_window::create_over(const team& members,
                                                       const std::vector<const physical_allocation*>& memory,
                                                       const window_options& options, const char* what) {
  auto args = [&] {
    return fmt::format("rank={}, {} chunk(s), max_size={:#x}, timeout={}ms", members.rank(), memory.size(),
                       options.max_size, options.timeout.count());
  };
  const detail::operation op{what, args};
  return detail::no_throw<result<symmetric_window>>(what, [&]() -> result<symmetric_window> {
    if (!members.valid()) return op.fail(errc::invalid_argument, "the team is empty (released or moved from)");
    // A refused timeout still takes part under the default bound (refusal() names it): every rank fails alike.
    const deadline until =
        deadline_in(options.timeout.count() < 0 ? std::chrono::milliseconds(30000) : options.timeout);
    auto w = std::make_shared<detail::window_state>();
    w->team = members.state_;
    detail::team_state& t = *w->team;
    w->slots = std::vector<detail::window_slot>(members.size());  // built in place: a slot's flag is atomic
    t.adopt(w);
    std::uint64_t total = 0;
    handle_types handles = handle_types::none;
    const std::optional<error> refused = refusal(t, memory, options, handles, total, op);
    w->handles = handles;
    std::vector<detail::window_request> requests;
    requests.reserve(static_cast<std::size_t>(t.size()));  // before the agreement: nothing after it allocates
    PVMM_TRY(detail::check_aborted(t, op));
    const std::uint64_t channels = refused ? 0 : static_cast<std::uint64_t>(options.signal_channels);
    const from_request mine{refused ? 0 : total, options.max_size, refused ? 0 : memory.size(), channels,
                            static_cast<std::uint64_t>(options.stream_signals)};
    bool exchanged = false;
    auto gathered =
        detail::all_gather(*t.ranks, t.next_step++, mine, refused, "allgather window memory", until, op, &exchanged);
    if (!gathered && !exchanged) return std::move(gathered).error();  // the bootstrap failed: it tells the peers
    // From here a failure may be this rank's alone (bytes its bootstrap handed it wrong): it travels in the first chunk
    // step, which every other rank takes next, so they fail at once naming it.
    std::uint64_t steps = 0;
    auto checked = [&]() -> status {
      if (!gathered) return std::move(gathered).error();
      const auto& all = *gathered;
      for (int r = 0; r < t.size(); ++r) {
        // A peer's chunk count is bounded by its size in whole units: nothing a peer sends makes this rank loop long.
        if (all[r].chunks == 0 || all[r].chunks > all[r].size / t.slot_unit)
          return op.fail(errc::protocol_error, fmt::format("rank {} announced {} chunk(s) for {:#x} bytes (unit {:#x})",
                                                           r, all[r].chunks, all[r].size, t.slot_unit));
        if (all[r].signal_channels != all[0].signal_channels)
          return op.fail(errc::team_mismatch, fmt::format("rank {} asked for {} signal channel(s), rank 0 for {}", r,
                                                          all[r].signal_channels, all[0].signal_channels));
        requests.push_back({all[r].size, all[r].max_size, 0, all[r].stream_signals});
        steps = std::max(steps, all[r].chunks);
      }
      PVMM_TRY(detail::check_same_path(all, op));
      PVMM_TRY_ASSIGN(stride, detail::stride_of(requests, t.slot_unit, op));
      w->max_size = stride;
      w->stride = stride;
      return {};
    }();
    if (!checked) {
      const error e = std::move(checked).error();
      (void)detail::exchange_chunks(*w, physical_allocation(), 0, 0, &e, until, op);
      return e;
    }
    const auto& all = *gathered;
    PVMM_TRY(detail::reserve_range(*w, until, op));  // a failure there is announced in a chunk step of its own
    std::size_t offset = 0;
    for (std::uint64_t i = 0; i < steps; ++i) {
      physical_allocation shared;  // a reference of the window's own: the caller keeps its owner
      std::size_t bytes = 0;
      if (i < memory.size()) {
        shared = detail::owner_access::allocation(detail::owner_access::of(*memory[i]));
        bytes = shared.size();
      }
      PVMM_TRY(detail::exchange_chunks(*w, std::move(shared), offset, bytes, nullptr, until, op));
      offset += bytes;
    }
    // What every rank mapped is what it announced (the same slot sizes on every rank: the check agrees everywhere).
    for (int r = 0; r < t.size(); ++r)
      if (w->slots[r].size != all[r].size)
        return op.fail(errc::protocol_error, fmt::format("rank {} announced {:#x} bytes and contributed {:#x}", r,
                                                         all[r].size, w->slots[r].size));
    // The signal pads, as create makes them (issue 48 item 10: create_from took the option and made none).
    if (all[0].signal_channels > 0)
      PVMM_TRY(detail::attach_signals(members, *w, static_cast<int>(all[0].signal_channels),
                                      static_cast<stream_signal_path>(all[0].stream_signals), until, op));
    return symmetric_window(std::move(w));
  });
}

result<symmetric_window> symmetric_window::create_from(const team& members, const physical_allocation& memory,
                                                       const window_options& options) {
  const char* what = "pvmm::symmetric_window::create_from";
  return detail::no_throw<result<symmetric_window>>(what,
                                                    [&] { return create_over(members, {&memory}, options, what); });
}

result<symmetric_window> symmetric_window::create_from(const team& members, const growable_buffer& memory,
                                                       const window_options& options) {
  const char* what = "pvmm::symmetric_window::create_from (growable_buffer)";
  return detail::no_throw<result<symmetric_window>>(what, [&] {
    std::vector<const physical_allocation*> chunks;
    for (const auto& c : memory.chunks()) chunks.push_back(&c);  // empty when the buffer is: refused as such
    return create_over(members, chunks, options, what);
  });
}

}  // namespace pvmm
