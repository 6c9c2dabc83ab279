"""A neighbour cannot keep the owner out of the web chat: another account of the machine polls `/login` with wrong
passwords, from fresh browsers (cookies discarded), four at a time, while the owner's fresh browser logs in with
the right one and gets in at once; the neighbour's guesses are still slowed to one per wait. Over a real socket to
the real app, the neighbour a process of another user (it needs root to become one, and setpriv)."""

import json
import os
import re
import shutil
import subprocess
import urllib.error
import urllib.request
from http.cookiejar import CookieJar
from urllib.parse import urlencode

import pytest
from test_web_browser import PASSWORD, LiveServer

from anges.models.scripted import ScriptedModel

NEIGHBOUR_UID = 61235
GUESSER = r"""
import http.cookiejar, json, re, sys, threading, time, urllib.error, urllib.parse, urllib.request

url, seconds, codes = sys.argv[1], float(sys.argv[2]), []

def guess():
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        page = browser.open(url + "/login").read().decode()  # a new browser each time: no cookie kept
        token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
        form = urllib.parse.urlencode({"password": "not the password", "csrf_token": token}).encode()
        try:
            codes.append(browser.open(url + "/login", form).status)
        except urllib.error.HTTPError as error:
            codes.append(error.code)
        print(codes[-1], flush=True)

threads = [threading.Thread(target=guess) for _ in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps(codes), flush=True)
"""


@pytest.fixture
def neighbour():
    """Runs GUESSER as another user of this machine; skipped where it cannot."""
    python = shutil.which("python3", path="/usr/bin")
    if os.geteuid() != 0 or not shutil.which("setpriv") or python is None:
        pytest.skip("becoming another user needs root, setpriv (util-linux) and the system's python3")
    started = []

    def start(url, seconds):
        process = subprocess.Popen(["setpriv", f"--reuid={NEIGHBOUR_UID}", f"--regid={NEIGHBOUR_UID}",
                                    "--clear-groups", "--", python, "-c", GUESSER, url, str(seconds)],
                                   stdout=subprocess.PIPE, text=True, cwd="/", env={"PATH": "/usr/bin:/bin"})
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()
        process.wait()


def fresh_browser_logs_in(url):
    """A browser that never logged in here: the login page, then the right password; the status of the answer."""
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()),
                                          NoRedirect())
    page = browser.open(url + "/login").read().decode()
    token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    try:
        return browser.open(url + "/login", urlencode({"password": PASSWORD, "csrf_token": token}).encode()).status
    except urllib.error.HTTPError as error:
        return error.code


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def test_a_neighbour_polling_the_login_never_keeps_the_owner_out_and_is_still_slowed(neighbour, tmp_path):
    live = LiveServer(ScriptedModel(), tmp_path)
    try:
        guesser = neighbour(live.url, 8)
        first = [guesser.stdout.readline().strip() for _ in range(6)]  # it is polling: some answers are in
        assert "401" in first and "429" in first, first
        owners = [fresh_browser_logs_in(live.url) for _ in range(3)]  # while the guesses go on
        assert owners == [302, 302, 302], "each fresh browser of the owner got in at its first try, not a 429"
        assert guesser.poll() is None, "the neighbour was still guessing meanwhile"
        codes = json.loads(guesser.communicate(timeout=60)[0].strip().splitlines()[-1])
    finally:
        live.close()

    checked = codes.count(401)
    assert checked <= 5, f"8 s of guessing from 4 threads got {checked} guesses checked: 1, 2, 4 s apart at least"
    assert codes.count(429) >= 4 * checked and set(codes) == {401, 429}, codes
