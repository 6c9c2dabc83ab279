"""Credentials stay hidden however the home is found and whenever they appear: when `$HOME` is not the account's
(`su user -c`, `runuser`, `sudo -E`, `HOME=/tmp/x anges`), for root every person's home, and a credential file made
on the host after the sandbox started. The account database is the real one, seen through a mount namespace in which
/etc/passwd holds the test's accounts too."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from test_sandbox import actions, complete, reply, run_agent, shell
from test_sandbox_edges import AGENT_AS, STRANGER_UID, home, stranger  # noqa: F401 (fixtures)

SECRETS = {".ssh/id_ed25519": "KEY-OF-THE-ACCOUNT", ".aws/credentials": "AWS-OF-THE-ACCOUNT",
           ".pgpass": "PG-OF-THE-ACCOUNT", ".config/gh/hosts.yml": "GH-OF-THE-ACCOUNT"}
READ = "cat {home}/.ssh/id_ed25519 {home}/.aws/credentials {home}/.pgpass {home}/.config/gh/hosts.yml; ls -A {home}"


def plant_secrets(folder: Path, owner: int | None = None) -> None:
    for name, text in SECRETS.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    if owner is not None:
        for path in [folder, *folder.rglob("*")]:
            os.chown(path, owner, owner)


@pytest.fixture
def accounts():
    """A copy of the account database with a person (the stranger's uid) whose home is a fresh folder, and a way to
    run a command that sees it as /etc/passwd (a mount namespace of its own); skipped where that needs what is not
    here."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("a mount namespace with another /etc/passwd needs root and unshare (util-linux)")
    folder = Path(tempfile.mkdtemp(prefix="anges-test-accounts-", dir="/var/tmp"))
    person, root_home = folder / "person", folder / "root"
    person.mkdir()
    root_home.mkdir()
    lines = [line for line in Path("/etc/passwd").read_text().splitlines() if not line.startswith("root:")]
    lines += [f"root:x:0:0:root:{root_home}:/bin/sh", f"anges-person:x:{STRANGER_UID}:{STRANGER_UID}::{person}:/bin/sh"]
    (folder / "passwd").write_text("\n".join(lines) + "\n")
    os.chmod(folder, 0o755)

    def within(argv):
        return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                f"mount --bind {folder / 'passwd'} /etc/passwd && exec \"$@\"", "sh", *argv]

    yield within, person, root_home
    shutil.rmtree(folder)


def agent_in(within, prefix, env, cwd, steps):
    done = subprocess.run(within([*prefix, "-c", AGENT_AS, json.dumps(steps), json.dumps({}), str(cwd)]), cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.sandbox
def test_an_ordinary_users_credentials_stay_hidden_when_home_is_not_its_home(accounts, stranger):  # noqa: F811
    """`su person -c anges` keeps root's HOME; `HOME=/tmp/x anges` another: the account's ~/.ssh was readable."""
    within, person, _ = accounts
    prefix, env, elsewhere = stranger
    plant_secrets(person, owner=STRANGER_UID)
    results = agent_in(within, prefix, {**env, "HOME": str(elsewhere)}, elsewhere,
                       [reply(shell(READ.format(home=person))), complete()])

    seen = results[0]["stdout"]
    assert not any(secret in seen for secret in SECRETS.values()), seen
    assert ".ssh" in seen  # the folder is there, empty; the files in it are not


@pytest.mark.sandbox
def test_roots_commands_see_no_credentials_of_roots_account_nor_of_any_person(accounts, tmp_path):
    """Root with another HOME (`sudo -E`), and every person's home, which root's commands may read."""
    within, person, root_home = accounts
    plant_secrets(person)
    plant_secrets(root_home)
    work = Path(tempfile.mkdtemp(prefix="anges-test-work-", dir="/var/tmp"))
    try:
        env = {**os.environ, "HOME": str(tmp_path)}  # neither root's home nor the person's
        command = f"{READ.format(home=root_home)}; {READ.format(home=person)}"
        results = agent_in(within, [sys.executable], env, work, [reply(shell(command)), complete()])
    finally:
        shutil.rmtree(work)

    assert not any(secret in results[0]["stdout"] for secret in SECRETS.values()), results[0]["stdout"]


@pytest.mark.sandbox
def test_a_credential_made_while_the_sandbox_runs_stays_hidden(home, monkeypatch):  # noqa: F811
    """`~/.pgpass` made on the host after the sandbox started was readable until the run ended."""
    (home / ".config" / "app").mkdir(parents=True)
    (home / "keys").mkdir()
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(home / "keys" / "service-account.json"))
    project = home / "project"

    def make_them_on_the_host(prompt):  # the sandbox is up: the first command ran in it
        plant_secrets(home)
        (home / "keys" / "service-account.json").write_text("KEY-OF-THE-SERVICE\n")
        (home / "notes.txt").write_text("not a credential\n")
        return reply(shell(f"{READ.format(home='~')}; cat ~/keys/service-account.json ~/old.txt ~/.config/app/x; "
                           "echo made > here.txt && cat here.txt"))

    (home / ".config" / "app" / "x").write_text("app settings\n")
    stream, _ = run_agent(project, [reply(shell("echo started")), make_them_on_the_host, complete()])

    seen = actions(stream)[1].data["stdout"]
    assert not any(secret in seen for secret in [*SECRETS.values(), "KEY-OF-THE-SERVICE"]), seen
    assert "old\n" in seen and "app settings\n" in seen  # what was there stays readable
    assert seen.endswith("made\n") and (project / "here.txt").read_text() == "made\n"  # the work goes on
