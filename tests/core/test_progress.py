"""Progress lines: the rate and ETA of a resumed run count only the units done in this process."""

from icml26.core import progress


def test_resumed_units_count_but_leave_the_rate_and_eta(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    bar = progress._Bar(1000, "run", None)
    bar.resumed(600)  # done before a restart
    now[0] += 10.0
    bar.advance(20)  # 2 units a second in this process
    line = bar.line()
    assert "620/1000 (62%)" in line
    assert " 2/s " in line and "eta 3m10s" in line  # (1000 - 620) / 2 = 190 s
    fresh = progress._Bar(1000, "run", None)
    now[0] += 10.0
    fresh.advance(20)
    assert " 2/s " in fresh.line() and "eta 8m10s" in fresh.line()  # 980 / 2 = 490 s
