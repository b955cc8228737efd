// Error records: code names (from PVMM_ERRC_LIST), messages, and the helpers that build them.
#include <cstring>

#include <fmt/format.h>

#include <pvmm/error.hpp>

#include "backend/error_helpers.hpp"
#include "core/fd_budget.hpp"
#include "core/operation.hpp"

namespace pvmm {

const char* to_string(errc code) noexcept {
  switch (code) {
#define PVMM_ERRC_NAME(name, value, meaning) \
  case errc::name:                           \
    return #name;
    PVMM_ERRC_LIST(PVMM_ERRC_NAME)
#undef PVMM_ERRC_NAME
  }
  return "unknown_error";
}

std::string error::message() const {
  std::string out = fmt::format("{}({}): {}", operation.empty() ? "pvmm" : operation, arguments, to_string(code));
  if (!detail.empty()) out += fmt::format(": {}", detail);
  if (!native_name.empty()) out += fmt::format(" [{} = {}]", native_name, native_code);
  if (!hint.empty()) out += fmt::format(" (hint: {})", hint);
  return out;
}

namespace detail {

error make_error(errc code, std::string detail, std::string hint) {
  error e;
  e.code = code;
  e.detail = std::move(detail);
  e.hint = std::move(hint);
  return e;
}

error errno_error(errc code, const char* call, int err, std::string context) {
  // Whatever the caller would have called it: running out of fds is said as such (invariant 19).
  if (is_fd_exhaustion(err)) return fd_exhaustion_error(call, err, context);
  error e;
  e.code = code;
  e.detail = context.empty() ? fmt::format("{} failed: {}", call, std::strerror(err))
                             : fmt::format("{}: {} failed: {}", context, call, std::strerror(err));
  const char* name = strerrorname_np(err);
  e.native_name = name ? name : "errno";
  e.native_code = err;
  return e;
}

error operation::fail(errc code, std::string detail, std::string hint) const {
  error e = make_error(code, std::move(detail), std::move(hint));
  e.operation = name_;
  e.arguments = args_();
  return e;
}

error operation::wrap(error e) const {
  if (e.operation.empty()) {  // a step's error (backend, system call): this operation's own
    e.operation = name_;
    e.arguments = args_();
  } else if (e.operation != name_) {
    // An inner operation's error keeps its name with its own arguments (none is none: filling them in with
    // ours would show our arguments under its name); where it happened inside follows the detail.
    e.detail += fmt::format("{}(in {}({}))", e.detail.empty() ? "" : " ", name_, args_());
  }
  return e;
}

error operation::take_over(error e) const {
  e.operation = name_;
  e.arguments = args_();
  return e;
}

}  // namespace detail
}  // namespace pvmm
