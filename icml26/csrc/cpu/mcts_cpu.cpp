// Pure-exploration tree search on synthetic stochastic trees (icml26 mcts).
//
// The twin of icml26/ops/_ref/mcts.py (the test oracle): same counter-based random numbers,
// the same arithmetic in the same order (build with -ffp-contract=off), so recommendations
// and root statistics match the reference bit for bit (Gumbel's selection below the root
// decides its argmax with a fast exp and a certified margin, falling back to the reference's
// arithmetic on near ties: the same decisions, see mcts_search.h). Algorithms, equations and references
// are documented in icml26/methods/exploration/mcts.py.
//
// The search tree is the true tree (CSR arrays, see trees.py): statistics live on its
// (node, action) pairs; the children of (s, a) are summed in the order of their first visit,
// exactly as the reference's on-demand tree does.
//
// op: mcts_tree_search(node_off, mean, scale, out_off, prob, child, noise_kind, df, gamma,
//                      algo, prm (N_PRM = 16 floats, Params.FIELDS), seeds (S ints), budgets (B ints))
//   -> (rec (S,B) int64, visits (S,B,A) int64, q (S,B,A) f64)
// prm, seeds and budgets are plain lists, not tensors: a batch-1 caller builds no tensor per call.
// The same search is exported as a C function (icml26_mcts_tree_search, below) for ctypes.
#include <torch/library.h>
#include <torch/types.h>

#include <memory>
#include <mutex>

#include "mcts_search.h"

namespace {
using namespace icml26::mcts;

// The count tables, kept between calls (a batch-1 caller would otherwise rebuild them every
// search); grown to the largest budget seen. Immutable once built, so runs share them freely.
std::shared_ptr<const Tables> tables_for(int64_t n) {
  static std::mutex mu;
  static std::shared_ptr<const Tables> cached;
  std::lock_guard<std::mutex> lock(mu);
  if (!cached || static_cast<int64_t>(cached->lg.size()) < n + 1) cached = std::make_shared<const Tables>(std::max<int64_t>(n, 4096));
  return cached;
}

// One search per (seed, budget): rec (S*B) recommended root actions, vis (S*B*A) root visit
// counts, q (S*B*A) root statistics, row-major in (seed, budget). Budgets must be >= 1.
void run_searches(const Tree& t, const Prm& p, int algo, const int64_t* sd, int64_t S, const int64_t* bd, int64_t B,
                  int64_t* rp, int64_t* vp, double* qp) {
  const int64_t A = t.node_off[1] - t.node_off[0];
  int64_t max_b = 1;
  for (int64_t j = 0; j < B; ++j) max_b = std::max(max_b, bd[j]);
  const std::shared_ptr<const Tables> tbp = tables_for(max_b + 2);  // n(s) <= budget; MENTS and MDP-GapE read log(n + 1)
  const Tables& tb = *tbp;
  auto one = [&](int64_t w) {
    const int64_t i = w / B, j = w % B;
    Search s(t, p, algo, static_cast<uint64_t>(sd[i]), tb);
    rp[w] = s.run(bd[j]);
    const double* v = s.root_vals();
    for (int64_t a = 0; a < A; ++a) {
      vp[w * A + a] = s.N[a];
      qp[w * A + a] = v[a];
    }
  };
  if (S * B == 1) {  // batch 1: no parallel region to enter
    one(0);
    return;
  }
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t w = 0; w < S * B; ++w) one(w);
}

// The checks shared by both entry points; nullptr when the arguments are consistent.
const char* check_args(const Tree& t, int64_t algo, int64_t n_prm, const int64_t* bd, int64_t B) {
  if (n_prm != N_PRM) return "mcts_tree_search: prm must have 16 entries";
  if (algo < 0 || algo > 6) return "mcts_tree_search: algo must be in [0, 6]";
  if (t.n_nodes < 1 || t.node_off[0] != 0 || t.node_off[t.n_nodes] != t.n_sa || t.out_off[t.n_sa] != t.n_out)
    return "mcts_tree_search: inconsistent CSR arrays";
  for (int64_t j = 0; j < B; ++j)
    if (bd[j] < 1) return "mcts_tree_search: budgets must be >= 1";
  return nullptr;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> mcts_tree_search(
    const at::Tensor& node_off, const at::Tensor& mean, const at::Tensor& scale, const at::Tensor& out_off,
    const at::Tensor& prob, const at::Tensor& child, int64_t noise_kind, double df, double gamma, int64_t algo,
    at::ArrayRef<double> prm, at::IntArrayRef seeds, at::IntArrayRef budgets) {
  for (const auto* x : {&node_off, &out_off, &child})
    TORCH_CHECK(x->dtype() == at::kLong && x->is_contiguous() && x->dim() == 1, "mcts_tree_search: int64 1-D contiguous tensors expected");
  for (const auto* x : {&mean, &scale, &prob})
    TORCH_CHECK(x->dtype() == at::kDouble && x->is_contiguous() && x->dim() == 1, "mcts_tree_search: float64 1-D contiguous tensors expected");
  TORCH_CHECK(node_off.numel() >= 2 && out_off.numel() == mean.numel() + 1 && scale.numel() == mean.numel() && child.numel() == prob.numel(),
              "mcts_tree_search: inconsistent CSR arrays");
  Tree t{node_off.data_ptr<int64_t>(), out_off.data_ptr<int64_t>(), child.data_ptr<int64_t>(),
         mean.data_ptr<double>(), scale.data_ptr<double>(), prob.data_ptr<double>(),
         node_off.numel() - 1, mean.numel(), prob.numel(), static_cast<int>(noise_kind), df, gamma};
  const int64_t S = static_cast<int64_t>(seeds.size()), B = static_cast<int64_t>(budgets.size());
  const char* err = check_args(t, algo, static_cast<int64_t>(prm.size()), budgets.data(), B);
  TORCH_CHECK(err == nullptr, err);
  const double* pv = prm.data();
  Prm p{pv[0], pv[1], pv[2], pv[3], pv[4], pv[5], pv[6], pv[7], pv[8], pv[9], pv[10], pv[11], pv[12], pv[13], pv[14], pv[15]};
  const int64_t A = t.node_off[1] - t.node_off[0];
  auto rec = at::empty({S, B}, at::kLong);
  auto vis = at::empty({S, B, A}, at::kLong);
  auto q = at::empty({S, B, A}, at::kDouble);
  run_searches(t, p, static_cast<int>(algo), seeds.data(), S, budgets.data(), B, rec.data_ptr<int64_t>(), vis.data_ptr<int64_t>(), q.data_ptr<double>());
  return {rec, vis, q};
}

}  // namespace

// The same search for callers that bypass torch's dispatcher (icml26/ops/mcts.py calls it
// through ctypes: a batch-1 search of 2000 simulations takes ~0.3 ms, of which the
// dispatcher's argument boxing would be ~11 us). Arrays as in the op; n_nodes = len(node_off) - 1,
// n_sa = len(mean), n_out = len(prob); outputs rec (S*B), vis and q (S*B*A, A = root actions),
// written in place. Returns 0, or -1 with nothing written when the arguments are inconsistent.
extern "C" int icml26_mcts_tree_search(const int64_t* node_off, const double* mean, const double* scale, const int64_t* out_off,
                                       const double* prob, const int64_t* child, int64_t n_nodes, int64_t n_sa, int64_t n_out,
                                       int64_t noise_kind, double df, double gamma, int64_t algo, const double* prm,
                                       const int64_t* seeds, int64_t S, const int64_t* budgets, int64_t B,
                                       int64_t* rec, int64_t* vis, double* q) {
  if (n_nodes < 1 || S < 0 || B < 0) return -1;
  Tree t{node_off, out_off, child, mean, scale, prob, n_nodes, n_sa, n_out, static_cast<int>(noise_kind), df, gamma};
  if (check_args(t, algo, N_PRM, budgets, B) != nullptr) return -1;
  Prm p{prm[0], prm[1], prm[2], prm[3], prm[4], prm[5], prm[6], prm[7], prm[8], prm[9], prm[10], prm[11], prm[12], prm[13], prm[14], prm[15]};
  run_searches(t, p, static_cast<int>(algo), seeds, S, budgets, B, rec, vis, q);
  return 0;
}

TORCH_LIBRARY_FRAGMENT(icml26, m) {
  m.def("mcts_tree_search(Tensor node_off, Tensor mean, Tensor scale, Tensor out_off, Tensor prob, Tensor child, int noise_kind, float df, float gamma, int algo, float[] prm, int[] seeds, int[] budgets) -> (Tensor, Tensor, Tensor)");
  m.impl("mcts_tree_search", c10::DispatchKey::CPU, TORCH_FN(mcts_tree_search));
}
