"""The bubblewrap sandbox: what it allows (`SandboxSettings`, from the `safety` config section), whether it works
here (`availability()`, probed once per process), and the bwrap arguments of a run (`bwrap_argv`).

The run's runner process that commands start from is `command_runner.CommandRunner`.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache

from anges.safety.runner import prctl

log = logging.getLogger("anges.safety.sandbox")

CREDENTIAL_PATHS = (
    "~/.ssh", "~/.aws", "~/.config/gcloud", "~/.azure", "~/.netrc", "~/.docker", "~/.kube", "~/.gnupg",
    "~/.git-credentials", "~/.config/git/credentials", "~/.config/gh", "~/.config/hub", "~/.pypirc", "~/.npmrc",
    "~/.yarnrc.yml", "~/.cargo/credentials", "~/.cargo/credentials.toml", "~/.gem/credentials", "~/.m2/settings.xml",
    "~/.gradle/gradle.properties", "~/.composer/auth.json", "~/.config/composer/auth.json", "~/.pgpass",
    "~/.my.cnf", "~/.vault-token", "~/.terraform.d", "~/.terraformrc", "~/.cache/huggingface/token",
    "~/.huggingface/token", "~/.config/rclone", "~/.config/op", "~/.config/containers/auth.json",
    "~/.config/sops", "~/.s3cfg", "~/.boto", "~/.oci", "~/.config/doctl", "~/.local/share/keyrings",
    "~/.password-store", "~/.bash_history", "~/.zsh_history", "~/.python_history", "~/.psql_history",
    "~/.mysql_history", "~/.node_repl_history", "~/.local/share/fish/fish_history", "~/.mozilla",
    "~/.config/google-chrome", "~/.config/chromium", "~/.config/BraveSoftware", "~/.config/microsoft-edge",
    "~/.colima", "~/.lima", "~/.rd", "/var/lib/lxd/unix.socket", "/var/snap/lxd/common/lxd/unix.socket",
    "/var/lib/incus/unix.socket",
)
"""Hidden inside the sandbox, with ANGES_HOME, the config files anges read, the ssh-agent socket, every Unix
socket of the host, and `safety.hidden_paths`."""
XDG_CREDENTIAL_PATHS = ("gcloud", "gh", "hub", "git/credentials", "rclone", "op", "containers/auth.json", "sops")
"""The same places under $XDG_CONFIG_HOME, when it is set."""
RUNTIME_DIRS = ("/run", "/var/run")
"""Where daemons keep their sockets (D-Bus, systemd, Docker, containerd...): an empty private directory in the
sandbox, as is $XDG_RUNTIME_DIR."""
STARTUP_FILES = ("~/.bashrc", "~/.bash_profile", "~/.bash_login", "~/.bash_logout", "~/.profile", "~/.zshrc",
                 "~/.zshenv", "~/.zprofile", "~/.zlogin", "~/.config/fish", "~/.config/autostart",
                 "~/.config/systemd", "~/.config/environment.d", "~/.pam_environment", "~/.xprofile",
                 "~/.xsession", "~/.xinitrc", "~/.local/bin", "~/.gitconfig", "~/.config/git", "~/.vimrc",
                 "~/.config/nvim", "~/.emacs", "~/.emacs.d", "~/.config/direnv")
"""Files the user's shell, session, git or editor runs: read-only in the sandbox even when the home is the working
directory (git's `core.fsmonitor` or `core.pager` in ~/.gitconfig would run in every repository)."""
VCS_DIRS = (".git", ".hg")
"""A repository's own directory in a writable one stays read-only: its hooks and config run outside the sandbox."""
TRUSTED_BWRAP_DIRS = ("/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin", "/run/current-system/sw/bin",
                      "/nix/var/nix/profiles/default/bin")
"""Where `bwrap` is looked for (never on PATH, which a project's environment may change); `safety.bwrap` names
another."""
RESOLV_CONF = "/etc/resolv.conf"

_READ_ONLY_MARKS = ("Read-only file system",)
_NETWORK_MARKS = ("Network is unreachable", "Temporary failure in name resolution", "Could not resolve host",
                  "Name or service not known", "No address associated with hostname", "getaddrinfo failed",
                  "nodename nor servname", "Failed to establish a new connection", "network is unreachable")
PR_SET_DUMPABLE = 4


@dataclass(frozen=True)
class SandboxSettings:
    """What a sandboxed command may do."""

    mode: str = "workspace"
    """workspace, read-only or off."""
    network: bool = False
    writable: tuple[str, ...] = ()
    """Absolute, resolved directories commands may write (besides a private /tmp)."""
    hidden: tuple[str, ...] = ()
    """Absolute, resolved paths commands cannot see."""
    workdir: str = ""
    """The resolved working directory: visible (read-only mode) or writable, even inside a hidden path."""
    protected: tuple[str, ...] = ()
    """Paths inside the writable directories that stay read-only: `.git`, the code anges itself runs, the
    shell's startup files. What a command could plant there would run outside the sandbox later."""

    @classmethod
    def for_run(cls, safety, cwd: str) -> SandboxSettings:
        """The settings of a run in `cwd` under the `safety` config section."""
        writable: tuple[str, ...] = ()
        if safety.sandbox != "read-only":  # with the sandbox off, in-process edits keep the workspace's limits
            extra = [_expand(p, cwd) for p in safety.writable_paths]
            writable = _unique(_resolve(p) for p in [cwd, *(p for p in extra if _exists_or_warn(p))])
        _warn_wide(writable)
        return cls(mode=safety.sandbox, network=safety.network, writable=writable, hidden=hidden_paths(safety),
                   workdir=_resolve(cwd), protected=protected_paths(writable))

    @property
    def enabled(self) -> bool:
        return self.mode != "off"

    def can_write(self, path: str) -> bool:
        """True when `path` (resolved, symlinks included) lies in a writable directory, outside the protected."""
        real = _resolve(path)
        return any(_inside(real, root) for root in self.writable) and not self.is_protected(real)

    def is_protected(self, path: str) -> bool:
        """True when `path` (resolved) is or lies under a protected path."""
        real = _resolve(path)
        return any(_inside(real, kept) for kept in self.protected)

    def is_hidden(self, path: str) -> bool:
        """True when `path` (resolved) lies under a hidden path, outside the work and writable folders inside it."""
        real = _resolve(path)
        shown = [root for root in (*self.writable, self.workdir) if root]
        return any(_inside(real, hidden) and not any(_inside(real, root) and _inside(root, hidden) for root in shown)
                   for hidden in self.hidden)


@dataclass(frozen=True)
class Availability:
    """Whether the sandbox can run here, and why not."""

    ok: bool
    reason: str = ""
    bwrap: str = ""


def protect_process_memory() -> None:
    """Make this process non-dumpable, so a command running as the same (non-root) user cannot read its memory
    or environment (/proc/PID/environ holds the model's API key); Linux only, a no-op elsewhere."""
    if sys.platform.startswith("linux"):
        prctl(PR_SET_DUMPABLE, 0)


def hidden_paths(safety) -> tuple[str, ...]:
    """Credential places, ANGES_HOME and the config files anges read (resolved), plus `hidden_paths`, that exist."""
    from anges.config.loading import anges_home
    from anges.util.masking import secret_files

    candidates = [*CREDENTIAL_PATHS, str(anges_home()), *secret_files(), *safety.hidden_paths]
    xdg_config = os.environ.get("XDG_CONFIG_HOME")
    if xdg_config:
        candidates += [os.path.join(xdg_config, name) for name in XDG_CREDENTIAL_PATHS]
    for name in ("ANGES_CONFIG", "SSH_AUTH_SOCK"):
        if os.environ.get(name):
            candidates.append(os.environ[name])
    found = (_resolve(os.path.expanduser(p)) for p in candidates)
    return _unique(p for p in found if os.path.lexists(p))


def protected_paths(writable: tuple[str, ...]) -> tuple[str, ...]:
    """What stays read-only inside the writable directories: each one's `.git` (`.hg`), the code this process runs (the
    interpreter's prefixes, the anges package, `sys.path`), and the shell's startup files."""
    code = code_paths()
    candidates = [os.path.join(root, name) for root in writable for name in VCS_DIRS] + code
    candidates += [os.path.expanduser(p) for p in STARTUP_FILES]
    found = []
    for path in candidates:
        real = _resolve(path)
        if real in writable:
            if path in code:
                _warn_once(f"{real} is on Python's import path and writable by commands: code planted there could "
                           "run in anges' own process; run anges from another directory")
        elif _inside_any(real, writable) and os.path.lexists(real):
            found.append(real)
    return _unique(found)


def code_paths() -> list[str]:
    """Where the code this process runs comes from: the interpreter and its prefixes, anges and the resources it
    reads (its templates are code: Jinja2 reaches Python objects; config.yaml holds the default rules), the
    top-level packages loaded, and `sys.path` ("" is the current directory)."""
    from anges.config.loading import package_dir, resource_path

    paths = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix, str(package_dir())]
    paths += [str(resource_path(name)) for name in ("prompt_templates", "web", "config.yaml")]
    if sys.executable:
        paths += [os.path.dirname(sys.executable), os.path.dirname(os.path.realpath(sys.executable))]
    for entry in sys.path:
        entry = entry or os.getcwd()
        if os.path.isabs(entry) and os.path.exists(entry):
            paths.append(entry)
    for name, module in list(sys.modules.items()):
        where = getattr(module, "__file__", None)
        if "." not in name and isinstance(where, str) and os.path.isabs(where):
            paths.append(os.path.dirname(where) if os.path.basename(where) == "__init__.py" else where)
    return list(dict.fromkeys(paths))


def availability(bwrap: str = "", writable: tuple[str, ...] = (), quiet: bool = False) -> Availability:
    """Whether `bwrap` works on this machine (probed once per process and `bwrap` location). `bwrap` is the
    configured `safety.bwrap`; without it, bwrap is looked for in the system's directories only. One inside the
    `writable` directories (which commands could replace) is refused before it is ever run."""
    if not sys.platform.startswith("linux"):
        found = Availability(False, f"the sandbox needs Linux and bubblewrap; this is {sys.platform}")
    else:
        path = find_bwrap(bwrap)
        if isinstance(path, Availability):
            found = path
        elif _inside_any(_resolve(path), writable):
            found = Availability(False, f"bwrap at {path} lies in a directory commands may write")
        else:
            found = _probe(path)
    return found if quiet else _say_once(found)


def find_bwrap(configured: str = "") -> str | Availability:
    """The bwrap to use: `configured` (an absolute path), else the first in TRUSTED_BWRAP_DIRS; or why not."""
    if configured:
        if not os.path.isabs(configured):
            return Availability(False, f"safety.bwrap must be an absolute path, not {configured!r}")
        if not os.access(configured, os.X_OK) or os.path.isdir(configured):
            return Availability(False, f"bwrap was not found at {configured} (safety.bwrap)")
        return configured
    for directory in TRUSTED_BWRAP_DIRS:
        candidate = os.path.join(directory, "bwrap")
        if os.access(candidate, os.X_OK) and not os.path.isdir(candidate):
            return candidate
    return Availability(False, f"bwrap was not found in {', '.join(TRUSTED_BWRAP_DIRS[:5])} (install the "
                               "'bubblewrap' package, or name it with safety.bwrap)")


@lru_cache(maxsize=4)
def _probe(bwrap: str) -> Availability:
    argv = [bwrap, *_isolation(network=False), "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--",
            "/bin/sh", "-c", "exit 0"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20, env={"PATH": os.defpath})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Availability(False, f"bwrap could not run: {exc}", bwrap)
    if done.returncode != 0:
        detail = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return Availability(False, f"bwrap does not work here: {detail}", bwrap)
    return Availability(True, "", bwrap)


_warned: set[str] = set()


def _say_once(found: Availability) -> Availability:
    if not found.ok:
        _warn_once(f"the sandbox is not available: {found.reason}. Commands will run without it, and each one "
                   "needs approval (--approval)")
    return found


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        log.warning("anges: %s.", message)


def bwrap_argv(bwrap: str, settings: SandboxSettings, cwd: str, visible: list[str]) -> list[str]:
    """The bwrap arguments for one run: a read-only root, the writable directories (minus the protected paths),
    private /tmp and runtime directories, hidden credentials and host sockets."""
    argv = [bwrap, *_isolation(settings.network), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    private = private_dirs()
    real_cwd = _resolve(cwd)
    if not any(_inside(real_cwd, root) for root in settings.writable):
        visible = [real_cwd, *visible]  # read-only mode: the working directory is still there to read
    # The interpreter and the runner must stay visible when they live in a directory the sandbox makes private.
    visible = [*_lost_code(private, settings.writable), *visible]
    if settings.network:
        visible = [*_resolver_files(private), *visible]
    shown = (*settings.writable, *visible)
    # A hidden directory that holds the work (a batch's work dirs are in ANGES_HOME) stays hidden but for the
    # work: an empty tmpfs, the work bound into it, then made read-only.
    around = [path for path in settings.hidden
              if os.path.isdir(path) and any(_inside(root, path) and root != path for root in shown)]
    mounts = [(path, ["--tmpfs", path]) for path in (*private, *around)]
    mounts += [(path, ["--bind", path, path]) for path in settings.writable]
    mounts += [(path, ["--ro-bind", path, path]) for path in (*visible, *settings.protected)]
    for path in settings.hidden:
        if path in around or path in shown:
            continue  # the work itself is never hidden
        if _inside_any(path, (*around, *private)) and not _inside_any(path, shown):
            continue  # already hidden with the directory around it, or gone with its private directory
        if os.path.isdir(path):
            around.append(path)
            mounts.append((path, ["--tmpfs", path]))
        else:
            mounts.append((path, ["--ro-bind", "/dev/null", path]))
    for path in host_sockets():
        if _inside_any(path, shown) or not _inside_any(path, (*settings.hidden, *private)):
            mounts.append((path, ["--ro-bind", "/dev/null", path]))  # visible in the sandbox: cover it
    # A mount hides what was mounted below it before: parents first, then what nests in them; an empty
    # directory is made read-only last, once what is bound into it is in place.
    for _, mount in sorted(mounts, key=lambda item: _depth(item[0])):
        argv += mount
    for path in sorted(around, key=_depth):
        argv += ["--remount-ro", path]
    return argv + ["--chdir", cwd]


def contained_argv(bwrap: str) -> list[str]:
    """bwrap arguments that change nothing but the PID namespace: for commands run outside the sandbox, so every
    process they start still ends with the run (and a command cannot see, or signal, the agent)."""
    return [bwrap, "--dev-bind", "/", "/", "--unshare-pid", "--die-with-parent", "--proc", "/proc"]


def private_dirs() -> list[str]:
    """Directories the sandbox replaces with empty private ones: /tmp, and the runtime directories where daemons
    keep their sockets (/run, /var/run, $XDG_RUNTIME_DIR)."""
    found = ["/tmp"]
    for path in (*RUNTIME_DIRS, os.environ.get("XDG_RUNTIME_DIR") or ""):
        if path and os.path.isabs(path) and os.path.isdir(path) and not os.path.islink(path):
            real = _resolve(path)
            if not _inside_any(real, found):
                found.append(real)
    return found


def host_sockets() -> list[str]:
    """The path of every Unix socket bound on this machine (in this network namespace) that still exists.

    A read-only file system does not stop connect(): a daemon listening there would run what a command sends.
    """
    import stat

    try:
        with open("/proc/net/unix", encoding="utf-8", errors="replace") as table:
            lines = table.read().splitlines()[1:]
    except OSError:
        return []
    found = []
    for line in lines:
        fields = line.split(None, 7)
        path = fields[7] if len(fields) == 8 else ""
        if not path.startswith("/"):
            continue  # unnamed, or abstract (@name): those live in the network namespace
        try:
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                found.append(path)
        except OSError:
            continue
    return list(dict.fromkeys(found))


def _lost_code(private: list[str], writable: tuple[str, ...]) -> list[str]:
    """What the runner needs (the interpreter, its prefixes, runner.py) where it lies in a private directory and
    would vanish in the sandbox. The runner runs isolated (`python -I -S`): no other `sys.path` entry is shown."""
    lost = []
    paths = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix, os.path.dirname(__file__)]
    if sys.executable:
        paths += [os.path.dirname(sys.executable), os.path.dirname(os.path.realpath(sys.executable))]
    for path in paths:
        real = _resolve(path)
        if os.path.exists(real) and _inside_any(real, private) and not _inside_any(real, writable):
            lost.append(real)
    return _unique(lost)


def _resolver_files(private: list[str]) -> list[str]:
    """What name resolution reads from a private directory: /etc/resolv.conf is often a link into /run
    (systemd-resolved, resolvconf, NetworkManager)."""
    real = _resolve(RESOLV_CONF)
    return [real] if real != RESOLV_CONF and os.path.isfile(real) and _inside_any(real, private) else []


def _isolation(network: bool) -> list[str]:
    argv = ["--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    return argv + (["--share-net"] if network else [])


def explain_block(result, settings: SandboxSettings) -> str:
    """A note when the sandbox, not the command, is the likely cause of a failure ("" otherwise)."""
    if not settings.enabled or (result.exit_code == 0 and not result.timed_out):
        return ""
    output = f"{result.stdout}\n{result.stderr}"
    if any(mark in output for mark in _READ_ONLY_MARKS):
        return f"read-only file system — {_why_read_only(result.command, output, settings)}"
    if not settings.network and any(mark in output for mark in _NETWORK_MARKS):
        return "no network — the sandbox has no network access"
    if any(path in output for path in settings.hidden):
        return "hidden — credential paths are not visible in the sandbox"
    return ""


def _why_read_only(command: str, output: str, settings: SandboxSettings) -> str:
    """Why a write failed: the protected place it touched (named in the output; for a git command that names none
    outside the writable paths, the working directory's repository), else where commands may write."""
    lines = [line for line in output.splitlines() if any(mark in line for mark in _READ_ONLY_MARKS)]
    words = (word.rstrip(".,;:") for line in lines for word in re.split(r"[\s'\"`]+", line))
    named = [_resolve(os.path.join(settings.workdir, word)) for word in words if "/" in word or word[:1] == "."]
    if re.search(r"(^|[\s;&|(])git\s", command) and all(_inside_any(path, settings.writable) for path in named):
        named += [_resolve(os.path.join(settings.workdir, name)) for name in VCS_DIRS]
    for path in named:
        kept = next((kept for kept in settings.protected if _inside(path, kept)), None)
        if kept is not None:
            return _protected_reason(kept)
    if not settings.writable:
        return "the read-only sandbox lets commands write only to a private /tmp"
    return f"outside the sandbox's writable paths (writable: {', '.join(settings.writable)}; and a private /tmp)"


def _protected_reason(kept: str) -> str:
    if os.path.basename(kept) in VCS_DIRS:
        return (f"{kept} is a repository's own directory, read-only in the sandbox (its hooks and config would run "
                "outside it), so committing, branching or bisecting fails there")
    if kept in {_resolve(os.path.expanduser(path)) for path in STARTUP_FILES}:
        return f"{kept} is a startup file of the shell, git or an editor, read-only in the sandbox"
    return f"{kept} holds code anges itself runs, read-only in the sandbox"


def _resolve(path: str) -> str:
    return os.path.realpath(os.path.expanduser(path))


def _expand(path: str, cwd: str) -> str:
    return os.path.join(cwd, os.path.expanduser(path))


def _exists_or_warn(path: str) -> bool:
    if os.path.isdir(path):
        return True
    _warn_once(f"safety.writable_paths: {path} is not a directory; left out")
    return False


def _warn_wide(writable: tuple[str, ...]) -> None:
    home = _resolve("~")
    for root in writable:
        if root == "/" or _inside(home, root):
            _warn_once(f"commands may change everything in {root} (it holds your home directory); the shell's "
                       "startup files stay read-only, but work in a project directory if you can")


def _depth(path: str) -> int:
    return path.rstrip(os.sep).count(os.sep)


def _inside_any(path: str, roots) -> bool:
    return any(_inside(path, root) for root in roots)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _unique(paths) -> tuple[str, ...]:
    return tuple(dict.fromkeys(paths))
