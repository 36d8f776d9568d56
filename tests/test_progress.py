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
