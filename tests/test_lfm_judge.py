"""The independent judge of sample-lfm (core/data/judges.py): built by the project, cached under
a name, loaded by name or file; sample-lfm reports judge FID / precision / recall beside the
in-house feature net's, and says how to build the judge when it is missing."""

import json

import pytest

from conftest import need_debian


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    need_debian("dataset-fashion-mnist")
    from icml26.core.data import judges
    from icml26.methods.lfm import train as T

    d = tmp_path_factory.mktemp("judge")
    jf = judges.build_judge("fmnist-cnn-bn", steps=3, out=d / "judge.safetensors")
    cfg = T.Config(train_size=128, vae_steps=2, feature_steps=2, steps=2, model="small", batch_size=16, log_every=1)
    recs = list(T.run(cfg, out=d / "run"))
    assert recs[-1]["diverged"] is False
    return d, jf


@pytest.mark.slow
def test_judge_file_round_trip(tiny):
    import torch

    from icml26.core.data import judges

    _, jf = tiny
    net, meta = judges.load_judge(str(jf))
    assert meta["name"] == "fmnist-cnn-bn" and meta["train_images"] == 60000 and meta["feature_dim"] == 256
    assert 0.0 <= meta["test_accuracy"] <= 1.0
    x = torch.rand(5, 1, 28, 28)
    f = net.features(x)
    assert f.shape == (5, 256)
    net2, _ = judges.load_judge(str(jf))
    assert torch.equal(net2.features(x), f)  # eval mode (batch-norm running statistics): deterministic


def test_missing_judge_names_the_build_command(tmp_path, monkeypatch):
    from icml26.core.data import judges
    from icml26.core.errors import InputError, MissingDataError

    monkeypatch.setenv("ICML26_CACHE", str(tmp_path))
    with pytest.raises(MissingDataError, match="python -m icml26.core.data.judges fmnist-cnn-bn"):
        judges.load_judge("fmnist-cnn-bn")
    (tmp_path / "x.safetensors").write_bytes(b"not a judge")
    with pytest.raises(InputError):
        judges.load_judge(str(tmp_path / "x.safetensors"))


@pytest.mark.slow
def test_sample_reports_both_judges(tiny, tmp_path, monkeypatch):
    from icml26.methods.lfm import sample as S

    d, jf = tiny
    cfg = S.SampleConfig(num_samples=16, steps=2, reference_size=64, bootstrap=5, judge=str(jf))
    recs = list(S.run(cfg, fine=str(d / "run")))
    ref = next(r for r in recs if r["kind"] == "reference")
    assert ref["judge"]["name"] == "fmnist-cnn-bn" and ref["judge"]["train_images"] == 60000
    res = next(r for r in recs if r["kind"] == "result")
    for k in ("judge_fid", "judge_precision", "judge_recall", "judge_fid_ci", "fid_ci"):
        assert k in res, k
    assert res["judge_fid"] != res["fid"] and res["judge_fid_ci"][0] <= res["judge_fid"] <= res["judge_fid_ci"][1]
    assert "pixel_unmatched_similarity" in res and "latent_unmatched_similarity" in res
    summary = recs[-1]
    assert "best_judge_fid" in summary and summary["judge"]["name"] == "fmnist-cnn-bn"
    # auto with no judge built: sampling goes on, and the record says how to build it
    monkeypatch.setenv("ICML26_CACHE", str(tmp_path))
    recs = list(S.run(S.SampleConfig(num_samples=8, steps=2, reference_size=32, bootstrap=0), fine=str(d / "run")))
    ref = next(r for r in recs if r["kind"] == "reference")
    assert ref["judge"]["name"] is None and "python -m icml26.core.data.judges" in ref["judge"]["note"]
    assert "judge_fid" not in next(r for r in recs if r["kind"] == "result")
    assert json.dumps(recs)  # records stay JSON
