// The one "unsupported" answer a backend gives for a feature it lacks: it names the backend and the feature.
#pragma once

#include <fmt/format.h>

#include "backend/device.hpp"

namespace pvmm::detail::backend {

inline error unsupported_feature(const char* feature, const char* hint = "") {
  return make_error(errc::not_supported, fmt::format("the {} backend does not support {}", traits.name, feature), hint);
}

}  // namespace pvmm::detail::backend
