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

std::string run_rank_processes(const std::string& job, int n, const std::vector<std::string>& args,
                               std::chrono::seconds limit) {
  static int serial = 0;  // one meeting point per run (the bench's main thread only starts ranks)
  const std::string meeting = fmt::format("pvmm-bench-{}-{}-{}", job, ::getpid(), serial++);
  int out_pipe[2];
  check(::pipe2(out_pipe, O_CLOEXEC) == 0, "pipe2");
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);  // the rank's results come back on its stdout
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> words{"/proc/self/exe", "--teams-rank",    job,
                                   meeting,          std::to_string(r), std::to_string(n)};
    words.insert(words.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& w : words) argv.push_back(w.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    check(::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ) == 0, "posix_spawn of a rank");
    pids.push_back(pid);
  }
  ::posix_spawn_file_actions_destroy(&actions);
  ::close(out_pipe[1]);
  std::string text;
  const bool in_time = read_until(out_pipe[0], text, clock_type::now() + limit);
  ::close(out_pipe[0]);
  if (!in_time)
    for (pid_t pid : pids) ::kill(pid, SIGKILL);  // our own children, by pid
  std::string failed;
  for (int r = 0; r < n; ++r) {
    int status = 0;
    ::waitpid(pids[static_cast<std::size_t>(r)], &status, 0);  // each has exited or been killed: bounded
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      failed += fmt::format(" rank {} {} {};", r, WIFEXITED(status) ? "exited with" : "killed by signal",
                            WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
  }
  if (!in_time || !failed.empty()) {
    std::fprintf(stderr, "pvmm-bench: FAIL: teams job %s with %d ranks:%s%s\n", job.c_str(), n,
                 in_time ? "" : fmt::format(" not done within {} s (killed);", limit.count()).c_str(), failed.c_str());
    std::exit(1);
  }
  return text;
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
  to.device = 0;
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

bool pvmm_first(int round, int salt) {
  std::mt19937 order(static_cast<std::mt19937::result_type>(12345 + 1000 * salt + round));
  return (order() & 1) != 0;
}

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
  if (a.job == "create") return team_create_rank(a);
  if (a.job == "sync") return team_sync_rank(a);
  if (a.job == "allreduce") return team_allreduce_rank(a);
  return 2;
}

}  // namespace bench
