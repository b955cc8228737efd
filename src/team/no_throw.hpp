// The team layer's public calls run their body under no_throw: no exception leaves the library (memory running
// out anywhere in a step is errc::out_of_memory, as in the bootstrap's calls). The one wrapper is src/core's.
#pragma once

#include "core/no_throw.hpp"
