// A window's signal setup (pvmm/team_device.hpp): the pads (peer-writable inbox counters) and this rank's owner-only
// block (expected counters, error record, pointer table) made at create, zeroed before any rank can signal; the
// pointer table rewritten after a grow. The stream-ordered calls are in window_signal_ops.cpp.
#include <cstring>
#include <vector>

#include <pvmm/device.hpp>
#include <pvmm/pinned.hpp>
#include <pvmm/stream.hpp>
#include <pvmm/team.hpp>

#include <fmt/format.h>

#include "backend/team_signal.hpp"
#include "team/no_throw.hpp"
#include "team/team_exchange.hpp"
#include "team/window_state.hpp"

namespace pvmm::detail {
namespace {

std::vector<void*> peer_pointers(window_state& w) {
  std::vector<void*> table(w.slots.size(), nullptr);
  for (std::size_t r = 0; r < w.slots.size(); ++r)
    if (w.slots[r].mapped) table[r] = static_cast<char*>(w.range.address()) + r * w.stride;
  return table;
}

// Copies `bytes` from host memory to `at` on the team's device and waits (device memory on GPUs).
status copy_to_device(window_state& w, void* at, const void* bytes, std::size_t size, const operation& op) {
  PVMM_TRY_ASSIGN(s, op.step("stream::create", [&] { return stream::create(w.team->options.device); }));
  PVMM_TRY(op.step("stream_ref::copy_async", [&] { return s.copy_async(at, bytes, size); }));
  return op.step("stream_ref::synchronize", [&] { return s.synchronize(); });
}

// This rank's owner-only block: device memory exportable as nothing, mapped for the team's device alone. No peer
// has a handle to it, so nothing a peer writes can reach what this rank reads from it.
status make_own_block(window_signals& s, int device, std::size_t bytes, const operation& op) {
  allocation_properties p;
  p.location = location::device(device);
  p.exportable = handle_types::none;
  PVMM_TRY_ASSIGN(unit, op.step("query_granularity", [&] { return query_granularity(p); }));
  const std::size_t size = (bytes + unit.minimum - 1) / unit.minimum * unit.minimum;
  PVMM_TRY_ASSIGN(memory, op.step("physical_allocation::create (owner-only block)",
                                  [&] { return physical_allocation::create(size, p); }));
  PVMM_TRY_ASSIGN(range, op.step("address_reservation::reserve (owner-only block)",
                                 [&] { return address_reservation::reserve(size); }));
  const access_descriptor grant{location::device(device), access::read_write};
  PVMM_TRY(op.step("address_reservation::map_and_grant (owner-only block)",
                   [&] { return range.map_and_grant(0, memory, {grant}); }));
  s.own_memory = std::move(memory);
  s.own_range = std::move(range);
  return {};
}

// The abort words: page-locked host memory the team's device reads while its kernels wait (a device allocation
// would need a copy, which a stream blocked by those waits never runs). Word 0: the team's abort; word 1 + r:
// rank r's process exited. All zero until then.
status make_abort_word(window_signals& s, int device, int ranks, const operation& op) {
  pinned_options o;
  o.mapped = true;
  const std::size_t words = 1 + static_cast<std::size_t>(ranks);
  PVMM_TRY_ASSIGN(memory, op.step("pinned_allocation::create (abort words)",
                                  [&] { return pinned_allocation::create(words * sizeof(std::uint32_t), o); }));
  PVMM_TRY_ASSIGN(on_device, op.step("pinned_allocation::device_pointer (abort words)",
                                     [&] { return memory.device_pointer(device); }));
  for (std::size_t i = 0; i < words; ++i)
    __atomic_store_n(static_cast<std::uint32_t*>(memory.data()) + i, 0u, __ATOMIC_RELEASE);
  s.abort_words = words;
  s.abort_on_device = static_cast<const std::uint32_t*>(on_device);
  s.abort_memory = std::move(memory);
  return {};
}

// Everything of this rank's signals that can fail, before the step's agreement: the owner-only block made, it and
// this rank's pad zeroed, the pointer table written, the abort word made.
status prepare_signals(const team& members, window_state& w, window_signals& s, stream_signal_path path,
                       const operation& op) {
  const int n = members.size();
  PVMM_TRY(make_abort_word(s, w.team->options.device, n, op));
  if (path == stream_signal_path::driver) {
    PVMM_TRY_ASSIGN(driver, stream_waits::create(w.team->options.device, s.channels, n,
                                                 static_cast<const std::uint32_t*>(s.abort_memory.data()), op));
    s.driver = std::move(driver);
  }
  const std::size_t own = static_cast<std::size_t>(window_view::own_bytes(s.channels, n));
  const std::size_t table = static_cast<std::size_t>(window_view::table_offset(s.channels, n));
  PVMM_TRY(make_own_block(s, w.team->options.device, own, op));
  std::vector<unsigned char> image(own, 0);
  const auto pointers = peer_pointers(w);
  std::memcpy(image.data() + table, pointers.data(), pointers.size() * sizeof(void*));
  PVMM_TRY(copy_to_device(w, s.own(), image.data(), image.size(), op));
  const std::size_t pad = static_cast<std::size_t>(window_view::pad_bytes(s.channels, n));
  image.assign(pad, 0);
  return copy_to_device(w, s.pads.local(), image.data(), image.size(), op);
}

}  // namespace

void window_signals::raise_abort(int rank, bool exited) noexcept {
  if (!abort_memory.valid()) return;
  auto* words = static_cast<std::uint32_t*>(abort_memory.data());
  if (exited) {  // that rank's word: it ends the waits for that rank only
    if (rank >= 0 && static_cast<std::size_t>(rank) + 1 < abort_words)
      __atomic_store_n(words + 1 + rank, 1u, __ATOMIC_RELEASE);
  } else {
    std::uint32_t none = 0;  // the team's abort: the first rank to abort is the one named
    __atomic_compare_exchange_n(words, &none, static_cast<std::uint32_t>(rank) + 1, false, __ATOMIC_RELEASE,
                                __ATOMIC_RELAXED);
  }
  if (driver) driver->wake();  // the driver path's waits are released by its watchdog, which reads the same words
}

std::optional<error> signal_path_refusal(int rank, int device, int channels, stream_signal_path path,
                                         const operation& op) {
  if (path != stream_signal_path::kernel && path != stream_signal_path::driver)
    return op.fail(
        errc::invalid_argument,
        fmt::format("rank {}: stream_signals {} is neither kernel (0) nor driver (1)", rank, static_cast<int>(path)));
  if (path == stream_signal_path::driver && channels > 0)
    if (const char* missing = backend::stream_memops_missing(device))
      return op.fail(errc::not_supported, fmt::format("rank {}: stream_signals = driver: {}", rank, missing),
                     "use stream_signal_path::kernel");
  return std::nullopt;
}

status attach_signals(const team& members, window_state& w, int channels, stream_signal_path path, deadline until,
                      const operation& op) {
  const int n = members.size();
  window_options pad_options;
  pad_options.size = static_cast<std::size_t>(window_view::pad_bytes(channels, n));
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
  pad_options.timeout = std::max(left, std::chrono::milliseconds(0));
  PVMM_TRY_ASSIGN(pads,
                  op.step("create the signal pads", [&] { return symmetric_window::create(members, pad_options); }));
  window_access::of(pads)->keep_peers_on_abort.store(true, std::memory_order_release);
  // Named apart from the window it serves: a memory snapshot shows one "team window" per window the caller made.
  // A label is a nicety: no memory for its text leaves the pads unlabelled, never this rank out of the step.
  try {
    window_access::of(pads)->label.set(pads.base(), fmt::format("signal pads of a team window of rank {} of {}: {} "
                                                                "channel(s), rank r's pads at r * {:#x}",
                                                                members.rank(), n, channels, pads.stride()));
  } catch (...) {
  }
  std::optional<error> failed;
  std::unique_ptr<window_signals> s;
  auto prepared = no_throw<status>(op.name(), [&]() -> status {
    s = std::make_unique<window_signals>();
    s->pads = std::move(pads);
    s->channels = channels;
    return prepare_signals(members, w, *s, path, op);
  });
  if (!prepared) failed = std::move(prepared).error();
  // The closing agreement that every pad is zero and every rank's signals are ready (outcomes only: the channels
  // were agreed in the window's first step); nothing after it can fail.
  PVMM_TRY(agree(*w.team, w.team->next_step++, failed, "agree zeroed signal pads", until, op));
  s->wall_clock_khz = backend::wall_clock_khz(w.team->options.device);
  // The first two ranks sharing a process and a device, from the records every rank holds: every rank refuses
  // the same waits (a rank that had no such sibling would otherwise wait for one that was refused).
  for (int a = 0; a < n && s->same_context_ranks[0] < 0; ++a)
    for (int b = a + 1; b < n && s->same_context_ranks[0] < 0; ++b)
      if (w.team->same_process(a, b) && w.team->same_device(a, b)) s->same_context_ranks = {a, b};
  w.signals = std::move(s);
  w.signals_ready.store(true, std::memory_order_release);
  w.team->watch_peers();  // after the agreement, and best effort: it never fails the step
  return {};
}

status refresh_pointer_table(window_state& w, deadline until, const operation& op) {
  std::optional<error> failed;
  auto written = no_throw<status>(op.name(), [&]() -> status {
    const auto pointers = peer_pointers(w);
    char* at = reinterpret_cast<char*>(w.signals->own()) +
               window_view::table_offset(w.signals->channels, static_cast<int>(w.slots.size()));
    return copy_to_device(w, at, pointers.data(), pointers.size() * sizeof(void*), op);
  });
  if (!written) failed = std::move(written).error();
  return agree(*w.team, w.team->next_step++, failed, "pointer tables rewritten", until, op);
}

}  // namespace pvmm::detail
