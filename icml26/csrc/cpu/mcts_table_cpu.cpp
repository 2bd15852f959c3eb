// Tree search over a gymnasium transition table (icml26 mcts on FrozenLake, Taxi, CliffWalking,
// any env.unwrapped.P): C entry points called through ctypes by icml26/ops/mcts_table.py.
// The search itself is mcts_table.h, the twin of icml26/ops/_ref/mcts.py::Search on
// gym_models.TableModel (same random numbers, same arithmetic: bit-for-bit root statistics).
//
// Table arrays (all contiguous): off (S A + 1) int64 entry offsets of (s, a) = s A + a,
// next / done (n_entries) int64, prob / rew (n_entries) float64, nout (S A) int64 distinct next
// states of (s, a); noise (S A) float64 reward-noise std of (s, a), or null. prm: the 16 floats
// of Params.FIELDS.
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "mcts_table.h"

namespace {
using namespace icml26::mcts_table;

constexpr size_t KEEP_BYTES = size_t(1) << 28;  // storage kept for reuse: up to 256 MB per store

// Storage of freed handles, reused by the next ones (an episode opens a search per move without
// reuse: their memory is not faulted in afresh each time)
std::mutex pool_mu;
std::vector<std::unique_ptr<Store>> pool;

std::unique_ptr<Store> take_store() {
  std::lock_guard<std::mutex> lock(pool_mu);
  if (pool.empty()) return std::make_unique<Store>();
  auto s = std::move(pool.back());
  pool.pop_back();
  return s;
}

void give_store(std::unique_ptr<Store> s) {
  std::lock_guard<std::mutex> lock(pool_mu);
  if (pool.size() < 4) {
    s->trim(KEEP_BYTES);
    pool.push_back(std::move(s));
  }
}

struct Handle {
  Table t;
  Prm p;
  std::unique_ptr<Store> store;
  Search s;
  Handle(const Table& t_, const Prm& p_, int algo, uint64_t seed, int64_t s0, bool keep)
      : t(t_), p(p_), store(take_store()), s(t, p, algo, seed, s0, keep, *store) {}
  ~Handle() { give_store(std::move(store)); }
};

// the batch searches' storage, one per thread, kept between searches (no fresh pages per search)
Store& thread_store() {
  static thread_local Store st;
  return st;
}

Prm make_prm(const double* v) {
  return Prm{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11], v[12], v[13], v[14], v[15]};
}

bool bad(const Table& t, int64_t algo, int64_t s0) {
  return t.S < 1 || t.A < 1 || algo < 0 || algo > 6 || s0 < 0 || s0 >= t.S || t.off[0] != 0;
}
}  // namespace

// One fresh search per (seed, budget) from env state s0: rec (S*B) recommended root actions,
// vis / q (S*B*A) root visit counts and root statistics, row-major in (seed, budget).
// Returns 0; -1 (nothing written) on inconsistent arguments; -2 when memory ran out.
extern "C" int icml26_mcts_table_search(int64_t n_states, int64_t n_actions, const int64_t* off, const int64_t* next, const int64_t* done,
                                        const int64_t* nout, const double* prob, const double* rew, double gamma, const double* noise, int64_t algo,
                                        const double* prm, const int64_t* seeds, int64_t S, const int64_t* budgets, int64_t B, int64_t s0,
                                        int64_t* rec, int64_t* vis, double* q) {
  const Table t{n_states, n_actions, off, next, done, nout, prob, rew, gamma, noise};
  if (bad(t, algo, s0) || S < 0 || B < 0) return -1;
  for (int64_t j = 0; j < B; ++j)
    if (budgets[j] < 1) return -1;
  const Prm p = make_prm(prm);
  const int64_t A = n_actions;
  int err = 0;
#pragma omp parallel for schedule(dynamic, 1) if (S * B > 1)
  for (int64_t w = 0; w < S * B; ++w) {
    try {
      const int64_t i = w / B, j = w % B;
      Search s(t, p, static_cast<int>(algo), static_cast<uint64_t>(seeds[i]), s0, false, thread_store());
      rec[w] = s.run(budgets[j]);
      s.root_stats(vis + w * A, q + w * A);
      thread_store().trim(KEEP_BYTES);
    } catch (const std::bad_alloc&) {
      thread_store().trim(0);
#pragma omp atomic write
      err = -2;
    }
  }
  return err;
}

// A search kept between calls (episodes: plan, act, re-root). nullptr on bad arguments or
// memory exhaustion. The table arrays must outlive the handle.
extern "C" void* icml26_mcts_table_new(int64_t n_states, int64_t n_actions, const int64_t* off, const int64_t* next, const int64_t* done,
                                       const int64_t* nout, const double* prob, const double* rew, double gamma, const double* noise, int64_t algo,
                                       const double* prm, int64_t seed, int64_t s0, int64_t keep_cuts) {
  const Table t{n_states, n_actions, off, next, done, nout, prob, rew, gamma, noise};
  if (bad(t, algo, s0)) return nullptr;
  try {
    return new Handle(t, make_prm(prm), static_cast<int>(algo), static_cast<uint64_t>(seed), s0, keep_cuts != 0);
  } catch (const std::exception&) {
    return nullptr;
  }
}

// budget more simulations at the current root; the recommended action, or -2 (memory)
extern "C" int64_t icml26_mcts_table_run(void* h, int64_t budget) {
  if (budget < 1) return -1;
  try {
    return static_cast<Handle*>(h)->s.run(budget);
  } catch (const std::bad_alloc&) {
    return -2;
  }
}

// Search.reroot: 1 when the child of (a, next state outcome) became the root, 0 otherwise (nothing
// changed), -2 when memory ran out while expanding the cut slots
extern "C" int icml26_mcts_table_reroot(void* h, int64_t a, int64_t outcome) {
  try {
    return static_cast<Handle*>(h)->s.reroot(a, outcome) ? 1 : 0;
  } catch (const std::bad_alloc&) {
    return -2;
  }
}

// the root's visit counts and statistics (A each); returns the number of nodes allocated
extern "C" int64_t icml26_mcts_table_stats(void* h, int64_t* vis, double* q) {
  const Search& s = static_cast<Handle*>(h)->s;
  s.root_stats(vis, q);
  return static_cast<int64_t>(s.st.nodes.size());
}

extern "C" void icml26_mcts_table_free(void* h) { delete static_cast<Handle*>(h); }
