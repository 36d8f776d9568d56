import logging
from volsweep.progress import progress

def test_progress_logs_with_sync_when_not_interactive(caplog):
    calls = []
    caplog.set_level(logging.INFO, logger="volsweep")
    p = progress(4, "sweep", True, every_s=0.0, sync=lambda: calls.append(1), unit="kernels")
    for _ in range(4):
        p.step()
    p.close()
    lines = [r.getMessage() for r in caplog.records]
    assert lines[-1].startswith("sweep: 4/4 kernels,") and "kernels/s, ETA 0 s" in lines[-1]
    assert len(calls) == 4  # synced before every line shown


def test_disabled_progress_is_silent_and_never_syncs(caplog):
    caplog.set_level(logging.INFO, logger="volsweep")
    p = progress(3, "sweep", False, every_s=0.0, sync=lambda: 1 / 0)
    for _ in range(3):
        p.step()
    assert not caplog.records


def test_step_profile_goes_to_the_log(tmp_path, monkeypatch):
    # VOLSWEEP_PROFILE appends the step's functions by cumulative time to its log
    from types import SimpleNamespace

    from volsweep.steps import runner

    def busy_step(n):
        return sum(i * i for i in range(n))

    obj = SimpleNamespace(log=[str(tmp_path / "a.log")], rule="r", wildcards={})
    runner.run_script(busy_step, obj, n=1000)
    assert "profile" not in (tmp_path / "a.log").read_text()
    monkeypatch.setenv(runner.ENV_PROFILE, "1")
    obj.log = [str(tmp_path / "b.log")]
    runner.run_script(busy_step, obj, n=1000)
    text = (tmp_path / "b.log").read_text()
    assert "busy_step: profile (VOLSWEEP_PROFILE)" in text and "cumulative" in text
    assert "test_progress.py" in text and "busy_step: done in" in text


def test_step_log_carries_each_thickness_calls_stages(tmp_path):
    # A step's log holds each local-thickness call's DEBUG line (kept centres, stage
    # times) and no other DEBUG line; the logger's level is restored after the step.
    import logging
    from types import SimpleNamespace

    import numpy as np

    from volsweep.steps import runner
    from volsweep.thickness import local_thickness

    def thickness_step():
        phase = np.ones((9, 11, 13), bool)
        phase[4, 5, 6] = False
        local_thickness(phase, device="cpu")
        logging.getLogger("volsweep").debug("a package DEBUG line")

    stages = logging.getLogger("volsweep.thickness")
    before = stages.level
    obj = SimpleNamespace(log=[str(tmp_path / "t.log")], rule="r", wildcards={})
    runner.run_script(thickness_step, obj)
    text = (tmp_path / "t.log").read_text()
    assert "DEBUG local thickness of a (9, 11, 13) block on cpu" in text, text
    assert "ball centres kept; distance map" in text and "a package DEBUG line" not in text
    assert stages.level == before


def _thickness_lines(caplog):
    return [r.getMessage() for r in caplog.records
            if r.name == "volsweep.thickness" and r.levelno == logging.INFO]


def test_long_thickness_call_logs_its_stages_and_parts(caplog, monkeypatch):
    # a call past progress.EVERY_S (here 0) logs each stage as it ends, in order, and the
    # thread pool's parts in between; its result is the silent call's
    import re

    import numpy as np

    import volsweep.progress as P
    from volsweep import thickness as T
    from volsweep.thickness import _cpu

    # balls past the max painter's radius: the ordered painter's slabs on two threads
    from tests_data import solid_with_pores

    phase = solid_with_pores((37, 41, 45), 2, 0)
    monkeypatch.setattr(_cpu, "cpu_threads", lambda: 2)
    caplog.set_level(logging.INFO, logger="volsweep.thickness")
    monkeypatch.setattr(P, "EVERY_S", 3600.0)
    quiet = T.local_thickness(phase, device="cpu")
    assert _thickness_lines(caplog) == []
    monkeypatch.setattr(P, "EVERY_S", 0.0)
    loud = T.local_thickness(phase, device="cpu")
    np.testing.assert_array_equal(loud, quiet)
    lines = _thickness_lines(caplog)
    assert all(line.startswith("local thickness of a (37, 41, 45) block on cpu: ") for line in lines)
    ends = [line.split(": ", 1)[1] for line in lines if " done" in line and "parts" not in line]
    assert [e.split(" done")[0] for e in ends] == list(T.STAGES)
    kept = int(re.search(r"pruning done \(([\d,]+) ball centres kept\)", ends[1])[1].replace(",", ""))
    d2 = _cpu.edt_sq(phase, (1, 1, 1))
    assert kept == _cpu.candidates(d2, (1, 1, 1), (0, 0, 0), phase.shape, np.inf)[0].size
    seconds = [float(e.rsplit(", ", 1)[1][:-2]) for e in ends]
    assert seconds == sorted(seconds)
    parts = [re.search(r": (\w[\w ]*), (\d+)/(\d+) parts done", line) for line in lines]
    parts = [(m[1], int(m[2]), int(m[3])) for m in parts if m]
    assert {stage for stage, _, _ in parts} >= {"distance map", "pruning", "painting"}
    assert all(1 <= done <= total for _, done, total in parts)


def test_thread_pool_reports_every_part_once(monkeypatch):
    from volsweep.thickness import _clock, _cpu

    seen = []

    class Log:
        def info(self, fmt, *args):
            seen.append(args)

    monkeypatch.setattr(_cpu, "cpu_threads", lambda: 2)
    with _clock.CallProgress(Log(), "a call", ("work",), every_s=0.0):
        out = _cpu._run(lambda lo, hi: (lo, hi), 10, tasks_per_thread=3)
    assert out == [(0, 1), (1, 3), (3, 5), (5, 6), (6, 8), (8, 10)]
    assert [(done, total) for _, _, done, total, _ in seen] == [(d, 6) for d in range(1, 7)]
    seen.clear()
    _cpu._run(lambda lo, hi: (lo, hi), 10)  # no call's progress entered: nothing reported
    assert seen == []
