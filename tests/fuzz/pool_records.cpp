// Fuzz target: what a peer sends to share a pool - the pool message (ipc::receive_pool) and pointer export records
// (memory_pool::import_pointer) - built from the input, against a live exporting pool of the host backend and its
// import. The records may be pvmm's own (live, freed, reused), mutated, or anything. Invariants: no crash (an
// accepted import is read and written), no fd or pvmm object leaked, every failure an error value.
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include <pvmm/pvmm.hpp>

#include "common.hpp"

namespace {

struct world {  // built once: an exporting pool, its import, a stream
  pvmm::memory_pool pool, imported;
  pvmm::stream s;
  world() {
    pvmm::pool_properties p;
    p.exportable = pvmm::handle_types::posix_fd;
    pool = pvmm::memory_pool::create(p).value();
    imported = pvmm::memory_pool::import_posix_fd(pool.export_posix_fd().value(), 0).value();
    s = pvmm::stream::create(0).value();
  }
};

void pool_message(pvmm_fuzz::input in) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return;
  const int fds[] = {0, sv[0]};
  const std::size_t count = in.byte() % 3;
  std::vector<std::uint8_t> payload(in.data, in.data + std::min<std::size_t>(in.size, 64));
  (void)pvmm::ipc::send_fds(sv[0], fds, count, payload.data(), payload.size());
  auto received = pvmm::ipc::receive_pool(sv[1], std::chrono::milliseconds(100));
  if (received) {
    auto pool = pvmm::memory_pool::import_posix_fd(*received, 0);  // a pipe end or stdin: refused, never a crash
    (void)pool;
  }
  ::close(sv[0]);
  ::close(sv[1]);
}

void pointer_record(world& w, pvmm_fuzz::input in) {
  // A real record of a live allocation, then changed as the input says.
  auto block = w.pool.allocate(std::size_t{4096} * (1 + in.byte() % 64), w.s).value();
  (void)w.s.synchronize();
  auto record = block.export_pointer().value();
  const std::uint8_t how = in.byte();
  if (how & 1) {  // free it first: the record is stale
    (void)block.free_async(w.s);
    (void)w.s.synchronize();
    if (how & 2) {  // and reuse the block
      auto again = w.pool.allocate(record.size, w.s);
      (void)again;
    }
  }
  auto* bytes = reinterpret_cast<std::uint8_t*>(&record);
  for (std::uint8_t n = in.byte() % 8; n > 0 && in.size >= 2; --n) {
    const std::uint8_t at = in.byte() % sizeof record;
    bytes[at] = in.byte();
  }
  auto held = w.imported.import_pointer(record, w.s);
  if (held) {
    auto* p = static_cast<volatile std::uint8_t*>(held->data());
    p[0] = p[0];  // touching an accepted import must be safe
    p[held->size() - 1] = 1;
    (void)held->free_async(w.s);
    (void)w.s.synchronize();
  }
  if (block) (void)block.free_async(w.s);
  (void)w.s.synchronize();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static world w;
  pvmm_fuzz::input in{data, size};
  const auto fds = pvmm_fuzz::open_fds();
  const auto live = pvmm::query_live_objects();
  if (in.byte() & 1)
    pool_message(in);
  else
    pointer_record(w, in);
  if (pvmm_fuzz::open_fds() != fds) pvmm_fuzz::finding("an fd leaked");
  if (!(pvmm::query_live_objects() == live)) pvmm_fuzz::finding("a pvmm object leaked");
  return 0;
}
