// pvmm-bench teams --compare torch (team_torch.hpp): runs tools/bench/torch_symm_mem.py and reads its lines.
#include "team_torch.hpp"

#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include <fmt/format.h>

#include <pvmm/pvmm.hpp>

#include "team_ranks.hpp"

#ifndef PVMM_BENCH_TORCH_SCRIPT
#define PVMM_BENCH_TORCH_SCRIPT "tools/bench/torch_symm_mem.py"
#endif

namespace bench {
namespace {

std::string plan_arg(const torch_plan& plan) {
  std::string s;
  for (const auto& [bytes, k] : plan) s += fmt::format("{}{}:{}", s.empty() ? "" : ",", bytes, k);
  return s;
}

// Lines "<kind> <N> <bytes> <rank> <index> <seconds>" into (N, bytes) -> index -> the slowest rank.
void keep_slowest(std::map<std::pair<int, std::size_t>, std::map<int, double>>& into, std::istringstream& fields) {
  int n = 0, rank = 0, index = 0;
  std::size_t bytes = 0;
  double seconds = 0;
  if (!(fields >> n >> bytes >> rank >> index >> seconds)) return;
  double& slowest = into[{n, bytes}].try_emplace(index, seconds).first->second;
  slowest = std::max(slowest, seconds);
}

}  // namespace

std::string torch_results::missing(int n) const {
  if (!skipped.empty()) return skipped;
  if (auto at = skipped_n.find(n); at != skipped_n.end()) return at->second;
  return "";
}

torch_results run_torch(const std::vector<int>& team_sizes, const torch_plan& create, const torch_plan& allreduce,
                        int rounds) {
  torch_results out;
  if (pvmm::query_backend().name == std::string("host")) {
    out.skipped = "the host backend: PyTorch SymmetricMemory runs on GPUs";
    return out;
  }
  std::string ranks;
  for (int n : team_sizes) {
    if (!one_gpu_per_rank(n)) {
      out.skipped_n[n] = fmt::format("needs one GPU per rank, peers reachable ({} ranks, {} GPUs here)", n,
                                     pvmm::device_count().value_or(0));
      continue;
    }
    ranks += fmt::format("{}{}", ranks.empty() ? "" : ",", n);
  }
  if (ranks.empty()) return out;
  const char* python = std::getenv("PVMM_PYTHON");
  // The script bounds each team size itself (it kills its ranks past their share); this bounds the script.
  const auto limit = std::chrono::seconds(300);
  std::vector<std::string> argv{python != nullptr && *python != '\0' ? python : "python3",
                                PVMM_BENCH_TORCH_SCRIPT,
                                "--ranks",
                                ranks,
                                "--rounds",
                                std::to_string(rounds),
                                "--deadline",
                                std::to_string(limit.count() - 20)};
  if (!create.empty()) argv.insert(argv.end(), {"--create", plan_arg(create)});
  if (!allreduce.empty()) argv.insert(argv.end(), {"--allreduce", plan_arg(allreduce)});
  const children_output ran = run_children({argv}, limit);
  if (!ran.not_started.empty()) {
    out.skipped = "no Python to run " + std::string(PVMM_BENCH_TORCH_SCRIPT) + " (" + ran.not_started +
                  " could not start; $PVMM_PYTHON names another)";
    return out;
  }
  std::map<std::pair<int, std::size_t>, std::map<int, double>> create_runs, allreduce_runs;
  std::string failed;
  std::istringstream lines(ran.text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string kind;
    fields >> kind;
    std::string rest;
    std::getline(fields >> std::ws, rest);
    std::istringstream values(rest);
    if (kind == "[pvmm-skip]") {
      out.skipped = rest;
    } else if (kind == "skip") {
      int n = 0;
      values >> n;
      std::getline(values >> std::ws, out.skipped_n[n]);
    } else if (kind == "version") {
      out.version = rest;
    } else if (kind == "create") {
      keep_slowest(create_runs, values);
    } else if (kind == "allreduce") {
      keep_slowest(allreduce_runs, values);
    } else if (kind == "fail") {
      failed += " " + rest + ";";
    }
  }
  const int status = ran.statuses.empty() ? 0 : ran.statuses.front();
  if (!ran.in_time || !WIFEXITED(status) || WEXITSTATUS(status) != 0 || !failed.empty()) {
    std::fprintf(stderr, "pvmm-bench: FAIL: %s:%s%s exit %s\n", PVMM_BENCH_TORCH_SCRIPT, failed.c_str(),
                 ran.in_time ? "" : fmt::format(" not done within {} s (killed);", limit.count()).c_str(),
                 WIFEXITED(status) ? std::to_string(WEXITSTATUS(status)).c_str() : "by a signal");
    std::exit(1);
  }
  for (const auto& [key, by_index] : create_runs)
    for (const auto& [index, seconds] : by_index) out.create[key].push_back(seconds);
  for (const auto& [key, by_index] : allreduce_runs)
    for (const auto& [index, seconds] : by_index) out.allreduce[key].push_back(seconds);
  return out;
}

}  // namespace bench
