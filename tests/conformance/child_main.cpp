// The conformance suite's child process: exec'd fresh (a fork after GPU initialisation cannot use the GPU).
//   pvmm_conformance_child <socket> import-write <device> <size> <expected-seed> <write-seed>
// receives one fd over the socket, imports it, maps it for <device>, checks the parent's data, writes its
// own, and answers "ok" or the error.
#include <cstdlib>
#include <string>

#include <pvmm/pvmm.hpp>

#include "data.hpp"

int main(int argc, char** argv) {
  if (argc != 7 || std::string(argv[2]) != "import-write") return 2;
  const int sock = std::atoi(argv[1]);
  const int device = std::atoi(argv[3]);
  const std::size_t size = std::strtoull(argv[4], nullptr, 10);
  const auto expected_seed = static_cast<std::uint32_t>(std::atoi(argv[5]));
  const auto write_seed = static_cast<std::uint32_t>(std::atoi(argv[6]));
  auto answer = [&](const std::string& text) {
    (void)pvmm::ipc::send_fds(sock, nullptr, 0, text.data(), text.size());
    return text == "ok" ? 0 : 1;
  };
  try {
    auto message = pvmm::ipc::receive_fds(sock, 1, 64).value();
    if (message.fds.size() != 1) return answer("expected one fd");
    auto memory = pvmm::physical_allocation::import_posix_fd(message.fds[0].get(), size).value();
    message.fds.clear();  // closing the fd after import leaves the import intact
    auto range = pvmm::address_reservation::reserve(size).value();
    void* p = range.map_and_grant(0, memory, 0, size, {{pvmm::location::device(device), pvmm::access::read_write}})
                  .value();
    if (pvmm_test::read_words(p, size) != pvmm_test::pattern(size, expected_seed))
      return answer("the parent's data did not arrive");
    pvmm_test::write_words(p, pvmm_test::pattern(size, write_seed));
    return answer("ok");
  } catch (const pvmm::exception& e) {
    return answer(e.what());
  }
}
