// Hardening round 3 (issue 23): pool cases, each pinning a defect an attacker found.
#include "support.hpp"
