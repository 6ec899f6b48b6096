"""StallWatch: a run that moves is left alone; one that stops moving is stopped once."""

import threading

from tbx.process.stall import StallWatch


def test_a_run_without_progress_is_stopped_once():
    stopped = threading.Event()
    calls = []
    watch = StallWatch(0.2, lambda: (calls.append(1), stopped.set()), poll_s=0.05)
    assert stopped.wait(60)
    watch.stop()
    assert watch.stalled and calls == [1]


def test_a_changing_probe_is_progress():
    """The probe's value changes at every read for a while (an episode stored each poll): no stall meanwhile;
    when it stops changing, the stall follows."""
    reads = []
    changing = threading.Event()
    changing.set()

    def probe():
        reads.append(1)
        if len(reads) >= 40:
            changing.clear()
        return len(reads) if changing.is_set() else 40

    stopped = threading.Event()
    watch = StallWatch(5.0, stopped.set, probe, poll_s=0.05)
    assert stopped.wait(120)
    watch.stop()
    assert len(reads) > 40  # the stall came only after the probe stopped changing


def test_a_failing_probe_shows_no_progress_and_says_so(capfd):
    stopped = threading.Event()

    def probe():
        raise OSError("store unreachable")

    watch = StallWatch(0.2, stopped.set, probe, poll_s=0.05)
    assert stopped.wait(60)
    watch.stop()
    assert watch.stalled
    assert capfd.readouterr().err.count("the progress check failed (OSError: store unreachable)") == 1
