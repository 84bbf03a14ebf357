"""Interop and attack table for PatchSync's conformance adapter, `patchsync-tuf-client`.

Every repository here is written by python-tuf's Metadata API (an implementation independent of
PatchSync) into a folder that nginx serves over loopback. The adapter is then run the way the TUF
conformance suite runs a client. Two tables:

- interop: repositories with root rotations, delegations (paths, hash prefixes, terminating,
  hash bins), ecdsa and rsa keys, no consistent snapshots. The adapter must exit 0 and store
  exactly the signed target bytes.
- attacks: the attacks the TUF specification names, each staged against a client that already
  trusts good metadata. The adapter must exit 1, leave every trusted file unchanged (except a
  file the specification requires it to persist before the attacked step, listed per scenario)
  and store nothing.

usage: python tuf_interop.py ADAPTER SERVED_DIR BASE_URL WORK_DIR [SCENARIO ...]
Prints one line per scenario, "PASS <table>/<name>: ..." or "FAIL ...", and exits 1 on any FAIL.
"""

import copy
import hashlib
import os
import shutil
import subprocess
import sys
import traceback
from datetime import datetime, timedelta, timezone
from urllib.parse import quote

from securesystemslib.signer import CryptoSigner
from tuf.api.metadata import (
    DelegatedRole,
    Delegations,
    Metadata,
    MetaFile,
    Root,
    Snapshot,
    SuccinctRoles,
    TargetFile,
    Targets,
    Timestamp,
)
from tuf.api.serialization.json import JSONSerializer

ADAPTER, SERVED, BASE_URL, WORK = sys.argv[1:5]
ONLY = set(sys.argv[5:])
NOW = datetime.now(timezone.utc).replace(microsecond=0)
DAY = timedelta(days=1)
TOP = ("root", "timestamp", "snapshot", "targets")


def generate(kind):
    return {
        "ed25519": CryptoSigner.generate_ed25519,
        "ecdsa": CryptoSigner.generate_ecdsa,
        "rsa": CryptoSigner.generate_rsa,
    }[kind]()


class Repo:
    """A TUF repository written with python-tuf's Metadata API into SERVED/<name>/."""

    def __init__(self, name, kinds=None, consistent=True, pin_hashes=True):
        kinds = kinds or {}
        self.dir = os.path.join(SERVED, name)
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir + "/metadata")
        os.makedirs(self.dir + "/targets")
        self.url = f"{BASE_URL}/{name}"
        self.consistent = consistent
        self.pin_hashes = pin_hashes
        self.signers = {role: [generate(kinds.get(role, "ed25519"))] for role in TOP}
        root = Root(expires=NOW + 365 * DAY, consistent_snapshot=consistent)
        for role in TOP:
            root.add_key(self.signers[role][0].public_key, role)
        self.root = Metadata(root)
        self.timestamp = Metadata(Timestamp(expires=NOW + 7 * DAY))
        self.snapshot = Metadata(Snapshot(expires=NOW + 30 * DAY))
        self.targets = Metadata(Targets(expires=NOW + 365 * DAY))
        self.delegated = {}  # role name -> Metadata[Targets]
        self.signers_of = {}  # delegated role name -> [signer]
        self.data = {}  # target path -> bytes
        self.write_root()

    # writing

    def sign(self, md, signers):
        md.signatures.clear()
        for signer in signers:
            md.sign(signer, append=True)
        return md.to_bytes(JSONSerializer(compact=False))

    def put(self, name, data):
        path = os.path.join(self.dir, "metadata", name)   # a role name may hold a "/"
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)

    def write_root(self, signers=None):
        data = self.sign(self.root, signers or self.signers["root"])
        self.put(f"{self.root.signed.version}.root.json", data)
        self.put("root.json", data)

    def targets_md(self, role):
        return self.targets if role == "targets" else self.delegated[role]

    def add_target(self, path, data, role="targets"):
        self.data[path] = data
        self.targets_md(role).signed.targets[path] = TargetFile.from_data(path, data, ["sha256"])
        name = path
        if self.consistent:
            head, _, tail = path.rpartition("/")
            digest = hashlib.sha256(data).hexdigest()
            name = f"{head}/{digest}.{tail}" if head else f"{digest}.{tail}"
        full = os.path.join(self.dir, "targets", name)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as f:
            f.write(data)

    def delegate(self, parent, name, paths=None, prefixes=None, terminating=False, kind="ed25519"):
        signer = generate(kind)
        md = self.targets_md(parent)
        if md.signed.delegations is None:
            md.signed.delegations = Delegations(keys={}, roles={})
        role = DelegatedRole(name, [], 1, terminating, paths=paths, path_hash_prefixes=prefixes)
        md.signed.delegations.roles[name] = role
        md.signed.add_key(signer.public_key, name)
        self.delegated[name] = Metadata(Targets(expires=NOW + 365 * DAY))
        self.signers_of[name] = [signer]

    def delegate_bins(self, bit_length=3, prefix="bin"):
        signer = generate("ed25519")
        succinct = SuccinctRoles([], 1, bit_length, prefix)
        self.targets.signed.delegations = Delegations(keys={}, succinct_roles=succinct)
        self.targets.signed.add_key(signer.public_key)
        for name in succinct.get_roles():
            self.delegated[name] = Metadata(Targets(expires=NOW + 365 * DAY))
            self.signers_of[name] = [signer]
        return succinct

    def role_file(self, role, version):
        return f"{version}.{role}.json" if self.consistent else f"{role}.json"

    def publish(self, roles=("targets", "snapshot", "timestamp"), bump=True):
        """Bumps and re-signs `roles` (targets and delegated roles first), updating snapshot's and
        timestamp's meta; returns the bytes written, by role."""
        written = {}
        for role in [r for r in roles if r not in ("snapshot", "timestamp")]:
            md = self.targets_md(role)
            if bump:
                md.signed.version += 1
            signers = self.signers["targets"] if role == "targets" else self.signers_of[role]
            written[role] = self.sign(md, signers)
            self.put(self.role_file(role, md.signed.version), written[role])
            self.snapshot.signed.meta[f"{role}.json"] = MetaFile(md.signed.version)
        if "snapshot" in roles:
            if bump:
                self.snapshot.signed.version += 1
            written["snapshot"] = self.sign(self.snapshot, self.signers["snapshot"])
            self.put(self.role_file("snapshot", self.snapshot.signed.version), written["snapshot"])
            data = written["snapshot"]
            self.timestamp.signed.snapshot_meta = MetaFile(
                self.snapshot.signed.version,
                length=len(data) if self.pin_hashes else None,
                hashes={"sha256": hashlib.sha256(data).hexdigest()} if self.pin_hashes else None,
            )
        if "timestamp" in roles:
            if bump:
                self.timestamp.signed.version += 1
            written["timestamp"] = self.sign(self.timestamp, self.signers["timestamp"])
            self.put("timestamp.json", written["timestamp"])
        return written

    def publish_all(self):
        return self.publish(roles=tuple(self.delegated) + ("targets", "snapshot", "timestamp"))

    def rotate(self, role, new_kind="ed25519", sign_with_old=True):
        """Replaces the keys of `role` in a new root version signed by old and new root keys."""
        old_root_signers = list(self.signers["root"])
        for keyid in list(self.root.signed.roles[role].keyids):
            self.root.signed.revoke_key(keyid, role)
        self.signers[role] = [generate(new_kind)]
        self.root.signed.add_key(self.signers[role][0].public_key, role)
        self.root.signed.version += 1
        signers = self.signers["root"] + (old_root_signers if role == "root" and sign_with_old else [])
        self.write_root(signers)


class Client:
    def __init__(self, name):
        self.meta = os.path.join(WORK, name, "meta")
        self.dl = os.path.join(WORK, name, "dl")
        shutil.rmtree(os.path.join(WORK, name), ignore_errors=True)
        os.makedirs(self.meta)
        os.makedirs(self.dl)
        self.last = ""

    def run(self, repo, *args, now=None, fake_days=None):
        env = dict(os.environ)
        if now is not None:
            env["PATCHSYNC_TUF_NOW"] = str(int(now.timestamp()))
        cmd = [ADAPTER, "--metadata-dir", self.meta, "--metadata-url", repo.url + "/metadata/", *args]
        if fake_days:  # the way the TUF conformance suite moves a client's clock
            cmd = ["faketime", "-f", f"+{fake_days}d", *cmd]
        result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        self.last = (result.stderr or result.stdout).strip().splitlines()[-1:] or [""]
        self.last = self.last[0]
        return result.returncode

    def init(self, repo, root_version=1):
        path = os.path.join(repo.dir, "metadata", f"{root_version}.root.json")
        result = subprocess.run([ADAPTER, "--metadata-dir", self.meta, "init", path], capture_output=True, text=True)
        assert result.returncode == 0, f"init failed: {result.stderr}"

    def refresh(self, repo, now=None):
        return self.run(repo, "refresh", now=now)

    def download(self, repo, target, now=None, fake_days=None):
        return self.run(repo, "--target-name", target, "--target-base-url", repo.url + "/targets/",
                        "--target-dir", self.dl, "download", now=now, fake_days=fake_days)

    def trusted(self):
        out = {}
        for name in sorted(os.listdir(self.meta)):
            with open(os.path.join(self.meta, name), "rb") as f:
                out[name] = f.read()
        return out

    def version(self, role):
        return Metadata.from_bytes(self.trusted()[f"{role}.json"]).signed.version

    def stored(self, target):
        path = os.path.join(self.dl, quote(target, safe=""))
        if os.path.exists(path):
            with open(path, "rb") as f:
                return f.read()
        return None


def fresh(name, **kwargs):
    """A new repository and a client (of the same name) that trusts its first root."""
    repo = Repo(name, **kwargs)
    client = Client(name)
    client.init(repo)
    return repo, client


def good_repo(name, **kwargs):
    """A repository published twice (timestamp, snapshot and targets at version 3) and a client that trusts it."""
    repo, client = fresh(name, **kwargs)
    repo.add_target("game/data.pak", b"level data v1\n" * 100)
    repo.publish()
    folder = os.path.join(repo.dir, "metadata")
    repo.first_release = {name: open(os.path.join(folder, name), "rb").read() for name in os.listdir(folder)}
    repo.add_target("game/data.pak", b"level data v2\n" * 120)
    repo.publish()
    assert client.download(repo, "game/data.pak") == 0, f"good repository refused: {client.last}"
    os.remove(os.path.join(client.dl, os.listdir(client.dl)[0]))
    return repo, client


# ---------------------------------------------------------------- interop: adapter reads python-tuf


INTEROP = {}


def interop(fn):
    INTEROP[fn.__name__] = fn
    return fn


def expect_download(repo, client, target, now=None):
    rc = client.download(repo, target, now=now)
    assert rc == 0, f"exit {rc}: {client.last}"
    assert client.stored(target) == repo.data[target], "stored bytes differ from the signed target"


@interop
def ed25519_basic():
    repo, client = fresh("i-basic")
    repo.add_target("readme.txt", b"hello from python-tuf\n")
    repo.publish()
    assert client.refresh(repo) == 0, client.last
    expect_download(repo, client, "readme.txt")
    assert set(client.trusted()) == {"root.json", "timestamp.json", "snapshot.json", "targets.json"}
    return "refresh + download, trusted files under non-versioned names"


@interop
def root_rotation():
    repo, client = fresh("i-rotation")
    repo.add_target("a.bin", os.urandom(3000))
    repo.publish()
    repo.rotate("root")              # v2: new root key, signed by old and new
    repo.rotate("root")              # v3: again
    repo.rotate("targets")           # v4: new targets key
    repo.publish(roles=("targets", "snapshot", "timestamp"))
    expect_download(repo, client, "a.bin")
    assert client.version("root") == 4, f"root version {client.version('root')}"
    return "root v1 -> v4 (two root key rotations, one targets key rotation)"


@interop
def delegations():
    repo, client = fresh("i-delegations")
    repo.delegate("targets", "maps", paths=["maps/*"])
    repo.delegate("maps", "maps-dlc", paths=["maps/dlc-*"], terminating=True)
    repo.delegate("targets", "audio", prefixes=[hashlib.sha256(b"sfx/boom.ogg").hexdigest()[:2]])
    repo.add_target("maps/dlc-1.map", b"dlc map\n", role="maps-dlc")
    repo.add_target("maps/base.map", b"base map\n", role="maps")
    repo.add_target("sfx/boom.ogg", b"boom\n", role="audio")
    repo.publish_all()
    for target in ("maps/dlc-1.map", "maps/base.map", "sfx/boom.ogg"):
        expect_download(repo, client, target)
    assert {"maps.json", "maps-dlc.json", "audio.json"} <= set(client.trusted()), sorted(client.trusted())
    return "nested, terminating and hash-prefix delegations; <role>.json trusted"


@interop
def terminating_stops_search():
    repo, client = fresh("i-terminating")
    repo.delegate("targets", "first", paths=["*.txt"], terminating=True)
    repo.delegate("targets", "second", paths=["*.txt"])
    repo.add_target("only-in-second.txt", b"should not be found\n", role="second")
    repo.add_target("in-first.txt", b"found\n", role="first")
    repo.publish_all()
    expect_download(repo, client, "in-first.txt")
    rc = client.download(repo, "only-in-second.txt")
    assert rc == 1 and client.stored("only-in-second.txt") is None, f"exit {rc}: a terminating role was passed"
    assert "second.json" not in client.trusted(), "a role after a terminating one was loaded"
    return "a matching terminating role ends the search (second role never loaded)"


@interop
def delegation_visit_limit():
    repo, client = fresh("i-chain")
    parent = "targets"
    for depth in range(1, 41):
        repo.delegate(parent, f"level-{depth}", paths=["*"])
        parent = f"level-{depth}"
    repo.add_target("shallow.txt", b"visited\n", role="level-31")   # the 32nd role: within the limit
    repo.add_target("deep.txt", b"too deep\n", role="level-32")
    repo.publish_all()
    expect_download(repo, client, "shallow.txt")
    rc = client.download(repo, "deep.txt")
    assert rc == 1 and client.stored("deep.txt") is None, f"exit {rc}: the 33rd role was visited"
    return "a chain of 40 delegations: the 32nd role (top-level included) is searched, the 33rd is not"


@interop
def hash_bins():
    repo, client = fresh("i-bins")
    succinct = repo.delegate_bins(bit_length=3)
    for i in range(5):
        path = f"pak/{i}.pak"
        repo.add_target(path, f"pak {i}\n".encode(), role=succinct.get_role_for_target(path))
    repo.publish_all()
    for i in range(5):
        expect_download(repo, client, f"pak/{i}.pak")
    return "succinct hash-bin delegation, 8 bins"


@interop
def ecdsa_keys():
    repo, client = fresh("i-ecdsa", kinds={role: "ecdsa" for role in TOP})
    repo.delegate("targets", "dlc", paths=["dlc/*"], kind="ecdsa")
    repo.add_target("dlc/pack.bin", os.urandom(5000), role="dlc")
    repo.publish_all()
    repo.rotate("root", new_kind="ecdsa")
    expect_download(repo, client, "dlc/pack.bin")
    return "ecdsa-sha2-nistp256 for every role and a delegation, with a root rotation"


@interop
def rsa_keys():
    repo, client = fresh("i-rsa", kinds={"root": "rsa", "timestamp": "rsa", "snapshot": "ecdsa", "targets": "rsa"})
    repo.add_target("big.bin", os.urandom(100_000))
    repo.publish()
    repo.rotate("root", new_kind="rsa")
    expect_download(repo, client, "big.bin")
    return "rsassa-pss-sha256 (root, timestamp, targets) mixed with ecdsa, with a root rotation"


@interop
def no_consistent_snapshot():
    repo, client = fresh("i-plain", consistent=False, pin_hashes=False)
    repo.add_target("plain/file.txt", b"no consistent snapshots\n")
    repo.publish()
    expect_download(repo, client, "plain/file.txt")
    return "consistent_snapshot false, no hashes pinned in timestamp"


@interop
def existing_target_not_refetched():
    repo, client = fresh("i-cached")
    repo.add_target("cached.bin", os.urandom(2000))
    repo.publish()
    expect_download(repo, client, "cached.bin")
    shutil.rmtree(os.path.join(repo.dir, "targets"))
    expect_download(repo, client, "cached.bin")
    return "a stored target with matching hashes is kept without a download"


@interop
def unchanged_metadata_not_refetched():
    repo, client = fresh("i-unchanged")
    repo.delegate("targets", "dlc", paths=["dlc/*"])
    repo.add_target("dlc/a.bin", b"dlc\n", role="dlc")
    repo.publish_all()
    expect_download(repo, client, "dlc/a.bin")
    folder = os.path.join(repo.dir, "metadata")
    for name in os.listdir(folder):
        if name not in ("timestamp.json", "root.json", "1.root.json"):
            os.remove(os.path.join(folder, name))
    assert client.refresh(repo) == 0, client.last
    expect_download(repo, client, "dlc/a.bin")
    return "with timestamp unchanged, trusted snapshot, targets and delegated metadata are used without a request"


@interop
def unusual_role_names():
    for index, role in enumerate(["?", "#", "/delegatedrole", "../delegatedrole"]):
        repo, client = fresh(f"i-role-{index}")
        repo.delegate("targets", role, paths=["*"])
        repo.add_target("inside.txt", b"x\n", role=role)
        repo.publish_all()
        assert client.download(repo, "nonexistent target") == 1, client.last
        expect_download(repo, client, "inside.txt")
        names = set(client.trusted())
        assert len(names) == 5 and f"{quote(role, safe='')}.json" in names, sorted(names)
        assert not os.path.exists(os.path.join(client.meta, "..", "delegatedrole.json"))
    return "roles '?', '#', '/delegatedrole', '../delegatedrole': requested and stored percent-encoded"


@interop
def fast_forward_recovery():
    repo, client = good_repo("i-fastforward")
    repo.timestamp.signed.version = 1000      # the compromised timestamp key fast-forwards
    repo.publish(roles=("timestamp",), bump=False)
    assert client.refresh(repo) == 0, client.last
    repo.rotate("timestamp")                 # the publisher rotates it away ...
    repo.timestamp.signed.version = 3        # ... and the repository carries on at its own count
    repo.publish(roles=("timestamp",), bump=False)
    assert client.refresh(repo) == 0, client.last
    assert client.version("timestamp") == 3, client.version("timestamp")
    return "trusted timestamp v1000 forgotten after the timestamp key rotation; v3 accepted"


@interop
def fast_forward_snapshot_recovery():
    repo, client = good_repo("i-ffsnapshot")
    repo.snapshot.signed.version = 1000       # the compromised snapshot key fast-forwards snapshot
    repo.publish(roles=("snapshot", "timestamp"), bump=False)
    repo.timestamp.signed.version += 1
    repo.publish(roles=("timestamp",), bump=False)
    assert client.refresh(repo) == 0, client.last
    assert client.version("snapshot") == 1000, client.version("snapshot")
    repo.rotate("snapshot")                   # the publisher rotates it away ...
    repo.snapshot.signed.version = 4          # ... and carries on at its own count
    repo.publish(roles=("snapshot",), bump=False)
    repo.timestamp.signed.version += 1
    repo.publish(roles=("timestamp",), bump=False)
    assert client.refresh(repo) == 0, client.last
    assert client.version("snapshot") == 4, client.version("snapshot")
    return ("snapshot key rotated after a fast-forward to v1000: the trusted timestamp (which pins "
            "snapshot v1000) and snapshot are both forgotten; snapshot v4 accepted")


@interop
def target_name_stays_inside():
    repo, client = fresh("i-names")
    repo.add_target("../../escape.txt", b"must stay in the target folder\n")
    repo.publish()
    rc = client.download(repo, "../../escape.txt")
    assert rc == 0, client.last
    assert client.stored("../../escape.txt") == repo.data["../../escape.txt"]
    assert not os.path.exists(os.path.join(client.dl, "..", "..", "escape.txt"))
    return "target '../../escape.txt' stored percent-encoded inside --target-dir"


# ---------------------------------------------------------------- attacks: each must exit 1


ATTACKS = {}


def attack(may_change=()):
    def wrap(fn):
        ATTACKS[fn.__name__] = (fn, set(may_change))
        return fn
    return wrap


def resign_as(repo, md, role_signers, path):
    repo.put(path, repo.sign(md, role_signers))


@attack()
def rollback_timestamp(repo, client):
    old = copy.deepcopy(repo.timestamp)
    old.signed.version = 1
    resign_as(repo, old, repo.signers["timestamp"], "timestamp.json")
    return "timestamp v1 served after v3 was trusted"


@attack()
def rollback_snapshot(repo, client):
    repo.snapshot.signed.version = 1
    repo.publish(roles=("snapshot",), bump=False)
    repo.publish(roles=("timestamp",))
    return "a new timestamp names snapshot v1 after v3 was trusted"


@attack(may_change={"timestamp.json"})
def rollback_targets(repo, client):
    repo.targets.signed.version = 1
    repo.publish(roles=("targets",), bump=False)
    repo.publish(roles=("snapshot", "timestamp"))
    return "a new snapshot lists targets v1 after v3 was trusted"


@attack(may_change={"timestamp.json"})
def rollback_snapshot_drops_role(repo, client):
    del repo.snapshot.signed.meta["targets.json"]
    repo.publish(roles=("snapshot", "timestamp"))
    return "a new snapshot no longer lists targets.json"


@attack()
def freeze_timestamp(repo, client):
    client.now = NOW + 8 * DAY
    return "the same metadata, 8 days later: timestamp expired"


@attack()
def freeze_timestamp_faketime(repo, client):
    client.fake_days = 8
    return "the same metadata, 8 days later by faketime (as the conformance suite does): timestamp expired"


@attack(may_change={"timestamp.json"})
def freeze_snapshot(repo, client):
    repo.timestamp.signed.expires = NOW + 60 * DAY
    repo.publish(roles=("timestamp",))
    client.now = NOW + 31 * DAY
    return "fresh timestamps, 31 days later: snapshot expired"


@attack(may_change={"timestamp.json", "snapshot.json"})
def freeze_targets(repo, client):
    repo.targets.signed.expires = NOW + 10 * DAY
    repo.publish()
    assert client.refresh(repo) == 0, client.last   # the client trusts targets that expire in 10 days
    client.snapshot_before()
    repo.timestamp.signed.expires = NOW + 60 * DAY
    repo.snapshot.signed.expires = NOW + 60 * DAY
    repo.publish(roles=("snapshot", "timestamp"))
    client.now = NOW + 11 * DAY
    return "fresh timestamp and snapshot, 11 days later: targets expired"


@attack()
def freeze_root(repo, client):
    for md in (repo.timestamp, repo.snapshot, repo.targets):
        md.signed.expires = NOW + 800 * DAY
    repo.publish()
    client.now = NOW + 366 * DAY
    client.snapshot_before()
    return "everything but root re-signed, 366 days later: root expired"


@attack()
def fast_forward_without_rotation(repo, client):
    repo.timestamp.signed.version = 1   # the repository "resets" without rotating the timestamp key
    repo.publish(roles=("timestamp",), bump=False)
    return "timestamp version reset to 1 with the same key"


@attack()
def revoked_timestamp_key(repo, client):
    old = list(repo.signers["timestamp"])
    repo.rotate("timestamp")
    repo.publish(roles=("timestamp",))
    assert client.refresh(repo) == 0, client.last      # the client learns root v2
    client.snapshot_before()
    repo.timestamp.signed.version = 9999
    resign_as(repo, repo.timestamp, old, "timestamp.json")
    return "timestamp v9999 signed by the key root v2 revoked"


@attack(may_change={"timestamp.json", "snapshot.json"})
def mix_and_match_targets(repo, client):
    other = copy.deepcopy(repo.targets)        # a valid targets file of another release
    other.signed.targets.clear()
    repo.publish(roles=("targets", "snapshot", "timestamp"))
    version = repo.targets.signed.version
    repo.snapshot.signed.meta["targets.json"] = MetaFile(
        version, length=len(open(os.path.join(repo.dir, "metadata", f"{version}.targets.json"), "rb").read()),
        hashes={"sha256": hashlib.sha256(open(os.path.join(repo.dir, "metadata",
                                                           f"{version}.targets.json"), "rb").read()).hexdigest()})
    repo.publish(roles=("snapshot", "timestamp"))
    other.signed.version = version
    resign_as(repo, other, repo.signers["targets"], f"{version}.targets.json")
    return "targets file swapped for another validly signed one; snapshot pins its hash"


@attack(may_change={"timestamp.json"})
def wrong_snapshot_hash(repo, client):
    written = repo.publish(roles=("snapshot", "timestamp"))
    data = written["snapshot"].replace(b'"_type"', b' "_type"', 1)   # same length is not required
    repo.put(f"{repo.snapshot.signed.version}.snapshot.json", data[: len(written["snapshot"])])
    return "snapshot bytes differ from the SHA-256 timestamp pins"


@attack(may_change={"timestamp.json"})
def wrong_snapshot_length(repo, client):
    written = repo.publish(roles=("snapshot", "timestamp"))
    repo.put(f"{repo.snapshot.signed.version}.snapshot.json", written["snapshot"] + b" " * 64)
    return "snapshot 64 bytes longer than timestamp pins"


@attack(may_change={"timestamp.json", "snapshot.json"})
def wrong_targets_hash(repo, client):
    written = repo.publish(roles=("targets",))
    data = written["targets"]
    version = repo.targets.signed.version
    repo.snapshot.signed.meta["targets.json"] = MetaFile(version, length=len(data),
                                                        hashes={"sha256": hashlib.sha256(b"other").hexdigest()})
    repo.publish(roles=("snapshot", "timestamp"))
    return "targets bytes differ from the SHA-256 snapshot pins"


@attack(may_change={"timestamp.json", "snapshot.json"})
def wrong_targets_length(repo, client):
    written = repo.publish(roles=("targets",))
    version = repo.targets.signed.version
    repo.snapshot.signed.meta["targets.json"] = MetaFile(version, length=len(written["targets"]) - 10)
    repo.publish(roles=("snapshot", "timestamp"))
    return "targets longer than the length snapshot pins"


@attack()
def endless_timestamp(repo, client):
    repo.put("timestamp.json", b"{" + b" " * (20 << 20))
    return "timestamp.json of 20 MiB (cap 16 KiB)"


@attack()
def endless_root(repo, client):
    repo.put("2.root.json", b"{" + b" " * (20 << 20))
    return "2.root.json of 20 MiB (cap 512 KB)"


@attack()
def endless_target(repo, client):
    path = os.path.join(repo.dir, "targets", "game")
    for name in os.listdir(path):
        with open(os.path.join(path, name), "ab") as f:
            f.write(os.urandom(5 << 20))
    return "the target file served 5 MiB longer than signed"


@attack()
def arbitrary_target(repo, client):
    path = os.path.join(repo.dir, "targets", "game")
    for name in os.listdir(path):
        data = open(os.path.join(path, name), "rb").read()
        with open(os.path.join(path, name), "wb") as f:
            f.write(b"X" + data[1:])
    return "target bytes replaced, same length"


@attack()
def root_threshold_not_met(repo, client):
    second = generate("ed25519")
    repo.root.signed.add_key(second.public_key, "root")
    repo.root.signed.roles["root"].threshold = 2
    repo.root.signed.version += 1
    repo.write_root(signers=repo.signers["root"])   # v2 needs 2 of its own keys: only 1 signs
    return "root v2 with threshold 2 signed by one key"


@attack(may_change={"timestamp.json", "snapshot.json"})
def targets_threshold_not_met(repo, client):
    second = generate("ed25519")
    repo.root.signed.add_key(second.public_key, "targets")
    repo.root.signed.roles["targets"].threshold = 2
    repo.root.signed.version += 1
    repo.write_root()
    assert client.refresh(repo) == 1, "root v2 made the old targets insufficient"
    client.snapshot_before()
    repo.publish()                                   # signed by one of the two targets keys
    return "targets threshold 2 in root v2, new targets signed by one key"


def threshold_met_by_alias(repo, client, keyid, public):
    """Lists the timestamp key again under `keyid` with `public` as its key text, raises the timestamp
    threshold to 2, and serves a timestamp whose second signature is the first one under the alias."""
    from securesystemslib.signer import SSlibKey
    import json
    key = repo.signers["timestamp"][0].public_key
    alias = SSlibKey(keyid, key.keytype, key.scheme, dict(key.keyval, public=public))
    repo.root.signed.keys[alias.keyid] = alias
    repo.root.signed.roles["timestamp"].keyids.append(alias.keyid)
    repo.root.signed.roles["timestamp"].threshold = 2
    repo.root.signed.version += 1
    repo.write_root()
    assert client.refresh(repo) == 1, "the old timestamp still met the new threshold"
    client.snapshot_before()
    written = repo.publish(roles=("timestamp",))
    envelope = json.loads(written["timestamp"])
    envelope["signatures"].append({"keyid": alias.keyid, "sig": envelope["signatures"][0]["sig"]})
    repo.put("timestamp.json", json.dumps(envelope).encode())


@attack()
def duplicate_key_counts_once(repo, client):
    public = repo.signers["timestamp"][0].public_key.keyval["public"]
    threshold_met_by_alias(repo, client, "ab" * 32, public)
    return "threshold 2 met only by one key listed under two key ids"


@attack()
def key_hex_case_counts_once(repo, client):
    public = repo.signers["timestamp"][0].public_key.keyval["public"]
    threshold_met_by_alias(repo, client, "cd" * 32, public.upper())
    return "threshold 2 met only by one key, listed again with its hex in upper case"


@attack()
def duplicate_signature_keyid(repo, client):
    import json
    written = repo.publish(roles=("timestamp",))
    envelope = json.loads(written["timestamp"])
    envelope["signatures"].append(dict(envelope["signatures"][0]))
    repo.put("timestamp.json", json.dumps(envelope).encode())
    return "timestamp whose signatures list the same key id twice"


@attack()
def initial_root_not_self_signed(repo, client):
    # The root a client was shipped with (here: its trusted copy) is signed by a key it does not list.
    forged = copy.deepcopy(repo.root)
    data = repo.sign(forged, [generate("ed25519")])
    with open(os.path.join(client.meta, "root.json"), "wb") as f:
        f.write(data)
    client.snapshot_before()
    return "trusted root.json whose own signatures do not meet its own root threshold"


@attack()
def bad_timestamp_signature(repo, client):
    repo.timestamp.signed.version += 1
    data = repo.sign(repo.timestamp, [generate("ed25519")])
    repo.put("timestamp.json", data)
    return "timestamp signed by a key the root does not list"


@attack()
def old_metadata_mirror(repo, client):
    folder = os.path.join(repo.dir, "metadata")
    shutil.rmtree(folder)
    os.makedirs(folder)
    for name, data in repo.first_release.items():
        repo.put(name, data)
    return "a mirror that stopped at the first release (all of its metadata)"


@attack(may_change={"timestamp.json", "snapshot.json", "targets.json"})
def delegated_wrong_key(repo, client):
    repo.delegate("targets", "dlc", paths=["dlc/*"])
    repo.add_target("dlc/pack.bin", b"dlc\n", role="dlc")
    repo.signers_of["dlc"] = [generate("ed25519")]   # signed by a key the delegation does not name
    repo.publish_all()
    client.target = "dlc/pack.bin"
    return "delegated role signed by a key its delegation does not name"


@attack(may_change={"timestamp.json", "snapshot.json", "targets.json"})
def delegated_outside_paths(repo, client):
    repo.delegate("targets", "dlc", paths=["dlc/*"])
    repo.add_target("game/cheat.bin", b"not the dlc's to sign\n", role="dlc")
    repo.publish_all()
    client.target = "game/cheat.bin"
    return "delegated role lists a target outside its paths"


def run_attack(name, fn, may_change):
    repo, client = good_repo("a-" + name)
    client.now = None
    client.fake_days = None
    client.target = "game/data.pak"
    client.before = client.trusted()
    client.snapshot_before = lambda: setattr(client, "before", client.trusted())
    detail = fn(repo, client)
    rc = client.download(repo, client.target, now=client.now, fake_days=client.fake_days)
    after = client.trusted()
    changed = {n for n in set(client.before) | set(after) if client.before.get(n) != after.get(n)}
    assert rc == 1, f"exit {rc}, expected 1 ({detail})"
    assert changed <= may_change, f"trusted metadata changed: {sorted(changed - may_change)} ({detail})"
    assert os.listdir(client.dl) == [], f"stored {os.listdir(client.dl)} ({detail})"
    return f"{detail} -> exit 1, refused: {client.last[:160]}"


def main():
    failures = 0
    for name, fn in INTEROP.items():
        if ONLY and name not in ONLY:
            continue
        try:
            print(f"PASS interop/{name}: {fn()}", flush=True)
        except Exception as error:
            failures += 1
            print(f"FAIL interop/{name}: {error!r}", flush=True)
            traceback.print_exc(file=sys.stderr)
    for name, (fn, may_change) in ATTACKS.items():
        if ONLY and name not in ONLY:
            continue
        try:
            print(f"PASS attack/{name}: {run_attack(name, fn, may_change)}", flush=True)
        except Exception as error:
            failures += 1
            print(f"FAIL attack/{name}: {error!r}", flush=True)
            traceback.print_exc(file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
