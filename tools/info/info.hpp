// pvmm-info's parts: the capability table (text and JSON), the self-check and the exec'd children it talks to.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <pvmm/pvmm.hpp>

namespace pvmm_info {

/// "2 MiB", "4 KiB", "1.5 GiB".
std::string bytes(std::size_t n);
/// `text` as a JSON string literal, quotes included, with every character JSON requires escaped.
std::string json_string(std::string_view text);

// ---- capabilities.cpp ----

/// The text table of every device.
void print_devices(int count);
/// The backend as a JSON object.
std::string backend_json(const pvmm::backend_info& b);
/// Every device as a JSON array of objects.
std::string devices_json(int count);

// ---- self-check ----

struct outcome {
  enum kind { pass, fail, not_supported } what;
  std::string detail;
};
struct check_result {
  std::string name;
  outcome result;
};

/// not_supported and not_permitted count as not supported; anything else fails.
outcome from_error(const pvmm::error& e);
/// Runs every check on device 0, in order, each once.
std::vector<check_result> self_check();
/// The results as text; the return is the process's exit status (1 when any failed).
int print_self_check(const std::vector<check_result>& results);
/// The results as a JSON array of {name, result, detail}.
std::string self_check_json(const std::vector<check_result>& results);

/// Device memory that device 0 and its streams can use (a VMM mapping, or a pool allocation where VMM is missing):
/// the feature checks copy through it.
struct device_scratch {
  void* data = nullptr;
  std::size_t size = 0;
};

// self_check_features.cpp: one check each, a real round trip (results as outcome; exceptions are caught by the
// caller).
outcome check_streams(const device_scratch& memory);
outcome check_pool(const pvmm::capabilities& caps);
outcome check_pool_sharing(const pvmm::capabilities& caps);
outcome check_managed(const pvmm::capabilities& caps);
outcome check_pinned(const pvmm::capabilities& caps, const device_scratch& memory);
outcome check_registration(const pvmm::capabilities& caps, const device_scratch& memory);

// ---- self_check_children.cpp ----

/// An exec'd copy of this program in a child mode, with one end of a socket pair.
struct child {
  int socket = -1;
  int pid = -1;
};
/// Starts `/proc/self/exe <mode> <socket> <args...>`; outcome fail (with why) when it cannot.
outcome spawn_child(const std::string& mode, const std::vector<std::string>& args, child& out);
/// Waits (up to a minute) for the child's one-line answer, closes the socket and reaps the child: pass when the
/// answer is "ok".
outcome finish_child(child& c);
/// Child mode --serve-import: receive one fd, import, map, check the parent's bytes, write ours, answer.
int serve_import(int sock, std::size_t size);
/// Child mode --serve-pool-import: receive a pool and one pointer, read the parent's bytes, write ours, free, answer.
int serve_pool_import(int sock);

/// The byte at `i` of a check's pattern `seed`: varies along the buffer, so a misplaced copy shows.
inline unsigned char pattern_byte(std::size_t i, unsigned seed) {
  return static_cast<unsigned char>((i * 131 + seed * 29 + (i >> 12)) & 0xFF);
}
std::vector<unsigned char> pattern(std::size_t size, unsigned seed);
/// Empty when `data` holds pattern `seed`; else where it first differs.
std::string compare_pattern(const unsigned char* data, std::size_t size, unsigned seed);

}  // namespace pvmm_info
