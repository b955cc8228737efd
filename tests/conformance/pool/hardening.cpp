// Hardening round 3 (issue 23): pool cases, each pinning a defect an attacker found.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "memory_kinds.hpp"

using namespace pvmm;
using namespace pvmm_test;
using namespace std::chrono_literals;

namespace {
constexpr std::size_t kib = 1024;

memory_pool sized_pool(std::size_t max_size, bool exportable = false) {
  pool_properties p;
  p.max_size = max_size;
  if (exportable) p.exportable = handle_types::posix_fd;
  auto pool = memory_pool::create(p);
  PVMM_REQUIRE_VALUE(pool);
  return std::move(*pool);
}

std::size_t file_size(int fd) {
  struct stat st {};
  REQUIRE(::fstat(fd, &st) == 0);
  return static_cast<std::size_t>(st.st_size);
}

/// A memfd of `fd`'s size holding a copy of its last page (a pool file's header), sealed with `seals` only.
owned_fd forged_copy(int fd, int seals) {
  const std::size_t size = file_size(fd), page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  owned_fd copy(::memfd_create("pvmm-pool", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  REQUIRE(copy.valid());
  REQUIRE(::ftruncate(copy.get(), static_cast<off_t>(size)) == 0);
  std::vector<char> header(page);
  REQUIRE(::pread(fd, header.data(), page, static_cast<off_t>(size - page)) == static_cast<ssize_t>(page));
  REQUIRE(::pwrite(copy.get(), header.data(), page, static_cast<off_t>(size - page)) == static_cast<ssize_t>(page));
  if (seals != 0) REQUIRE(::fcntl(copy.get(), F_ADD_SEALS, seals) == 0);
  return copy;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
}  // namespace

TEST_SUITE("pool") {
  PVMM_CASE(
      "host backend: a pool file is sealed against size changes before it is shared, and imports refuse one "
      "that is not") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_HOST_BACKEND("the file and its seals are the host backend's");
    auto pool = sized_pool(4 * mib, true);
    auto s = stream::create(0).value();
    auto exported = pool.export_posix_fd().value();
    const int seals = ::fcntl(exported.fd.get(), F_GET_SEALS);
    CHECK((seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) == (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL));
    auto imported = memory_pool::import_posix_fd(exported, 0).value();
    // The exporter (or anyone holding the file) can no longer pull the importer's memory away.
    REQUIRE(::ftruncate(exported.fd.get(), 0) != 0);
    CHECK(errno == EPERM);
    auto memory = pool.allocate(64 * kib, s).value();
    write_words(memory.data(), pattern(64 * kib, 7), 0);
    PVMM_CHECK_OK(s.synchronize());
    auto held = imported.import_pointer(memory.export_pointer().value(), s).value();
    CHECK(read_words(held.data(), 64 * kib, 0) == pattern(64 * kib, 7));
    PVMM_CHECK_OK(held.free_async(s));
    PVMM_CHECK_OK(memory.free_async(s));
    PVMM_CHECK_OK(s.synchronize());
    // A well-formed pool file without the seals is refused, naming what is missing; with them it is accepted.
    auto forge = [&](int with) { return pool_export{forged_copy(exported.fd.get(), with), pool.id()}; };
    auto unsealed = memory_pool::import_posix_fd(forge(0), 0);
    PVMM_CHECK_ERRC(unsealed, errc::invalid_handle);
    if (!unsealed) CHECK(unsealed.error().message().find("shrinking and growing") != std::string::npos);
    auto growable = memory_pool::import_posix_fd(forge(F_SEAL_SHRINK), 0);
    PVMM_CHECK_ERRC(growable, errc::invalid_handle);
    if (!growable) CHECK(growable.error().message().find("against growing") != std::string::npos);
    auto shrinkable = memory_pool::import_posix_fd(forge(F_SEAL_GROW), 0);
    PVMM_CHECK_ERRC(shrinkable, errc::invalid_handle);
    if (!shrinkable) CHECK(shrinkable.error().message().find("against shrinking") != std::string::npos);
    PVMM_CHECK_OK(memory_pool::import_posix_fd(forge(F_SEAL_SHRINK | F_SEAL_GROW), 0));
  }

  PVMM_CASE("host backend: an importer cannot truncate the exporter's pool, the exporter keeps working") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_HOST_BACKEND("the file is the host backend's");
    auto pool = sized_pool(4 * mib, true);
    auto s = stream::create(0).value();
    socket_pair pair;
    PVMM_CHECK_OK(ipc::send_pool(pair.a, pool.export_posix_fd().value()));
    auto received = ipc::receive_pool(pair.b, 1s).value();  // what the importer holds
    REQUIRE(::ftruncate(received.fd.get(), 0) != 0);
    CHECK(errno == EPERM);
    CHECK(::ftruncate(received.fd.get(), static_cast<off_t>(file_size(received.fd.get()) * 2)) != 0);
    for (int round = 0; round < 3; ++round) {
      auto memory = pool.allocate(3 * mib, s).value();
      check_round_trip(s, memory.data(), 3 * mib, 20 + round);
      PVMM_CHECK_OK(memory.free_async(s));
    }
    PVMM_CHECK_OK(s.synchronize());
  }

  PVMM_CASE("freed neighbours coalesce: a pool emptied of small blocks serves a larger one, and growth stays bounded") {
    PVMM_REQUIRE_POOLS();
    PVMM_REQUIRE_CAPABILITY(caps().pools.max_size, "an enforced pool maximum size");
    auto pool = sized_pool(2 * mib);
    auto s = stream::create(0).value();
    auto t = stream::create(0).value();
    std::vector<void*> blocks;
    for (std::size_t i = 0; i < 2 * mib / 256; ++i) blocks.push_back(pool.allocate_async(256, s).value());
    PVMM_CHECK_ERRC(pool.allocate_async(256, s), errc::out_of_memory);  // full
    for (void* p : blocks) PVMM_CHECK_OK(pool.free_async(p, s));
    PVMM_CHECK_OK(s.synchronize());
    CHECK(pool.usage().value().used_current == 0);
    auto pair = pool.allocate(512, s);  // two freed neighbours
    PVMM_CHECK_OK(pair);
    if (pair) PVMM_CHECK_OK(pair->free_async(s));
    PVMM_CHECK_OK(s.synchronize());
    auto whole = pool.allocate(2 * mib, t);  // every freed block, on another stream (their frees completed)
    PVMM_CHECK_OK(whole);
    if (whole) PVMM_CHECK_OK(whole->free_async(t));
    PVMM_CHECK_OK(t.synchronize());
    PVMM_CHECK_OK(pool.trim_to(0));
    CHECK(pool.usage().value().reserved_current == 0);
    PVMM_CHECK_OK(pool.allocate(512, s));  // and after trimming
    PVMM_CHECK_OK(s.synchronize());

    // One live block growing by 4 KiB a round: at most 1.2 MiB in use, so one 32 MiB chunk reserved (the drivers'
    // unit, tools/probes/pool_chunks.cpp), not the 178 MiB of every size ever asked for.
    auto growing = sized_pool(0);
    pool_allocation live;
    for (std::size_t round = 1; round <= 300; ++round) {
      auto next = growing.allocate(round * 4 * kib, s).value();
      if (live) PVMM_CHECK_OK(live.free_async(s));
      live = std::move(next);
    }
    PVMM_CHECK_OK(s.synchronize());
    CHECK(growing.usage().value().reserved_current <= 32 * mib);
    PVMM_CHECK_OK(live.free_async(s));
    PVMM_CHECK_OK(s.synchronize());
    PVMM_CHECK_OK(growing.trim_to(0));
    CHECK(growing.usage().value().reserved_current == 0);
  }

  PVMM_CASE("allocating among tens of thousands of live and freed blocks costs no scan of them") {
    PVMM_REQUIRE_POOLS();
    auto pool = sized_pool(0);
    auto s = stream::create(0).value();
    constexpr std::size_t count = 40000;
    std::vector<void*> blocks;
    blocks.reserve(count);
    auto start = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < count; ++i) blocks.push_back(pool.allocate_async(256, s).value());
    const double made = seconds_since(start);
    MESSAGE("40,000 live 256 B blocks made in " << made << " s");
    CHECK(made < 3.0);  // a sanity bound: a scan per allocation took 4.7 s
    for (std::size_t i = 0; i < count; i += 2) PVMM_CHECK_OK(pool.free_async(blocks[i], s));
    PVMM_CHECK_OK(s.synchronize());  // 20,000 freed blocks between 20,000 live ones; none fits 512 B
    std::vector<void*> larger;
    larger.reserve(count / 2);
    start = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < count / 2; ++i) larger.push_back(pool.allocate_async(512, s).value());
    const double among = seconds_since(start);
    MESSAGE("20,000 512 B blocks among them in " << among << " s");
    CHECK(among < 3.0);  // a sanity bound: a scan per allocation took 0.2 ms each
    for (std::size_t i = 1; i < count; i += 2) PVMM_CHECK_OK(pool.free_async(blocks[i], s));
    for (void* p : larger) PVMM_CHECK_OK(pool.free_async(p, s));
    PVMM_CHECK_OK(s.synchronize());
    CHECK(pool.usage().value().used_current == 0);
  }

  PVMM_CASE("host backend: nothing a peer writes into a shared pool's file decides the exporter's frees") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_HOST_BACKEND("the control table is the host backend's");
    constexpr std::size_t capacity = 4 * mib;
    auto pool = sized_pool(capacity, true);
    auto s = stream::create(0).value();
    auto exported = pool.export_posix_fd().value();
    std::vector<pool_allocation> memory;
    for (int i = 0; i < 4; ++i) memory.push_back(pool.allocate(256 * kib, s).value());
    PVMM_CHECK_OK(s.synchronize());
    // A peer that imported nothing writes every byte past the pool's memory: the control table and header.
    const std::size_t size = file_size(exported.fd.get());
    void* peer = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, exported.fd.get(), 0);
    REQUIRE(peer != MAP_FAILED);
    std::memset(static_cast<char*>(peer) + capacity, 0x01, size - capacity);
    for (auto& m : memory) PVMM_CHECK_OK(m.free_async(s));
    PVMM_CHECK_OK(s.synchronize());
    CHECK(pool.usage().value().used_current == 0);
    auto again = pool.allocate(capacity, s);  // every block came back
    PVMM_CHECK_OK(again);
    if (again) {
      write_words(again->data(), pattern(capacity, 9), 0);
      CHECK(read_words(again->data(), capacity, 0) == pattern(capacity, 9));
      PVMM_CHECK_OK(again->free_async(s));
    }
    std::memset(static_cast<char*>(peer) + capacity, 0x00, size - capacity);  // and zeroing it changes nothing
    auto after = pool.allocate(mib, s);
    PVMM_CHECK_OK(after);
    if (after) PVMM_CHECK_OK(after->free_async(s));
    PVMM_CHECK_OK(s.synchronize());
    ::munmap(peer, size);
  }

  PVMM_CASE("pool blocks do not keep released streams (or their threads) alive") {
    PVMM_REQUIRE_POOLS();
    auto pool = sized_pool(0);
    auto keep = stream::create(0).value();
    const std::size_t before = live_thread_count();
    std::vector<pool_allocation> live;
    for (int i = 0; i < 200; ++i) {
      auto s = stream::create(0).value();
      auto memory = pool.allocate(256, s).value();
      if (i % 2 == 0) {
        PVMM_CHECK_OK(memory.free_async(s));  // a block freed on it
      } else {
        PVMM_CHECK_OK(s.synchronize());
        live.push_back(std::move(memory));  // a block allocated on it, still live
      }
    }
    CHECK(live_thread_count_settled(before + 2) <= before + 2);
    for (auto& m : live) PVMM_CHECK_OK(m.free_async(keep));
    PVMM_CHECK_OK(keep.synchronize());
    PVMM_CHECK_OK(keep.synchronize());
    // Memory freed on a stream that is gone is free for every stream, even with every reuse policy off: its
    // release synchronised it (rule 1 of memory_pool.hpp), and only that stream could take it otherwise.
    pool_properties strict;
    strict.max_size = caps().pools.max_size ? 2 * mib : 0;  // where enforced, only reuse can serve the second
    strict.reuse_follow_event_dependencies = strict.reuse_opportunistic = strict.reuse_internal_dependencies = false;
    auto small = memory_pool::create(strict).value();
    {
      auto gone = stream::create(0).value();
      auto whole = small.allocate(2 * mib, gone).value();
      PVMM_CHECK_OK(whole.free_async(gone));
      PVMM_CHECK_OK(gone.synchronize());
    }
    auto reused = small.allocate(2 * mib, keep);
    PVMM_CHECK_OK(reused);
    if (reused) PVMM_CHECK_OK(reused->free_async(keep));
    PVMM_CHECK_OK(keep.synchronize());
  }

  PVMM_CASE("host backend: a pool file that cannot be mapped read-write is an invalid handle, not out of memory") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_HOST_BACKEND("the file is the host backend's");
    auto pool = sized_pool(4 * mib, true);
    auto exported = pool.export_posix_fd().value();
    pool_export read_only{
        owned_fd(::open(("/proc/self/fd/" + std::to_string(exported.fd.get())).c_str(), O_RDONLY | O_CLOEXEC)),
        pool.id()};
    REQUIRE(read_only.fd.valid());
    PVMM_CHECK_ERRC(memory_pool::import_posix_fd(read_only, 0), errc::invalid_handle);
    pool_export write_sealed{forged_copy(exported.fd.get(), F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE), pool.id()};
    PVMM_CHECK_ERRC(memory_pool::import_posix_fd(write_sealed, 0), errc::invalid_handle);
  }

  PVMM_CASE("an exporter's allocation destroyed while the importer's free is pending is freed") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_CAPABILITY(caps().pools.ipc_posix_fd, "pool sharing as POSIX fd");
    auto pool = sized_pool(0, true);
    auto s = stream::create(0).value();
    auto importer_stream = stream::create(0).value();
    auto imported = memory_pool::import_posix_fd(pool.export_posix_fd().value(), 0).value();
    gate g;
    {
      auto memory = pool.allocate(mib, s).value();
      PVMM_CHECK_OK(s.synchronize());
      auto held = imported.import_pointer(memory.export_pointer().value(), importer_stream).value();
      PVMM_CHECK_OK(importer_stream.launch_host_function(gate::hold, &g));
      PVMM_CHECK_OK(held.free_async(importer_stream));  // pending behind the gate
    }                                                   // the exporter's destructor frees it now
    g.open = true;
    PVMM_CHECK_OK(importer_stream.synchronize());
    PVMM_CHECK_OK(s.synchronize());
    CHECK(pool.usage().value().used_current == 0);
  }

  PVMM_CASE("host backend: a pointer record whose sizes differ from the exporter's block is refused") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_HOST_BACKEND("the record's layout and the control table are the host backend's");
    constexpr std::size_t capacity = 4 * mib;
    auto pool = sized_pool(capacity, true);
    auto s = stream::create(0).value();
    auto imported = memory_pool::import_posix_fd(pool.export_posix_fd().value(), 0).value();
    auto pad = pool.allocate(256, s).value();  // the block below starts past offset 0
    auto memory = pool.allocate(4 * kib, s).value();
    PVMM_CHECK_OK(s.synchronize());
    const auto record = memory.export_pointer().value();
    const std::size_t offset = static_cast<char*>(memory.data()) - static_cast<char*>(pad.data());
    // Widen every 64-bit field holding the block's size to the pool's end, as an attacker who knows the layout.
    auto widened = record;
    int fields = 0;
    for (std::size_t at = 0; at + 8 <= widened.data.size(); at += 8) {
      std::uint64_t v = 0;
      std::memcpy(&v, widened.data.data() + at, 8);
      if (v != 4 * kib) continue;
      v = capacity - offset;
      std::memcpy(widened.data.data() + at, &v, 8);
      ++fields;
    }
    REQUIRE(fields == 1);
    widened.size = capacity - offset;
    PVMM_CHECK_ERRC(imported.import_pointer(widened, s), errc::invalid_handle);
    auto narrowed = record;  // the outer size alone, either way
    narrowed.size = 256;
    PVMM_CHECK_ERRC(imported.import_pointer(narrowed, s), errc::invalid_handle);
    auto held = imported.import_pointer(record, s);
    PVMM_CHECK_OK(held);
    if (held) {
      CHECK(held->size() == 4 * kib);
      PVMM_CHECK_OK(held->free_async(s));
    }
    PVMM_CHECK_OK(memory.free_async(s));
    PVMM_CHECK_OK(pad.free_async(s));
    PVMM_CHECK_OK(s.synchronize());
  }
}  // TEST_SUITE
