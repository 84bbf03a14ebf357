"""A long-lived python-tuf client for ReleaseHistoryTests: one run per step of a release history.

usage: python tuf_history_client.py METADATA_URL TARGETS_URL TRUSTED_ROOT_JSON CACHE_DIR

Refreshes with python-tuf's ngclient (an implementation independent of PatchSync), then downloads
every target that top-level targets and every delegated role list (PatchSync delegates `releases`,
the released content keys of preload builds, to the online key). Each one is looked up with
get_targetinfo, so the delegation walk decides which role vouches for it, and fetched with
download_target, which checks its length and hashes (under consistent snapshots python-tuf asks for
`<dir>/<sha256>.<name>`, the name PatchSync's origin layout gives target files).

CACHE_DIR keeps the trusted metadata between runs, so the client is the same client at every step:
its rollback and freeze checks span the whole history. TRUSTED_ROOT_JSON is the root the game shipped
(version 1); newer roots come from the cache or the repository.

Prints one JSON line, {"targets": [...], "roles": {role: [...]}, "versions": {role: version}}, and
exits 0; on any error, prints `error: <type>: <message>` on stderr and exits 1. The clock is the
process's: run it under faketime to move it.
"""

import json
import os
import sys
import traceback

from tuf.ngclient import Updater

TOP = ("root", "timestamp", "snapshot", "targets")


def delegated_roles(targets):
    """The names of the roles `targets` delegates to, in order."""
    delegations = targets.delegations
    if delegations is None:
        return []
    if delegations.roles is not None:
        return list(delegations.roles)
    return list(delegations.succinct_roles.get_roles())


def listed(updater):
    """(role, target path) for every target of top-level targets and of each role it delegates to,
    depth first. ngclient has no public listing: the trusted set holds what refresh verified, and
    _load_targets verifies (and caches) a delegated role against its delegator, as the lookup does."""
    trusted = updater._trusted_set  # noqa: SLF001 - read only
    found = [("targets", path) for path in sorted(trusted.targets.targets)]
    pending = [(name, "targets") for name in delegated_roles(trusted.targets)]
    seen = set()
    while pending:
        role, parent = pending.pop(0)
        if role in seen:
            continue
        seen.add(role)
        metadata = updater._load_targets(role, parent)  # noqa: SLF001
        found += [(role, path) for path in sorted(metadata.targets)]
        pending += [(name, role) for name in delegated_roles(metadata)]
    return found


def main():
    if len(sys.argv) != 5:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        sys.exit(64)
    metadata_url, targets_url, trusted_root, cache = sys.argv[1:5]
    metadata_dir = os.path.join(cache, "metadata")
    target_dir = os.path.join(cache, "targets")
    os.makedirs(metadata_dir, exist_ok=True)
    os.makedirs(target_dir, exist_ok=True)
    with open(trusted_root, "rb") as f:
        bootstrap = f.read()
    updater = Updater(
        metadata_dir=metadata_dir,
        metadata_base_url=metadata_url,
        target_dir=target_dir,
        target_base_url=targets_url,
        bootstrap=bootstrap,
    )
    updater.refresh()
    roles = {}
    for role, path in listed(updater):
        info = updater.get_targetinfo(path)
        if info is None:
            raise LookupError(f"{path} is listed by {role}, but the delegation walk finds no role that vouches for it")
        updater.download_target(info)
        roles.setdefault(role, []).append(path)
    trusted = updater._trusted_set  # noqa: SLF001
    versions = {role: trusted[role].version for role in TOP}
    versions.update({role: trusted[role].version for role in roles if role not in TOP})
    print(json.dumps({
        "targets": sorted(path for paths in roles.values() for path in paths),
        "roles": roles,
        "versions": versions,
    }, sort_keys=True))


if __name__ == "__main__":
    try:
        main()
    except Exception as error:  # noqa: BLE001 - every failure is the client's verdict
        print(f"error: {type(error).__name__}: {error}", file=sys.stderr)
        if os.environ.get("PATCHSYNC_HISTORY_TRACE"):
            traceback.print_exc()
        sys.exit(1)
