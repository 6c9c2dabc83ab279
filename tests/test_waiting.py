"""The one interruptible wait: it ends when the work is done, at once on a stop, or at its timeout."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from anges.util.waiting import future_done, wait_for


def test_the_wait_ends_when_the_work_is_done():
    done = threading.Event()
    threading.Timer(0.2, done.set).start()
    assert wait_for(done.wait, lambda: False) == "done" and done.is_set()


def test_a_stop_ends_the_wait_though_the_work_goes_on():
    asked = threading.Event()
    threading.Timer(0.2, asked.set).start()
    started = time.monotonic()
    assert wait_for(threading.Event().wait, asked.is_set) == "stopped"
    assert time.monotonic() - started < 5, "a stop takes effect within a poll, not forever"


def test_a_timeout_ends_the_wait_and_a_future_can_be_waited_on():
    assert wait_for(threading.Event().wait, lambda: False, timeout=0.3) == "timeout"
    with ThreadPoolExecutor(1) as pool:
        slow = pool.submit(time.sleep, 0.2)
        assert wait_for(future_done(slow), lambda: False, timeout=30) == "done" and slow.done()
