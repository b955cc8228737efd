// Sending a pool export between processes: its fd and its identity in one SCM_RIGHTS message.
#include <cstring>

#include <fmt/format.h>

#include <pvmm/memory_pool.hpp>

#include "core/operation.hpp"
#include "core/propagate.hpp"

namespace pvmm::ipc {
namespace {

constexpr char magic[8] = {'p', 'v', 'm', 'm', 'p', 'o', 'o', 'l'};
constexpr std::uint32_t version = 1;

struct wire {  // the payload, in this machine's byte order (both ends are on one host)
  char magic[8];
  std::uint32_t version;
  std::uint32_t reserved;
  std::uint8_t id[16];
};
static_assert(sizeof(wire) == 32, "the payload's layout is fixed");

}  // namespace

status send_pool(int socket, const pool_export& pool, std::chrono::milliseconds timeout) {
  auto args = [&] { return fmt::format("socket={}, fd={}", socket, pool.fd.get()); };
  const detail::operation op{"pvmm::ipc::send_pool", args};
  if (!pool.fd.valid()) return op.fail(errc::invalid_handle, "the pool_export holds no fd");
  if (pool.id == pool_id{}) return op.fail(errc::invalid_handle, "the pool_export has no pool identity");
  wire w{};
  std::memcpy(w.magic, magic, sizeof magic);
  w.version = version;
  std::memcpy(w.id, pool.id.bytes.data(), sizeof w.id);
  const int fd = pool.fd.get();
  return op.step("send_fds", [&] { return send_fds(socket, &fd, 1, &w, sizeof w, timeout); });
}

result<pool_export> receive_pool(int socket, std::chrono::milliseconds timeout, const peer_rule* rule) {
  auto args = [&] { return fmt::format("socket={}", socket); };
  const detail::operation op{"pvmm::ipc::receive_pool", args};
  PVMM_TRY_ASSIGN(message,
                  op.step("receive_exactly", [&] { return receive_exactly(socket, 1, sizeof(wire), timeout, rule); }));
  wire w{};
  if (message.payload.size() != sizeof w)
    return op.fail(errc::protocol_error,
                   fmt::format("a pool message holds {} bytes, this one {}", sizeof w, message.payload.size()));
  std::memcpy(&w, message.payload.data(), sizeof w);
  if (std::memcmp(w.magic, magic, sizeof magic) != 0)
    return op.fail(errc::protocol_error, "the message is not a pool export (send it with ipc::send_pool)");
  if (w.version != version)
    return op.fail(errc::protocol_error,
                   fmt::format("pool message version {} (this pvmm reads {})", w.version, version));
  pool_export out;
  std::memcpy(out.id.bytes.data(), w.id, sizeof w.id);
  if (out.id == pool_id{}) return op.fail(errc::protocol_error, "the pool message carries no pool identity");
  out.fd = std::move(message.fds[0]);
  return out;
}

}  // namespace pvmm::ipc
