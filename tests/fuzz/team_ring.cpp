// Fuzz target: a symmetric window's create against a forged rank (issue 34, item 1). Two thread ranks: rank 0 runs
// symmetric_window::create; rank 1 is driven by hand after a real team::create: its window-size record, its chunk
// record, its fd ring message (offset, size, fd, failure) and the memory behind the fd all come from the input.
// Invariants: no crash; when rank 0 gets a window, rank 1's slot is within the stride and every byte size_of(1)
// says is readable where it is mapped (a fault is a finding); a failure names rank 1; no fd or pvmm object leaks.
#include <cstdio>
#include <cstring>
#include <thread>

#include <pvmm/pvmm.hpp>
#include <pvmm/team.hpp>

#include "../team/case_support.hpp"
#include "common.hpp"
#include "team/team_exchange.hpp"
#include "team/window_state.hpp"

namespace {

using namespace std::chrono_literals;
namespace detail = pvmm::detail;
constexpr std::uint64_t unit = 2u << 20;  // a multiple of the host backend's granularities
constexpr std::uint64_t stride = 4 * unit;

// A size or offset: one of the values that matter at the slot's edges, or 8 raw bytes.
std::uint64_t edge_value(pvmm_fuzz::input& in) {
  static const std::uint64_t values[] = {
      0,         unit, 2 * unit, stride, stride + unit, unit / 2, std::uint64_t{1} << 63, ~std::uint64_t{0} - unit + 1,
      0 - stride};
  const std::uint8_t pick = in.byte();
  if (pick < 0xf0) return values[pick % (sizeof values / sizeof values[0])];
  std::uint64_t raw = 0;
  for (int i = 0; i < 8; ++i) raw = raw << 8 | in.byte();
  return raw;
}

// Rank 1's bootstrap during team::create: keeps rank 0's identity record (its team id names the endpoints).
class capturing_bootstrap : public pvmm_team_test::forwarding_bootstrap {
 public:
  using forwarding_bootstrap::forwarding_bootstrap;
  pvmm::status do_allgather(const void* mine, std::size_t bytes, void* all, std::uint64_t collective,
                            pvmm::deadline until) override {
    auto done = forwarding_bootstrap::do_allgather(mine, bytes, all, collective, until);
    if (done && bytes == sizeof(detail::enveloped<detail::member_record>)) std::memcpy(&root, all, sizeof root);
    return done;
  }
  detail::enveloped<detail::member_record> root{};
};

template <class T>
pvmm::status gather(pvmm::bootstrap& b, std::uint32_t step, std::int32_t failed, const T& body) {
  detail::enveloped<T> mine{};
  mine.envelope.step = step;
  mine.envelope.failed = failed;
  std::snprintf(mine.envelope.failure, sizeof mine.envelope.failure, "forged failure");
  mine.body = body;
  std::vector<detail::enveloped<T>> all(2);
  return b.allgather(&mine, sizeof mine, all.data(), pvmm::deadline_in(2s));
}

// Rank 1, by hand: the window's three steps with forged records, and one forged message to rank 0.
void forged_rank(pvmm_fuzz::input in, pvmm::bootstrap& b, std::uint64_t team_id) {
  detail::window_request request;
  request.size = in.byte() % 4 == 3 ? edge_value(in) : unit;
  request.max_size = in.byte() % 4 == 3 ? edge_value(in) : stride;
  if (!gather(b, 1, 0, request)) return;
  const std::uint8_t choices = in.byte();
  detail::chunk_record record;
  record.offset = choices & 1 ? edge_value(in) : 0;
  record.size = choices & 2 ? edge_value(in) : unit;
  record.has_fabric = choices & 4 ? 1 : 0;
  if (choices & 8) std::memset(record.no_fabric, 'x', sizeof record.no_fabric);
  const std::int32_t failed = choices & 16 ? static_cast<std::int32_t>(in.byte()) : 0;
  if (!gather(b, 2, failed, record)) return;
  // The memory behind the fd: 0 to 3 units (0: no fd).
  const std::size_t units = in.byte() % 4;
  pvmm::owned_fd fd;
  if (units > 0) {
    pvmm::allocation_properties p;
    p.exportable = pvmm::handle_types::posix_fd;
    if (auto a = pvmm::physical_allocation::create(units * unit, p))
      if (auto exported = a->export_posix_fd()) fd = std::move(*exported);
  }
  detail::team_message m;
  m.step = 2;
  m.team_id = team_id;
  m.rank = 1;
  const std::uint8_t more = in.byte();
  m.offset = more & 1 ? edge_value(in) : record.offset;
  m.size = more & 2 ? edge_value(in) : record.size;
  m.failed = more & 4 ? static_cast<std::int32_t>(in.byte()) : 0;
  const bool send_fd = fd.valid() && !(more & 8);
  m.has_fd = (more & 16) ? !send_fd : send_fd;  // sometimes announces what it does not send
  char name[64];
  std::snprintf(name, sizeof name, "pvmm-team-%016llx-0", static_cast<unsigned long long>(team_id));
  if (auto c = pvmm::ipc::connect(name, 2000ms)) {
    const int raw = fd.get();
    (void)c->send(&raw, send_fd ? 1 : 0, &m, sizeof m, 2000ms);
  }
  (void)gather(b, 2, 0, std::uint8_t{0});  // the agreement
}

void check_window(const pvmm::symmetric_window& w) {
  if (w.size_of(1) > w.stride()) pvmm_fuzz::finding("rank 1's slot is larger than the stride");
  if (!w.mapped(1)) return;
  // Every byte size_of(1) promises is read: an unmapped page faults here (a finding).
  const auto* bytes = static_cast<const volatile unsigned char*>(w.peer(1));
  unsigned sum = 0;
  for (std::size_t i = 0; i < w.size_of(1); i += 4096) sum += bytes[i];
  if (w.size_of(1) > 0) sum += bytes[w.size_of(1) - 1];
  (void)sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::size_t fds_before = pvmm_fuzz::open_fd_count();
  const auto live_before = pvmm::query_live_objects();
  {
    auto ranks = pvmm::make_thread_bootstraps(2).value();
    auto capture = std::make_shared<capturing_bootstrap>(ranks[1]);
    pvmm::team t0, t1;
    std::thread second([&] {
      pvmm::team_options o;
      o.timeout = 2s;
      if (auto t = pvmm::team::create(capture, o)) t1 = std::move(*t);
    });
    pvmm::team_options o;
    o.timeout = 2s;
    if (auto t = pvmm::team::create(ranks[0], o)) t0 = std::move(*t);
    second.join();
    if (!t0.valid() || !t1.valid()) pvmm_fuzz::finding("a team of two threads could not be made");
    std::thread forger([&] { forged_rank(pvmm_fuzz::input{data, size}, *ranks[1], capture->root.body.team_id); });
    pvmm::window_options wo;
    wo.size = unit;
    wo.max_size = stride;
    wo.timeout = 2s;
    auto w = pvmm::symmetric_window::create(t0, wo);
    ranks[0]->abort();  // the forger's next collective ends at once
    forger.join();
    if (w)
      check_window(*w);
    else if (w.error().message().find("rank 1") == std::string::npos) {
      std::fprintf(stderr, "%s\n", w.error().message().c_str());
      pvmm_fuzz::finding("a failure that does not name rank 1");
    }
  }
  const auto live = pvmm::query_live_objects();
  if (pvmm_fuzz::open_fd_count() != fds_before) pvmm_fuzz::finding("an fd leaked");
  if (live.allocations != live_before.allocations || live.mappings != live_before.mappings ||
      live.reservations != live_before.reservations)
    pvmm_fuzz::finding("a pvmm object leaked");
  return 0;
}
