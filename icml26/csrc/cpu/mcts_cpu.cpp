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
//                      algo, prm (15 floats), seeds (S ints), budgets (B ints))
//   -> (rec (S,B) int64, visits (S,B,A) int64, q (S,B,A) f64)
// prm, seeds and budgets are plain lists, not tensors: a batch-1 caller builds no tensor per call.
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

std::tuple<at::Tensor, at::Tensor, at::Tensor> mcts_tree_search(
    const at::Tensor& node_off, const at::Tensor& mean, const at::Tensor& scale, const at::Tensor& out_off,
    const at::Tensor& prob, const at::Tensor& child, int64_t noise_kind, double df, double gamma, int64_t algo,
    at::ArrayRef<double> prm, at::IntArrayRef seeds, at::IntArrayRef budgets) {
  for (const auto* x : {&node_off, &out_off, &child})
    TORCH_CHECK(x->dtype() == at::kLong && x->is_contiguous() && x->dim() == 1, "mcts_tree_search: int64 1-D contiguous tensors expected");
  for (const auto* x : {&mean, &scale, &prob})
    TORCH_CHECK(x->dtype() == at::kDouble && x->is_contiguous() && x->dim() == 1, "mcts_tree_search: float64 1-D contiguous tensors expected");
  TORCH_CHECK(prm.size() == 15, "mcts_tree_search: prm must have 15 entries");
  TORCH_CHECK(algo >= 0 && algo <= 6, "mcts_tree_search: algo must be in [0, 6]");
  Tree t{node_off.data_ptr<int64_t>(), out_off.data_ptr<int64_t>(), child.data_ptr<int64_t>(),
         mean.data_ptr<double>(), scale.data_ptr<double>(), prob.data_ptr<double>(),
         node_off.numel() - 1, mean.numel(), prob.numel(), static_cast<int>(noise_kind), df, gamma};
  TORCH_CHECK(t.n_nodes >= 1 && out_off.numel() == t.n_sa + 1 && child.numel() == t.n_out, "mcts_tree_search: inconsistent CSR arrays");
  const double* pv = prm.data();
  Prm p{pv[0], pv[1], pv[2], pv[3], pv[4], pv[5], pv[6], pv[7], pv[8], pv[9], pv[10], pv[11], pv[12], pv[13], pv[14]};
  const int64_t S = static_cast<int64_t>(seeds.size()), B = static_cast<int64_t>(budgets.size()), A = t.node_off[1] - t.node_off[0];
  auto rec = at::zeros({S, B}, at::kLong);
  auto vis = at::zeros({S, B, A}, at::kLong);
  auto q = at::zeros({S, B, A}, at::kDouble);
  const int64_t* sd = seeds.data();
  const int64_t* bd = budgets.data();
  int64_t* rp = rec.data_ptr<int64_t>();
  int64_t* vp = vis.data_ptr<int64_t>();
  double* qp = q.data_ptr<double>();
  int64_t max_b = 1;
  for (int64_t j = 0; j < B; ++j) {
    TORCH_CHECK(bd[j] >= 1, "mcts_tree_search: budgets must be >= 1");
    max_b = std::max(max_b, bd[j]);
  }
  const std::shared_ptr<const Tables> tbp = tables_for(max_b + 2);  // n(s) <= budget; MENTS and MDP-GapE read log(n + 1)
  const Tables& tb = *tbp;
#pragma omp parallel for schedule(dynamic, 1) if (S * B > 1)
  for (int64_t w = 0; w < S * B; ++w) {
    const int64_t i = w / B, j = w % B;
    Search s(t, p, static_cast<int>(algo), static_cast<uint64_t>(sd[i]), tb);
    rp[w] = s.run(bd[j]);
    const double* v = s.root_vals();
    for (int64_t a = 0; a < A; ++a) {
      vp[w * A + a] = s.N[a];
      qp[w * A + a] = v[a];
    }
  }
  return {rec, vis, q};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(icml26, m) {
  m.def("mcts_tree_search(Tensor node_off, Tensor mean, Tensor scale, Tensor out_off, Tensor prob, Tensor child, int noise_kind, float df, float gamma, int algo, float[] prm, int[] seeds, int[] budgets) -> (Tensor, Tensor, Tensor)");
  m.impl("mcts_tree_search", c10::DispatchKey::CPU, TORCH_FN(mcts_tree_search));
}
