// team_multicast: the steps of pvmm/team_multicast.hpp, each ending in an agreement so a rank that fails makes
// every rank fail at once naming it.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>

#include <pvmm/device.hpp>
#include <pvmm/multicast.hpp>
#include <pvmm/reservation.hpp>
#include <pvmm/team_multicast.hpp>

#include <fmt/format.h>

#include "team/bootstrap_common.hpp"
#include "team/no_throw.hpp"
#include "team/team_exchange.hpp"
#include "team/window_state.hpp"

namespace pvmm {
namespace detail {

struct team_multicast_state final : peer_mappings {
  std::shared_ptr<window_state> window;  // the bound memory stays alive while bound
  multicast_object object;
  address_reservation range;
  std::vector<int> bound_ranks;
  std::size_t size = 0;
  std::size_t bound = 0;              // bytes of this rank's slot bound (only the lowest rank on a device binds)
  std::atomic<bool> unmapped{false};  // by abort(), from any thread; address() reads it

  team_multicast_state() = default;
  team_multicast_state(const team_multicast_state&) = delete;
  team_multicast_state& operator=(const team_multicast_state&) = delete;
  // Unmap first, then unbind this rank's binding, then let go: the driver's order (multicast.hpp).
  ~team_multicast_state() {
    range = address_reservation();  // unmaps and frees
    if (bound > 0) (void)object.unbind(window->team->options.device, 0, bound);
  }
  // abort(): the mapping (which reaches every peer's slot) goes; the binding stays until release, in the order above.
  void unmap_peers(const std::string&) noexcept override {
    if (unmapped.exchange(true)) return;
    try {
      (void)range.unmap(0, size);
    } catch (...) {  // the error's text could not be made: releasing unmaps what is left
    }
  }
};

namespace {

// What every rank says of itself before any multicast driver call (fixed layout; travels in an all_gather, whose
// envelope carries a local failure).
struct capability_record {
  std::uint8_t supported = 0;
  std::uint8_t reserved[7] = {};
  std::uint64_t size = 0;         // this rank's slot
  std::uint64_t granularity = 0;  // the multicast granularity its device needs
  char why[160] = {};             // why not supported
};

// The ranks of this node whose slots are bound: the lowest of each device.
std::vector<int> device_leaders(const team_state& t) {
  std::vector<int> out;
  for (int r : t.node_ranks())
    if (std::none_of(out.begin(), out.end(), [&](int l) { return t.same_device(l, r); })) out.push_back(r);
  return out;
}

capability_record my_capability(const window_state& w, unsigned devices, std::optional<error>& failed,
                                const operation& op) {
  capability_record c;
  c.size = w.slots[w.rank()].size;
  auto device = query_device(w.team->options.device);
  if (!device) {
    failed = op.wrap(std::move(device).error());
    return c;
  }
  if (!device->capabilities.multicast.supported) {
    const auto why = fmt::format("{} backend, device {}: no multicast", query_backend().name, w.team->options.device);
    std::strncpy(c.why, why.c_str(), sizeof c.why - 1);
    return c;
  }
  c.supported = 1;
  multicast_properties p;
  p.team_size = devices;
  p.size = c.size;
  p.exportable = handle_types::posix_fd;
  if (auto g = multicast_granularity(p))
    c.granularity = g->minimum;
  else
    failed = op.wrap(std::move(g).error());
  return c;
}

// Every rank's capability record checked alike, so every rank fails with the same error.
status check_capabilities(const team_state& t, const std::vector<capability_record>& all, const operation& op) {
  std::vector<int> lacking;
  for (int r = 0; r < t.size(); ++r)
    if (!all[r].supported) lacking.push_back(r);
  if (!lacking.empty())
    return op.fail(errc::not_supported,
                   fmt::format("multicast is not supported on {} ({}){}", rank_list(lacking),
                               std::string(all[lacking[0]].why, strnlen(all[lacking[0]].why, 160)),
                               lacking.size() > 1 ? " and the others alike" : ""),
                   "check query_device(d).capabilities.multicast.supported on every rank first");
  for (int r = 0; r < t.size(); ++r) {
    if (all[r].size != all[0].size)
      return op.fail(errc::team_mismatch,
                     fmt::format("rank {}'s slot holds {:#x} bytes and rank 0's {:#x}", r, all[r].size, all[0].size),
                     "multicast binds the same bytes of every slot: make the window with one size on every rank");
    if (all[r].granularity != 0 && all[r].size % all[r].granularity != 0)
      return op.fail(errc::invalid_size,
                     fmt::format("the slots' {:#x} bytes are not a multiple of rank {}'s multicast granularity {:#x}",
                                 all[r].size, r, all[r].granularity));
  }
  return {};
}

// Step 2: the node's lowest rank creates the object and sends its fd to the node's other ranks, one at a time.
result<multicast_object> create_or_receive(team_state& t, unsigned devices, std::size_t size, std::uint32_t step,
                                           deadline until, const operation& op) {
  const std::vector<int> node = t.node_ranks();
  const int root = node.front();
  if (t.rank() != root) {
    PVMM_TRY_ASSIGN(got, receive_message(t, step, {root}, "multicast object", until, op));
    if (got.header.failed != 0)
      return op.fail(peer_errc(got.header.failed), fmt::format("rank {} could not create the multicast object", root));
    if (!got.fd.valid()) return op.fail(errc::protocol_error, fmt::format("rank {} sent no multicast fd", root));
    return multicast_object::import_posix_fd(got.fd.get(), size);  // the fd closes here; the import holds on
  }
  multicast_properties p;
  p.team_size = devices;
  p.size = size;
  p.exportable = node.size() > 1 ? handle_types::posix_fd : handle_types::none;
  auto made = multicast_object::create(p);
  std::optional<owned_fd> fd;
  if (made && node.size() > 1) {
    auto exported = made->export_posix_fd();
    if (!exported)
      made = std::move(exported).error();
    else
      fd = std::move(*exported);
  }
  team_message m;
  m.step = step;
  m.size = size;
  if (!made) m.failed = static_cast<std::int32_t>(made.code());
  for (std::size_t i = 1; i < node.size(); ++i)  // the others wait for this, failed or not
    PVMM_TRY(send_message(t, node[i], m, fd ? fd->get() : -1, until, op));
  return made;
}

// Step 4: this rank's slot, chunk by chunk, at the same offsets in the object; `bound` counts what is bound.
status bind_slot(multicast_object& object, const window_slot& slot, std::size_t& bound) {
  for (const physical_allocation& chunk : slot.chunks) {
    PVMM_TRY(object.bind_memory(bound, chunk, 0, chunk.size()));
    bound += chunk.size();
  }
  return {};
}

}  // namespace
}  // namespace detail

team_multicast::team_multicast(std::shared_ptr<detail::team_multicast_state> state) noexcept
    : state_(std::move(state)) {}

result<team_multicast> team_multicast::create(const symmetric_window& window, const team_multicast_options& options) {
  return detail::no_throw<result<team_multicast>>("pvmm::team_multicast::create", [&]() -> result<team_multicast> {
    auto args = [&] { return fmt::format("rank={}, timeout={}ms", window.rank(), options.timeout.count()); };
    const detail::operation op{"pvmm::team_multicast::create", args};
    if (!window.valid()) return op.fail(errc::invalid_argument, "the window is empty (released or moved from)");
    if (options.timeout.count() < 0) return op.fail(errc::invalid_argument, "the timeout is negative");
    const deadline until = deadline_in(options.timeout);
    auto s = std::make_shared<detail::team_multicast_state>();
    s->window = window.state_;
    detail::window_state& w = *s->window;
    detail::team_state& t = *w.team;
    const std::uint32_t step = t.next_step++;
    s->bound_ranks = detail::device_leaders(t);
    const auto devices = static_cast<unsigned>(s->bound_ranks.size());
    s->size = w.slots[t.rank()].size;

    // 1. Capabilities, sizes and granularities of every rank, before any multicast driver call.
    std::optional<error> failed;
    const detail::capability_record mine = detail::my_capability(w, devices, failed, op);
    PVMM_TRY(detail::check_aborted(t, op));
    bool exchanged = false;
    auto gathered =
        detail::all_gather(*t.ranks, step, mine, failed, "allgather multicast capabilities", until, op, &exchanged);
    if (!gathered && !exchanged) return std::move(gathered).error();  // the bootstrap failed: it tells the peers
    // A failure here may be this rank's alone (bytes its bootstrap handed it wrong): a closing agreement carries it,
    // so every rank fails at once naming it. The check after it reads the same records on every rank, so it answers
    // alike everywhere (the same errc naming the same ranks).
    std::optional<error> received;
    if (!gathered) received = std::move(gathered).error();
    PVMM_TRY(detail::agree(t, step, received, "multicast capabilities received", until, op));
    const std::vector<detail::capability_record>& all = *gathered;
    PVMM_TRY(detail::check_capabilities(t, all, op));

    // 2. Created on the node's lowest rank, imported on the others.
    if (auto object = detail::create_or_receive(t, devices, s->size, step, until, op))
      s->object = std::move(*object);
    else
      failed = op.wrap(std::move(object).error());
    // 3. Every device added before any binds.
    const bool leader = std::find(s->bound_ranks.begin(), s->bound_ranks.end(), t.rank()) != s->bound_ranks.end();
    if (!failed && leader)
      if (auto added = s->object.add_device(t.options.device); !added) failed = op.wrap(std::move(added).error());
    PVMM_TRY(detail::agree(t, step, failed, "multicast devices added", until, op));
    // 4, 5. Bind (one binding per device), map and grant; the creator holds its reference through the agreement.
    if (leader) {
      if (auto bound = detail::bind_slot(s->object, w.slots[t.rank()], s->bound); !bound)
        failed = op.wrap(std::move(bound).error());
    }
    if (!failed) {
      auto range = address_reservation::reserve(s->size, all[t.rank()].granularity);
      if (!range)
        failed = op.wrap(std::move(range).error());
      else if (auto mapped = range->map(0, s->object, 0, s->size); !mapped)
        failed = op.wrap(std::move(mapped).error());
      else if (auto granted = range->set_access(0, s->size, {{location::device(t.options.device), access::read_write}});
               !granted)
        failed = op.wrap(std::move(granted).error());  // the reservation unmaps as it goes
      else
        s->range = std::move(*range);
    }
    PVMM_TRY(detail::agree(t, step, failed, "multicast bound and mapped", until, op));
    t.adopt(s);
    return team_multicast(std::move(s));
  });
}

status team_multicast::release() noexcept {
  return detail::release_local(state_, "pvmm::team_multicast::release", "multicast");
}

void* team_multicast::address() const noexcept {
  return state_ && !state_->unmapped ? state_->range.address() : nullptr;
}
std::size_t team_multicast::size() const noexcept { return state_ ? state_->size : 0; }
const std::vector<int>& team_multicast::bound_ranks() const noexcept {
  static const std::vector<int> none;  // an empty object's answer; immutable, so safe to share
  return state_ ? state_->bound_ranks : none;
}

}  // namespace pvmm
