// pvmm/pvmm.hpp - everything.
#pragma once

#include <pvmm/allocation.hpp>
#include <pvmm/descriptor.hpp>
#include <pvmm/device.hpp>
#include <pvmm/diagnostics.hpp>
#include <pvmm/error.hpp>
#include <pvmm/exported_fd.hpp>
#include <pvmm/growable_buffer.hpp>
#include <pvmm/ipc.hpp>
#include <pvmm/multicast.hpp>
#include <pvmm/reservation.hpp>
#include <pvmm/types.hpp>
