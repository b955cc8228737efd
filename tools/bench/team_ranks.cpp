// The teams sections' rank processes (team_ranks.hpp): spawning them under a deadline, the child's dispatch, and
// the per-round summaries every teams table prints.
#include "team_ranks.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include <pvmm/pvmm.hpp>

extern char** environ;

namespace bench {
namespace {

// Reads the ranks' stdout until every writer closed it or `until` passes; false on the deadline.
bool read_until(int fd, std::string& text, clock_type::time_point until) {
  char buffer[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - clock_type::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    check(ready >= 0, "poll of the ranks' output");
    if (ready == 0) continue;  // the loop's head sees the deadline
    const ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    check(got >= 0, "read of the ranks' output");
    if (got == 0) return true;  // every rank closed its stdout (exited)
    text.append(buffer, static_cast<std::size_t>(got));
  }
}

}  // namespace

bool one_gpu_per_rank(int ranks) {
  if (pvmm::device_count().value_or(0) < ranks) return false;
  for (int a = 0; a < ranks; ++a)
    for (int b = 0; b < ranks; ++b)
      if (a != b && !pvmm::can_access_peer(a, b).value_or(false)) return false;
  return true;
}

int rank_device(int rank, int ranks) { return one_gpu_per_rank(ranks) ? rank : 0; }

std::string placement(const std::vector<int>& team_sizes) {
  std::string per_gpu, shared;
  for (int n : team_sizes) (one_gpu_per_rank(n) ? per_gpu : shared) += std::to_string(n) + ", ";
  const auto list = [](std::string s) { return s.substr(0, s.size() - 2); };
  if (shared.empty()) return "N processes, one per GPU";
  if (per_gpu.empty()) return "N processes time-sharing device 0";
  return fmt::format("N processes, one per GPU for N = {}, time-sharing device 0 for N = {} ({} GPUs here)",
                     list(per_gpu), list(shared), pvmm::device_count().value_or(0));
}

std::vector<int> team_sizes(const team_flags& flags) {
  if (!flags.ranks.empty()) return flags.ranks;
  return flags.quick ? std::vector<int>{2, 4} : std::vector<int>{2, 4, 8};
}

children_output run_children(const std::vector<std::vector<std::string>>& argvs, std::chrono::seconds limit) {
  children_output out;
  int out_pipe[2];
  check(::pipe2(out_pipe, O_CLOEXEC) == 0, "pipe2");
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);  // the child's results come back on its stdout
  std::vector<pid_t> pids;
  for (const auto& words : argvs) {
    std::vector<std::string> copy = words;
    std::vector<char*> argv;
    for (auto& w : copy) argv.push_back(w.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    if (::posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ) != 0) {
      out.not_started = words.front();
      for (pid_t started : pids) ::kill(started, SIGKILL);  // our own children, by pid
      for (pid_t started : pids) ::waitpid(started, nullptr, 0);
      break;
    }
    pids.push_back(pid);
  }
  ::posix_spawn_file_actions_destroy(&actions);
  ::close(out_pipe[1]);
  if (!out.not_started.empty()) {
    ::close(out_pipe[0]);
    return out;
  }
  out.in_time = read_until(out_pipe[0], out.text, clock_type::now() + limit);
  ::close(out_pipe[0]);
  if (!out.in_time)
    for (pid_t pid : pids) ::kill(pid, SIGKILL);  // our own children, by pid
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);  // each has exited or been killed: bounded
    out.statuses.push_back(status);
  }
  return out;
}

std::string run_rank_processes(const std::string& job, int n, const std::vector<std::string>& args,
                               std::chrono::seconds limit) {
  static int serial = 0;  // one meeting point per run (the bench's main thread only starts ranks)
  const std::string meeting = fmt::format("pvmm-bench-{}-{}-{}", job, ::getpid(), serial++);
  std::vector<std::vector<std::string>> argvs;
  for (int r = 0; r < n; ++r) {
    argvs.push_back({"/proc/self/exe", "--teams-rank", job, meeting, std::to_string(r), std::to_string(n)});
    argvs.back().insert(argvs.back().end(), args.begin(), args.end());
  }
  children_output ran = run_children(argvs, limit);
  check(ran.not_started.empty(), "posix_spawn of a rank");
  std::string failed;
  for (int r = 0; r < n; ++r) {
    const int status = ran.statuses[static_cast<std::size_t>(r)];
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      failed += fmt::format(" rank {} {} {};", r, WIFEXITED(status) ? "exited with" : "killed by signal",
                            WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
  }
  if (!ran.in_time || !failed.empty()) {
    std::fprintf(stderr, "pvmm-bench: FAIL: teams job %s with %d ranks:%s%s\n", job.c_str(), n,
                 ran.in_time ? "" : fmt::format(" not done within {} s (killed);", limit.count()).c_str(),
                 failed.c_str());
    std::exit(1);
  }
  return std::move(ran.text);
}

std::shared_ptr<pvmm::bootstrap> join_ranks(const rank_args& a) {
  auto ranks = pvmm::make_endpoint_bootstrap(a.meeting, a.rank, a.size, team_timeout);
  check(ranks.has_value(), "make_endpoint_bootstrap");
  return *ranks;
}

rank_team join_team(const rank_args& a, std::size_t slot, int channels) {
  rank_team t;
  t.ranks = join_ranks(a);
  pvmm::team_options to;
  to.device = rank_device(a.rank, a.size);
  to.timeout = team_timeout;
  auto team = pvmm::team::create(t.ranks, to);
  check(team.has_value(), "team::create");
  t.team = std::move(*team);
  pvmm::window_options wo;
  wo.size = slot;
  wo.signal_channels = channels;
  wo.timeout = team_timeout;
  auto window = pvmm::symmetric_window::create(t.team, wo);
  check(window.has_value(), "symmetric_window::create");
  t.window = std::move(*window);
  for (int r = 0; r < a.size; ++r) check(t.window.mapped(r), "a peer's slot mapped");
  return t;
}

void sync_point(pvmm::bootstrap& ranks) {
  check(ranks.barrier(pvmm::deadline_in(team_timeout)).has_value(), "bootstrap barrier");
}

void emit(const std::string& line) {
  check(::write(1, line.data(), line.size()) == static_cast<ssize_t>(line.size()), "write of a result line");
}

std::vector<int> side_order(int round, int salt, int sides) {
  std::mt19937 order(static_cast<std::mt19937::result_type>(12345 + 1000 * salt + round));
  std::vector<int> out(static_cast<std::size_t>(sides));
  for (int i = 0; i < sides; ++i) out[static_cast<std::size_t>(i)] = i;
  // Fisher-Yates by hand: std::shuffle's draws are the library's choice, and every rank must agree.
  for (int i = sides - 1; i > 0; --i)
    std::swap(out[static_cast<std::size_t>(i)], out[order() % static_cast<unsigned>(i + 1)]);
  return out;
}

bool pvmm_first(int round, int salt) { return side_order(round, salt, 2)[0] == 0; }

std::map<std::string, paired_rounds> slowest_per_round(const std::string& text) {
  std::map<std::string, std::map<int, std::pair<double, double>>> rounds;  // tag -> round -> slowest (pvmm, raw)
  std::istringstream lines(text);
  std::string tag;
  int rank = 0, round = 0;
  double pvmm_s = 0, raw_s = 0;
  while (lines >> tag >> rank >> round >> pvmm_s >> raw_s) {
    auto [at, fresh] = rounds[tag].try_emplace(round, pvmm_s, raw_s);
    if (!fresh) at->second = {std::max(at->second.first, pvmm_s), std::max(at->second.second, raw_s)};
  }
  std::map<std::string, paired_rounds> out;
  for (const auto& [t, by_round] : rounds)
    for (const auto& [r, times] : by_round) {
      out[t].pvmm.push_back(times.first);
      out[t].raw.push_back(times.second);
    }
  return out;
}

std::string latency_columns(const paired_rounds& p, double scale) {
  const auto cell = [scale](const std::vector<double>& v) {
    return fmt::format("{:9.2f} [{:.2f}-{:.2f}]", median(v) * scale, quantile(v, 0.25) * scale,
                       quantile(v, 0.75) * scale);
  };
  if (p.raw.empty() || p.raw.front() < 0) return fmt::format("{:<26} {:<26} {}", cell(p.pvmm), "-", "-");
  const comparison c = compare(p.pvmm, p.raw);
  return fmt::format("{:<26} {:<26} {:6.2f}x [{:.2f}-{:.2f}]{}", cell(p.pvmm), cell(p.raw), c.ratio, c.q1, c.q3,
                     c.within_noise() ? " within noise" : "");
}

int teams_rank_main(int argc, char** argv) {
  if (argc < 6) return 2;
  rank_args a;
  a.job = argv[2];
  a.meeting = argv[3];
  a.rank = std::stoi(argv[4]);
  a.size = std::stoi(argv[5]);
  a.rest.assign(argv + 6, argv + argc);
#if PVMM_BENCH_CUDA
  // The rank's device is the runtime's current one (its kernels, streams and cuMemAlloc use it); main() did not
  // touch device 0 for a rank, so a rank on device 1 makes no context there.
  CUDART(cudaSetDevice(rank_device(a.rank, a.size)));
  CUDART(cudaFree(nullptr));
#endif
  if (a.job == "create") return team_create_rank(a);
  if (a.job == "sync") return team_sync_rank(a);
  if (a.job == "allreduce") return team_allreduce_rank(a);
  return 2;
}

}  // namespace bench
