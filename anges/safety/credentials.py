"""The credentials the sandbox hides, and the homes they are looked for in: `$HOME` is not always the account's
(`su user -c`, `runuser`, `sudo -E`, `HOME=/tmp/x anges`), and root's commands may read every user's."""

from __future__ import annotations

import os
import pwd

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
"""Hidden inside the sandbox in every home (`homes`), with anges' own places (`places.own_places`), the ssh-agent
socket, every Unix socket of the host, and `safety.hidden_paths`; one that does not exist when the sandbox starts is
kept from showing up in it later (`sandbox.awaited_credentials`)."""
CREDENTIAL_VARIABLES = (
    "GOOGLE_APPLICATION_CREDENTIALS", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "AWS_WEB_IDENTITY_TOKEN_FILE",
    "KUBECONFIG", "DOCKER_CONFIG", "CLOUDSDK_CONFIG", "AZURE_CONFIG_DIR", "GNUPGHOME", "PASSWORD_STORE_DIR",
    "GH_CONFIG_DIR", "NETRC", "PGPASSFILE", "BOTO_CONFIG", "RCLONE_CONFIG", "OCI_CLI_CONFIG_FILE", "TF_CLI_CONFIG_FILE",
    "NPM_CONFIG_USERCONFIG", "HF_TOKEN_PATH",
)
"""Variables that name a credential file or folder (each of a `KUBECONFIG` list): what they name is hidden too
(google-genai reads a service account's key from GOOGLE_APPLICATION_CREDENTIALS)."""
XDG_CREDENTIAL_PATHS = ("gcloud", "gh", "hub", "git/credentials", "rclone", "op", "containers/auth.json", "sops")
"""The same places under $XDG_CONFIG_HOME, when it is set."""
FIRST_LOGIN_UID = 1000
"""Root's commands may read every home: those of the accounts from this uid on (people, not services) count too."""
MAX_HOMES = 64


def homes() -> list[str]:
    """The homes credentials and startup places are looked for in: `$HOME`, the account's from the password database
    (the effective and the real user's), the one `sudo` came from (`$SUDO_USER`), and, for root, every person's."""
    found = [os.path.expanduser("~")]
    accounts = {os.geteuid(), os.getuid()}
    if os.environ.get("SUDO_UID", "").isdigit():
        accounts.add(int(os.environ["SUDO_UID"]))
    for uid in accounts:
        try:
            found.append(pwd.getpwuid(uid).pw_dir)
        except KeyError:
            continue  # no account (a container's arbitrary uid)
    if os.geteuid() == 0:
        people = (entry.pw_dir for entry in pwd.getpwall() if FIRST_LOGIN_UID <= entry.pw_uid < 65534)
        found += [home for home, _ in zip(people, range(MAX_HOMES), strict=False)]
    return list(dict.fromkeys(home for home in found if os.path.isabs(home) and home != os.sep))


def in_homes(places) -> list[str]:
    """Each of `places` ("~/..." or absolute) as an absolute path, a "~" one in every home."""
    found: list[str] = []
    every = homes()
    for place in places:
        if place == "~" or place.startswith("~/"):
            found += [os.path.join(home, place[2:]) if place != "~" else home for home in every]
        else:
            found.append(place)
    return found


def credential_places() -> list[str]:
    """Every credential place, existing or not: CREDENTIAL_PATHS in every home, XDG_CREDENTIAL_PATHS under
    $XDG_CONFIG_HOME, and what the CREDENTIAL_VARIABLES and SSH_AUTH_SOCK name."""
    candidates = in_homes(CREDENTIAL_PATHS)
    xdg_config = os.environ.get("XDG_CONFIG_HOME")
    if xdg_config and os.path.isabs(xdg_config):
        candidates += [os.path.join(xdg_config, name) for name in XDG_CREDENTIAL_PATHS]
    for name in ("SSH_AUTH_SOCK", *CREDENTIAL_VARIABLES):
        named = os.path.expanduser(os.environ.get(name, ""))
        candidates += [path for path in named.split(os.pathsep) if os.path.isabs(path) and path != os.sep]
    return candidates
