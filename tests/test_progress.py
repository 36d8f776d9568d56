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
