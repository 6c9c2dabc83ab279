"""The bubblewrap sandbox: what it allows (`SandboxSettings`, from the `safety` config section) and whether it
works here (`availability()`, probed once per process). The bwrap arguments of a run are `bwrap.bwrap_argv`;
the run's runner process that commands start from is `command_runner.CommandRunner`.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache

from anges.safety.credentials import credential_places, in_homes
from anges.safety.places import model_places, own_place_of, own_places
from anges.safety.runner import prctl
from anges.util.paths import inside, link_in, resolve
from anges.util.trust import model_writable

log = logging.getLogger("anges.safety.sandbox")

RUNTIME_DIRS = ("/run", "/var/run")
"""Where daemons keep their sockets (D-Bus, systemd, Docker, containerd...): an empty private directory in the
sandbox, as is $XDG_RUNTIME_DIR."""
SHARED_MEMORY = "/dev/shm"
"""Private in the sandbox too (a tmpfs of its own), besides the directories of `private_dirs`."""
STARTUP_PLACES = (
    "~/.bashrc", "~/.bash_profile", "~/.bash_login", "~/.bash_logout", "~/.bash_aliases", "~/.profile", "~/.inputrc",
    "~/.zshrc", "~/.zshenv", "~/.zprofile", "~/.zlogin", "~/.zlogout", "~/.oh-my-zsh", "~/.kshrc", "~/.mkshrc",
    "~/.cshrc", "~/.tcshrc", "~/.login", "~/.logout", "~/.config/fish", "~/.config/nushell", "~/.config/zsh",
    "~/.pam_environment", "~/.xprofile", "~/.xsession", "~/.xsessionrc", "~/.xinitrc", "~/.config/autostart",
    "~/.config/autostart-scripts", "~/.config/plasma-workspace", "~/.config/environment.d", "~/.config/systemd",
    "~/.local/share/systemd", "~/.local/share/applications", "~/.local/share/dbus-1",
    "~/bin", "~/.local/bin", "~/.local/lib", "~/.cargo/bin", "~/.cargo/config", "~/.cargo/config.toml",
    "~/.config/pip", "~/.pip", "~/.pydistutils.cfg", "~/.ipython", "~/.jupyter", "~/.Rprofile",
    "~/.gitconfig", "~/.config/git", "~/.hgrc", "~/.config/hg", "~/.tmux.conf", "~/.config/tmux", "~/.screenrc",
    "~/.config/direnv", "~/.mailcap", "~/.vimrc", "~/.vim", "~/.config/nvim", "~/.local/share/nvim", "~/.emacs",
    "~/.emacs.d", "~/.config/emacs", "~/.nanorc", "~/.pyenv", "~/.rbenv", "~/.nodenv", "~/.nvm", "~/.rustup",
    "~/.sdkman", "~/.asdf", "~/.volta", "~/.bun", "~/.deno", "~/.local/share/mise",
)
"""What the user's shells, session, PATH, Python (user site-packages, a `.pth` there), git, tmux and editors run
or read commands from: read-only in the sandbox, and an `ask` for anges' own edits, whether or not they exist yet
(git's `core.fsmonitor` in ~/.gitconfig would run in every repository; a new ~/.bash_profile at the next login);
the version managers whose shims and scripts PATH leads into. The ~/.config and ~/.local/share places count under
$XDG_CONFIG_HOME and $XDG_DATA_HOME too, and so does every directory on $PATH (`path_dirs`)."""
MAX_SEALED_ENTRIES = 5000
"""A sealed directory with more entries than this is made read-only as a whole instead."""
VCS_DIRS = (".git", ".hg")
"""A repository's own directory in a writable one stays read-only: its hooks and config run outside the sandbox."""
PROJECT_DIRS = (".anges",)
"""A project's own anges folder (its hooks, run outside the sandbox once trusted) stays read-only too."""
TRUSTED_BWRAP_DIRS = ("/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin", "/run/current-system/sw/bin",
                      "/nix/var/nix/profiles/default/bin")
"""Where `bwrap` is looked for (never on PATH, which a project's environment may change); `safety.bwrap` names
another."""
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
    startup places (STARTUP_PLACES, whether they exist or not). What a command could plant there would run
    outside the sandbox later."""
    tmp_size: int = 1_000_000_000
    """Bytes the private /tmp (and /dev/shm) may hold."""
    max_processes: int = 2048
    """Processes (and threads) the sandbox may hold at once."""
    user_namespaces: bool = False
    """Commands may make user namespaces of their own (rootless containers, Chromium's own sandbox)."""
    unix_sockets: bool = False
    """Commands may make Unix sockets (then a host daemon's socket is reachable by any name not covered)."""
    awaited: tuple[str, ...] = ()
    """Credential places in a home that did not exist when these settings were made (`awaited_credentials`)."""
    model_places: tuple[str, ...] = ()
    """Where commands of a run in this folder may write in any mode (`places.model_places`): no program anges runs,
    code it imports or file it reads as configuration outside the sandbox may lie there (`model_writable`)."""

    @classmethod
    def for_run(cls, safety, cwd: str) -> SandboxSettings:
        """The settings of a run in `cwd` under the `safety` config section."""
        writable: tuple[str, ...] = ()
        if safety.sandbox != "read-only":  # with the sandbox off, in-process edits keep the workspace's limits
            extra = [_expand(p, cwd) for p in safety.writable_paths]
            extra = [p for p in extra if _exists_or_warn(p)]
            roots = [resolve(p) for p in [cwd, *extra]]
            wanted = (resolve(p) for p in [cwd, *(p for p in extra if not _linked_from(p, roots))])
            writable = _unique(p for p in wanted if not _owned(p))
        _warn_wide(writable)
        return cls(mode=safety.sandbox, network=safety.network, writable=writable, hidden=hidden_paths(safety),
                   workdir=resolve(cwd), protected=protected_paths(writable, cwd), tmp_size=safety.tmp_size,
                   max_processes=safety.max_processes, user_namespaces=safety.user_namespaces,
                   unix_sockets=safety.unix_sockets, awaited=awaited_credentials(),
                   model_places=model_places(safety, cwd))

    @property
    def enabled(self) -> bool:
        return self.mode != "off"

    @property
    def untrusted(self) -> tuple[str, ...]:
        """Where commands may write, however these settings were made: `model_places`, the writable directories and
        the working directory."""
        return _unique([*self.model_places, *self.writable, *([self.workdir] if self.workdir else [])])

    def can_write(self, path: str) -> bool:
        """True when `path` (resolved, symlinks included) lies in a writable directory, outside the protected, and is
        no new entry of a sealed directory: what a command could write."""
        real = resolve(path)
        return any(_inside(real, root) for root in self.writable) and not self.is_protected(real) \
            and not self.is_sealed(real)

    def is_protected(self, path: str) -> bool:
        """True when `path` (resolved) is or lies under a protected path."""
        real = resolve(path)
        return any(_inside(real, kept) for kept in self.protected)

    def sealed(self, awaited: bool = True) -> list[str]:
        """The directories where a protected place that does not exist yet would be made (the deepest existing one
        on its way, inside the writable directories), or, with `awaited`, a credential place that does not exist yet
        would appear (in a home, outside them). Sealed, they keep what they hold but take no new entry, and show none
        made on the host after the sandbox started; no mount point of the sandbox is left on the host (an empty
        ~/.bash_profile would stop login shells from reading ~/.profile)."""
        kept = [place for place in (*self.protected, *self.hidden) if os.path.lexists(place)]
        shown = [*self.writable, *private_dirs()] if awaited else []  # a private one shows nothing of the host
        found = [directory for directory in _folders_of(self.protected, kept) if _inside_any(directory, self.writable)]
        if awaited:
            found += [directory for directory in _folders_of(self.awaited, kept) if not _inside_any(directory, shown)]
        return list(_unique(found))

    def is_sealed(self, path: str) -> bool:
        """True when a sealed directory keeps commands from writing `path` (resolved): it would be a new entry in one
        (a new file right in the home could be a startup file no list names), or lies in one made read-only whole."""
        real = resolve(path)
        existing = real
        while not os.path.lexists(existing) and existing != os.path.dirname(existing):
            existing = os.path.dirname(existing)
        return any((existing == directory and existing != real) or (_inside(real, directory) and sealed_names(
            directory) is None) for directory in self.sealed(awaited=False))  # the others lie outside the work

    def is_private(self, path: str) -> bool:
        """True when `path` (resolved) lies in a directory the sandbox replaces with a private one of its own (/tmp,
        /run, /dev/shm...), outside the work: what commands see there is not what the host has."""
        real = resolve(path)
        shown = [root for root in (*self.writable, self.workdir) if root]
        private = [*private_dirs(), resolve(SHARED_MEMORY)]
        return self.enabled and _inside_any(real, private) and not _inside_any(real, shown)

    def is_hidden(self, path: str) -> bool:
        """True when `path` (resolved) lies under a hidden path, outside the work and writable folders inside it."""
        real = resolve(path)
        shown = [root for root in (*self.writable, self.workdir) if root]
        return any(_inside(real, hidden) and not any(_inside(real, root) and _inside(root, hidden) for root in shown)
                   for hidden in self.hidden)


@dataclass(frozen=True)
class Availability:
    """Whether the sandbox can run here, and why not."""

    ok: bool
    reason: str = ""
    bwrap: str = ""
    features: frozenset = frozenset()
    """What this bwrap supports of what anges uses: `size` (--size), `disable-userns`."""


def sealed_names(directory: str) -> list[str] | None:
    """The names in a directory to seal; None when it holds more than MAX_SEALED_ENTRIES (or cannot be read): it is
    made read-only whole instead."""
    try:
        with os.scandir(directory) as scan:
            names = [entry.name for entry, _ in zip(scan, range(MAX_SEALED_ENTRIES + 1), strict=False)]
    except OSError:
        return None
    return names if len(names) <= MAX_SEALED_ENTRIES else None


def protect_process_memory() -> None:
    """Make this process non-dumpable, so a command running as the same (non-root) user cannot read its memory
    or environment (/proc/PID/environ holds the model's API key); Linux only, a no-op elsewhere."""
    if sys.platform.startswith("linux"):
        prctl(PR_SET_DUMPABLE, 0)


def private_dirs() -> list[str]:
    """Directories the sandbox replaces with empty private ones: /tmp, and the runtime directories where daemons
    keep their sockets (/run, /var/run, $XDG_RUNTIME_DIR)."""
    found = ["/tmp"]
    for path in (*RUNTIME_DIRS, os.environ.get("XDG_RUNTIME_DIR") or ""):
        if path and os.path.isabs(path) and os.path.isdir(path) and not os.path.islink(path):
            real = resolve(path)
            if not _inside_any(real, found):
                found.append(real)
    return found


def hidden_paths(safety) -> tuple[str, ...]:
    """Credential places (`credentials.credential_places`), anges' own places (`own_places`: its home, the config
    files it read), plus `hidden_paths`, that exist (resolved)."""
    candidates = [*credential_places(), *own_places(), *safety.hidden_paths]
    found = (resolve(os.path.expanduser(p)) for p in candidates)
    return _unique(p for p in found if os.path.lexists(p))


def awaited_credentials() -> tuple[str, ...]:
    """The credential places in a home that do not exist (yet): one made while the sandbox runs must not show in it,
    so the folder it would appear in is sealed (`SandboxSettings.sealed`)."""
    homes = [resolve(home) for home in in_homes(["~"])]
    found = (resolve(path) for path in credential_places())
    return _unique(p for p in found if not os.path.lexists(p) and _inside_any(p, homes) and p not in homes)


def protected_paths(writable: tuple[str, ...], cwd: str = "") -> tuple[str, ...]:
    """What stays read-only inside the writable directories: each one's `.git` (`.hg`) and `.anges`, the `.anges` of
    the project a run in `cwd` or in a writable directory uses (it may lie above), the code this process runs (the
    interpreter's prefixes, the anges package, `sys.path`) where they exist, and the startup places and anges' own
    places (hidden where they exist) whether they exist or not."""
    from anges.config.trust import project_root

    code = code_paths()
    projects = [root for place in dict.fromkeys([*([cwd] if cwd else []), *writable])
                if (root := project_root(place)) is not None]
    found = []
    for path in [os.path.join(root, name) for root in writable for name in (*VCS_DIRS, *PROJECT_DIRS)] + \
            [os.path.join(root, name) for root in projects for name in PROJECT_DIRS] + code:
        real = resolve(path)
        if real in writable:
            if path in code:
                warn_once(f"{real} is on Python's import path and writable by commands: code planted there could "
                           "run in anges' own process; run anges from another directory")
        elif _inside_any(real, writable) and os.path.lexists(real):
            found.append(real)
    for entry in (e for e in sys.path if os.path.isabs(e) and not os.path.lexists(e)):
        if _inside_any(resolve(entry), writable):
            warn_once(f"{entry} is on Python's import path but does not exist, in a directory commands may write: a "
                      "module made there would run in the next anges process; remove it from PYTHONPATH")
    for path in [*startup_places(), *path_dirs(writable), *(p for p in own_places() if not os.path.lexists(p))]:
        real = resolve(path)
        if real not in writable and _inside_any(real, writable):
            found.append(real)
    return _unique(found)


def path_dirs(writable: tuple[str, ...]) -> list[str]:
    """The directories on $PATH (resolved) that lie in a writable directory holding the home: a program planted
    there would run at the next escalated command, or the next one you type, under a name you trust (`git`)."""
    home = resolve("~")
    holding = [root for root in writable if _inside(home, root)]
    entries = (resolve(entry) for entry in os.environ.get("PATH", "").split(os.pathsep) if os.path.isabs(entry))
    return [entry for entry in entries if _inside_any(entry, holding)]


def startup_places() -> list[str]:
    """The absolute paths of STARTUP_PLACES in every home (`credentials.homes`), with their forms under
    $XDG_CONFIG_HOME, $XDG_DATA_HOME, $ZDOTDIR (zsh's files) and $PYTHONUSERBASE (Python's user site-packages and
    scripts)."""
    places = in_homes(STARTUP_PLACES)
    for variable, prefix in (("XDG_CONFIG_HOME", "~/.config/"), ("XDG_DATA_HOME", "~/.local/share/")):
        root = os.environ.get(variable, "")
        if os.path.isabs(root):
            places += [os.path.join(root, p[len(prefix):]) for p in STARTUP_PLACES if p.startswith(prefix)]
    zdotdir, userbase = os.environ.get("ZDOTDIR", ""), os.environ.get("PYTHONUSERBASE", "")
    if os.path.isabs(zdotdir):
        places += [os.path.join(zdotdir, name) for name in (".zshrc", ".zshenv", ".zprofile", ".zlogin", ".zlogout")]
    if os.path.isabs(userbase):
        places += [os.path.join(userbase, "lib"), os.path.join(userbase, "bin")]
    return places


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


def availability(bwrap: str, places: tuple[str, ...], quiet: bool = False) -> Availability:
    """Whether `bwrap` works on this machine (probed once per process and `bwrap` location). `bwrap` is the
    configured `safety.bwrap`; without it, bwrap is looked for in the system's directories only. One that the
    commands of a run could replace (it lies in `places`, the run's `model_places`, or those of another run of this
    process) is refused before it is ever run (`bwrap_problem`)."""
    if not sys.platform.startswith("linux"):
        found = Availability(False, f"the sandbox needs Linux and bubblewrap; this is {sys.platform}")
    else:
        path = find_bwrap(bwrap)
        if isinstance(path, Availability):
            found = path
        else:
            problem = bwrap_problem(path, places)
            found = Availability(False, problem) if problem else _probe(resolve(path))  # what was checked is what runs
    return found if quiet else _say_once(found)


def working_bwrap(bwrap: str, places: tuple[str, ...]) -> str:
    """The path of the bwrap `availability` finds working ("" when none does), without a warning."""
    found = availability(bwrap, places, quiet=True)
    return found.bwrap if found.ok else ""


def bwrap_problem(path: str, places: tuple[str, ...]) -> str:
    """Why the bwrap at `path` must not be run ("" when it may): it lies where commands may write (`places`, see
    `model_writable`; for a user other than root, anywhere that user may write), so a command could have put its
    own program there. Every start of bwrap checks this first."""
    why = model_writable(path, places)
    if why:
        return f"bwrap at {path} is not run: {why}"
    real = resolve(path)
    for place in dict.fromkeys((real, os.path.dirname(os.path.abspath(path)))):  # the file, and a link to it
        while os.geteuid() != 0:  # root may write anywhere: only the run's writable directories tell
            if os.access(place, os.W_OK):
                return f"bwrap at {path} can be changed by you ({place} is writable), so by commands run as you"
            if place == os.path.dirname(place):
                break
            place = os.path.dirname(place)
    return ""


def find_bwrap(configured: str = "") -> str | Availability:
    """The bwrap to use: `configured` (an absolute path), else the first in TRUSTED_BWRAP_DIRS; or why not."""
    if configured:
        if not os.path.isabs(configured) or "\0" in configured:
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


def isolation(network: bool, features=frozenset(), user_namespaces: bool = True) -> list[str]:
    """bwrap's arguments for the sandbox's namespaces: all new (the network's unless `network`), no capability,
    a new session (no terminal to type into); no user namespace of its own unless `user_namespaces`."""
    argv = ["--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if not user_namespaces and "disable-userns" in features:
        argv += ["--unshare-user", "--disable-userns"]
    return argv + (["--share-net"] if network else [])


@lru_cache(maxsize=4)
def _probe(bwrap: str) -> Availability:
    features = _features(bwrap)
    done = _run(_probe_argv(bwrap, features))
    if not isinstance(done, str) and done.returncode != 0 and "disable-userns" in features:
        features.discard("disable-userns")  # no user namespace to disable (a setuid bwrap without them)
        done = _run(_probe_argv(bwrap, features))
    if isinstance(done, str):
        return Availability(False, f"bwrap could not run: {done}", bwrap)
    if done.returncode != 0:
        detail = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return Availability(False, f"bwrap does not work here: {detail}", bwrap)
    for feature, what in (("size", "the private /tmp is not capped in size"),
                          ("disable-userns", "commands may make user namespaces of their own")):
        if feature not in features:
            warn_once(f"bwrap at {bwrap} cannot do all the sandbox asks of it (bubblewrap 0.8 or later, with user "
                       f"namespaces, can): {what}")
    return Availability(True, "", bwrap, frozenset(features))


def _probe_argv(bwrap: str, features) -> list[str]:
    return [bwrap, *isolation(False, features, user_namespaces=False), "--ro-bind", "/", "/", "--proc", "/proc",
            "--dev", "/dev", "--", "/bin/sh", "-c", "exit 0"]


def _features(bwrap: str) -> set[str]:
    done = _run([bwrap, "--help"])
    text = "" if isinstance(done, str) else done.stdout + done.stderr
    return {name for name in ("size", "disable-userns") if f"--{name}" in text}


def _run(argv: list[str]) -> subprocess.CompletedProcess | str:
    """The finished process, or why it could not run."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=20, env={"PATH": os.defpath},
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)


_warned: set[str] = set()


def _say_once(found: Availability) -> Availability:
    if not found.ok:
        warn_once(f"the sandbox is not available: {found.reason}. Commands will run without it, and each one "
                   "needs approval (--approval)")
    return found


def warn_once(message: str) -> None:
    """Log `message` as a warning, once per process."""
    if message not in _warned:
        _warned.add(message)
        log.warning("anges: %s.", message)


def _expand(path: str, cwd: str) -> str:
    return os.path.join(cwd, os.path.expanduser(path))


def _exists_or_warn(path: str) -> bool:
    if os.path.isdir(path):
        return True
    warn_once(f"safety.writable_paths: {path} is not a directory; left out")
    return False


def _linked_from(path: str, roots: list[str]) -> bool:
    """True (with a warning) when a symlink on the way to `path` lies in one of `roots`, the directories commands may
    write: a command could have made it, to have the next run make writable what it points at (~/.ssh)."""
    link = link_in(path, roots)
    if link:
        warn_once(f"safety.writable_paths: {path} is reached through the link {link}, which commands may have made (it "
                  "lies in a directory they may write); left out")
    return bool(link)


def _folders_of(missing: tuple[str, ...], kept: list[str]) -> list[str]:
    """The deepest existing directory on the way to each path of `missing` that does not exist, but "/", a link, and
    those in `kept` (read-only or hidden already: they take and show nothing new)."""
    found = []
    for path in missing:
        if os.path.lexists(path):
            continue
        directory = os.path.dirname(path)
        while not os.path.lexists(directory) and directory != os.path.dirname(directory):
            directory = os.path.dirname(directory)
        if os.path.isdir(directory) and not os.path.islink(directory) and directory != "/" \
                and not _inside_any(directory, kept):
            found.append(directory)
    return found


def _owned(root: str) -> bool:
    """True (with a warning) when `root` lies in one of anges' own places, which commands may never change: its
    configuration and records (a batch task's folder in anges' home is made for commands and may)."""
    place = own_place_of(root)
    if place:
        warn_once(f"{root} lies in {place}, one of anges' own places (its configuration and records): commands may "
                  "not write there; work in another folder")
    return bool(place)


def _warn_wide(writable: tuple[str, ...]) -> None:
    home = resolve("~")
    for root in writable:
        if root == "/" or _inside(home, root):
            warn_once(f"commands may change what is in {root} (it holds your home directory), but not the startup "
                      "files of your shell, session, git and editors, nor make new files right in your home (a "
                      "new one could be a startup file); work in a project directory if you can")


def _depth(path: str) -> int:
    return path.rstrip(os.sep).count(os.sep)


def _inside_any(path: str, roots) -> bool:
    return any(_inside(path, root) for root in roots)


_inside = inside


def _unique(paths) -> tuple[str, ...]:
    return tuple(dict.fromkeys(paths))
