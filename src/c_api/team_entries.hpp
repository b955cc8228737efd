// What the C interface's bootstrap and team handles hold (src/c_api/bootstrap.cpp, team.cpp).
#pragma once

#include <memory>

#include <pvmm/bootstrap.hpp>

namespace pvmm::c_api {

/// What a pvmm_bootstrap handle holds: the shared bootstrap a team also refers to.
struct bootstrap_entry {
  std::shared_ptr<pvmm::bootstrap> ranks;
};

}  // namespace pvmm::c_api
