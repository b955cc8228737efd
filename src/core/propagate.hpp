// The private propagation macros of src/ and the backends: return a pvmm::result's error from the enclosing
// function.
#pragma once

#include <utility>

/// Returns from the enclosing function with the error of `expr` (a pvmm::result) if it holds one.
#define PVMM_TRY(expr)                                                              \
  do {                                                                              \
    if (auto&& pvmm_try_ = (expr); !pvmm_try_) return std::move(pvmm_try_).error(); \
  } while (0)

/// Declares `var` holding the value of `expr`, or returns its error from the enclosing function.
#define PVMM_TRY_ASSIGN(var, expr)                                       \
  auto var##_pvmm_result_ = (expr);                                      \
  if (!var##_pvmm_result_) return std::move(var##_pvmm_result_).error(); \
  auto var = std::move(*var##_pvmm_result_)
