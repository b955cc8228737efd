// The C interface's registry, last-error record and status names (src/c_api/common.hpp).
#include "c_api/common.hpp"

#include "c_api/abi.hpp"

#include <cstdio>
#include <cstring>

namespace pvmm::c_api {
namespace {

/// This thread's last failure. Strings are kept as std::string; where they cannot be stored (memory ran out) or
/// must not be (the guard's out-of-memory path), the record holds static texts and a message formatted into a
/// buffer reserved ahead (thread_local storage: nothing is allocated).
struct last_error_record {
  pvmm_status code = pvmm_status_ok;
  std::string message, operation, arguments, detail, native_name, hint;
  long long native_code = 0;
  bool fixed = false;  // the texts below replace the strings
  const char* fixed_operation = "";
  const char* fixed_detail = "";
  char fixed_message[512] = {};
};
thread_local last_error_record last;

void clear_strings() noexcept {
  for (auto* s : {&last.message, &last.operation, &last.arguments, &last.detail, &last.native_name, &last.hint}) {
    s->clear();  // keeps the capacity: never allocates
  }
}

constexpr std::uint64_t index_bits = 32, generation_bits = 24;
constexpr std::uint64_t generation_mask = (std::uint64_t{1} << generation_bits) - 1;

std::uint64_t encode(kind type, std::uint32_t generation, std::size_t index) noexcept {
  return (std::uint64_t{static_cast<std::uint8_t>(type)} << (index_bits + generation_bits)) |
         ((std::uint64_t{generation} & generation_mask) << index_bits) | (std::uint64_t{index} + 1);
}

}  // namespace

const char* kind_name(kind k) noexcept {
  switch (k) {
#define PVMM_C_KIND_NAME(name, tag, what) \
  case kind::name:                        \
    return "pvmm_" #name;
    PVMM_C_HANDLE_LIST(PVMM_C_KIND_NAME)
#undef PVMM_C_KIND_NAME
  }
  return "an unknown handle type";
}

pvmm_status fail_static(errc code, const char* operation, const char* detail, const char* what) noexcept {
  last.code = static_cast<pvmm_status>(static_cast<int>(code));
  last.native_code = 0;
  clear_strings();
  last.fixed = true;
  last.fixed_operation = operation != nullptr ? operation : "";
  last.fixed_detail = detail != nullptr ? detail : "";
  std::snprintf(last.fixed_message, sizeof last.fixed_message, "%s(): %s: %s%s%s", last.fixed_operation,
                to_string(code), last.fixed_detail, what != nullptr ? ": " : "", what != nullptr ? what : "");
  return last.code;
}

pvmm_status fail(const error& e) noexcept {
  last.code = static_cast<pvmm_status>(static_cast<int>(e.code));
  last.native_code = e.native_code;
  try {
    last.fixed = false;
    last.message = e.message();
    last.operation = e.operation;
    last.arguments = e.arguments;
    last.detail = e.detail;
    last.native_name = e.native_name;
    last.hint = e.hint;
  } catch (...) {
    return fail_static(e.code, "", "memory ran out while recording an error (the code is right, the texts are lost)",
                       nullptr);
  }
  return last.code;
}

pvmm_status fail(errc code, const char* operation, std::string detail, std::string arguments) noexcept {
  try {
    error e;
    e.code = code;
    e.operation = operation;
    e.arguments = std::move(arguments);
    e.detail = std::move(detail);
    return fail(e);
  } catch (...) {
    return fail_static(code, operation,
                       "memory ran out while recording an error (the code is right, the texts are lost)", nullptr);
  }
}

pvmm_status null_argument(const char* operation, const char* name) noexcept {
  try {
    return fail(errc::invalid_argument, operation, std::string(name) + " is NULL");
  } catch (...) {
    return fail(errc::invalid_argument, operation, {});
  }
}

pvmm_status wrong_size(const char* operation, const char* type, std::size_t given, std::size_t first,
                       std::size_t known) noexcept {
  char text[320];
  std::snprintf(text, sizeof text,
                "%s.struct_size is %zu; this library reads %zu (the first published size) to %zu (set it with the "
                "struct's init function, PVMM_INIT(%s) or sizeof(%s))",
                type, given, first, known, type, type);
  return fail(errc::version_mismatch, operation, text);
}

void copy_text(char* to, std::size_t capacity, const std::string& text) noexcept {
  if (capacity == 0) return;
  const std::size_t n = text.size() < capacity - 1 ? text.size() : capacity - 1;
  std::memcpy(to, text.data(), n);
  to[n] = '\0';
}

registry& handles() {
  static registry* instance = new registry;  // never destroyed: handles may be released from atexit handlers
  return *instance;
}

std::uint64_t registry::add(kind type, entry_base* object) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::size_t index;
  if (!free_.empty()) {
    index = free_.back();
    free_.pop_back();
  } else {
    if (slots_.size() >= (std::uint64_t{1} << index_bits) - 2) throw std::bad_alloc();
    slots_.emplace_back();
    index = slots_.size() - 1;
  }
  slot& s = slots_[index];
  s.type = type;
  s.object = object;
  return encode(type, s.generation, index);
}

result<std::size_t> registry::locate(kind type, std::uint64_t id, const char* operation) {
  // Called with mutex_ held.
  error e;
  e.operation = operation;
  char text[200];
  const auto tag = static_cast<std::uint8_t>(id >> (index_bits + generation_bits));
  const std::uint64_t index_plus_one = id & ((std::uint64_t{1} << index_bits) - 1);
  const auto generation = static_cast<std::uint32_t>((id >> index_bits) & generation_mask);
  if (id == 0) {
    e.code = errc::invalid_handle;
    std::snprintf(text, sizeof text, "a null %s handle", kind_name(type));
  } else if (tag != static_cast<std::uint8_t>(type) && tag >= 1 && tag <= kind_count) {
    e.code = errc::invalid_handle;
    std::snprintf(text, sizeof text, "a %s handle where a %s handle belongs", kind_name(static_cast<kind>(tag)),
                  kind_name(type));
  } else if (tag != static_cast<std::uint8_t>(type) || index_plus_one == 0 || index_plus_one > slots_.size()) {
    e.code = errc::invalid_handle;
    std::snprintf(text, sizeof text, "0x%llx is not a %s handle pvmm gave out", static_cast<unsigned long long>(id),
                  kind_name(type));
  } else {
    const slot& s = slots_[index_plus_one - 1];
    if (s.object && s.type == type && s.generation == generation) return index_plus_one - 1;
    // Generations only grow (a slot is retired before its counter wraps): an older one was released.
    if (generation != 0 && generation < s.generation) {
      e.code = errc::already_released;
      std::snprintf(text, sizeof text, "the %s was released already (a freed or double-freed handle)", kind_name(type));
    } else {
      e.code = errc::invalid_handle;
      std::snprintf(text, sizeof text, "0x%llx is not a %s handle pvmm gave out", static_cast<unsigned long long>(id),
                    kind_name(type));
    }
  }
  e.detail = text;
  return e;
}

result<std::shared_ptr<void>> registry::find(kind type, std::uint64_t id, const char* operation) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto at = locate(type, id, operation);
  if (!at) return std::move(at).error();
  entry_base* e = slots_[*at].object;
  e->retain();
  // The deleter drops the reference; if the control block cannot be allocated, the constructor calls it.
  return std::shared_ptr<void>(e->object(), [e](void*) { e->drop(); });
}

result<taken> registry::take(kind type, std::uint64_t id, const char* operation) {
  entry_base* object = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto at = locate(type, id, operation);
    if (!at) return std::move(at).error();
    free_.reserve(free_.size() + 1);  // the only step that may throw, before anything changed
    slot& s = slots_[*at];
    object = std::exchange(s.object, nullptr);
    ++s.generation;
    // A slot whose generation would wrap is retired: an old handle could otherwise name a new object.
    if (s.generation <= generation_mask) free_.push_back(static_cast<std::uint32_t>(*at));
  }
  return taken(object);  // the owner is torn down outside the lock (it may call user code: a bootstrap)
}

}  // namespace pvmm::c_api

using namespace pvmm::c_api;

extern "C" {

int pvmm_c_api_version(void) noexcept { return PVMM_C_API_VERSION; }

const char* pvmm_status_name(int status) noexcept {
  switch (status) {
    case 0:
      return "ok";
#define PVMM_C_STATUS_NAME(name, value, meaning) \
  case value:                                    \
    return #name;
      PVMM_ERRC_LIST(PVMM_C_STATUS_NAME)
#undef PVMM_C_STATUS_NAME
    default:
      return "unknown";
  }
}

pvmm_status pvmm_last_error_code(void) noexcept { return last.code; }
const char* pvmm_last_error_message(void) noexcept { return last.fixed ? last.fixed_message : last.message.c_str(); }
const char* pvmm_last_error_operation(void) noexcept {
  return last.fixed ? last.fixed_operation : last.operation.c_str();
}
const char* pvmm_last_error_arguments(void) noexcept { return last.arguments.c_str(); }
const char* pvmm_last_error_detail(void) noexcept { return last.fixed ? last.fixed_detail : last.detail.c_str(); }
const char* pvmm_last_error_native_name(void) noexcept { return last.native_name.c_str(); }
long long pvmm_last_error_native_code(void) noexcept { return last.native_code; }
const char* pvmm_last_error_hint(void) noexcept { return last.hint.c_str(); }
void pvmm_clear_last_error(void) noexcept {
  last.code = pvmm_status_ok;
  last.native_code = 0;
  last.fixed = false;
  clear_strings();
}

}  // extern "C"
