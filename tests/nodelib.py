"""Real nodes for the test plane: kubelet, kube-proxy and Debian's containerd, runc and CNI
plugins on this machine, so that pods run in containers that Kubernetes started.

Each node lives in a network namespace and a mount namespace of its own, as if it were a
machine: its kubelet, containerd (with every shim and container) and kube-proxy run inside
them. The network namespace gives each node its own address, ports (two kubelets both on 10250)
and iptables (kube-proxy's Service rules never touch the host's, nor another session's). The
mount namespace gives each node its own ``/var/log/pods`` and ``/run/containerd`` (the paths the
chart's DaemonSet and the kubelet's cAdvisor expect), and shows the kubelet the kernel settings
it insists on (below) without changing them for every process on the machine.

Layout for a cluster whose network octet is ``O`` (free /16 chosen at start, under a lock):

- a "switch" namespace ``spcO-sw`` holding a bridge; the host joins it on veth ``spcO``
  (``10.O.0.1``, where the API server binds) and node ``i`` on its ``eth0`` (``10.O.0.<i+1>``).
  Traffic between nodes is bridged there, so the host's iptables (Docker's FORWARD DROP) never
  sees it.
- node ``i``'s pods: the CNI ``bridge`` plugin on ``cni0`` inside the node, ``10.O.<i>.0/24``
  (host-local IPAM); every node and the host route the other pod ranges to their node.
- cgroups: kubelet's cgroupfs layout under ``/specon-nodes-O/<node>/kubepods/...`` in every
  hierarchy; containerd and its shims in ``/specon-nodes-O/<node>-runtime`` (pids), so the
  teardown ends exactly the processes these nodes started.
- cluster DNS: CoreDNS (built with the plane) in node 1's namespace on node 1's address, which
  every kubelet gives its pods as ``clusterDNS``; Services are kube-proxy's (iptables mode) in
  each node.
- images: containerd's content store is cached per slot under ``~/.cache/specon-nodes`` (a slot
  is locked while a node uses it); the images are ``docker save``d from the local engine and
  imported with ``ctr -n k8s.io images import`` only when their IDs changed. Nothing is pulled.

The kubelet refuses to start unless ``vm.overcommit_memory=1``, ``kernel.panic=10`` and
``kernel.panic_on_oops=1`` (it would set them machine-wide, for every other process on this
shared host too): inside each node's mount namespace those files of ``/proc/sys`` are covered by
files holding the values it wants; the host's settings are never written.

``RealCluster.start(bin_dir, workdir, images, count=2)`` builds all of it and returns the
cluster; ``stop()`` undoes it (processes by ID, namespaces, cgroups, interfaces).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml
from planelib import Component, Plane, PlaneError

CGROUP = Path("/sys/fs/cgroup")
CNI_BIN = Path(os.environ.get("SPECON_CNI_BIN") or "/usr/lib/cni")
CACHE = Path(os.environ.get("SPECON_NODE_CACHE") or (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specon-nodes"))
NET_LOCK = Path("/run/lock/specon-nodes.lock")
NODE_LABEL = "specon.test/real-node"
CLUSTER_DOMAIN = "cluster.local"
#: What kubelet 1.33 checks at start (container_manager_linux.go, setupKernelTunables).
KUBELET_SYSCTLS = {
    "vm/overcommit_memory": 1, "vm/panic_on_oom": 0, "kernel/panic": 10,
    "kernel/panic_on_oops": 1, "kernel/keys/root_maxkeys": 1000000,
    "kernel/keys/root_maxbytes": 25000000,
}
TOOLS = ("containerd", "containerd-shim-runc-v2", "runc", "ctr", "nsenter", "unshare", "ip",
         "iptables", "docker")
CNI_PLUGINS = ("bridge", "host-local", "loopback")
READY_TIMEOUT = 120.0


class NodeError(PlaneError):
    """A real node did not come up, or this machine cannot run one."""


def run(*argv: str, check: bool = True, timeout: float = 60,
        input: str | None = None) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=input)
    if check and res.returncode != 0:
        raise NodeError(f"{' '.join(argv)} failed ({res.returncode}): "
                        f"{(res.stderr or res.stdout).strip()}")
    return res


def missing_requirements() -> list[str]:
    """What this machine lacks to run real nodes (empty: nothing)."""
    out = []
    if os.geteuid() != 0:
        out.append("not root (kubelet and containerd need root)")
    out += [f"{t} not found" for t in TOOLS if shutil.which(t) is None]
    out += [f"CNI plugin {p} not in {CNI_BIN} (Debian: containernetworking-plugins)"
            for p in CNI_PLUGINS if not (CNI_BIN / p).exists()]
    if not hierarchies():
        out.append(f"no cgroup hierarchy under {CGROUP}")
    return out


# -- cgroups ---------------------------------------------------------------------------------
def hierarchies() -> dict[str, Path]:
    """The cgroup mounts under /sys/fs/cgroup: v1 hierarchies by their controller names
    ("cpu", "name=systemd", ...) and the v2 mount as "" (with controllers or not)."""
    found: dict[str, Path] = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, extra = left.split(), right.split()
        if len(fields) < 5 or len(extra) < 3:
            continue
        point = Path(fields[4])
        if point != CGROUP and CGROUP not in point.parents:
            continue
        if extra[0] == "cgroup2":
            found[""] = point
        elif extra[0] == "cgroup":
            opts = [o for o in extra[2].split(",") if o not in ("rw", "ro")
                    and not o.startswith(("release_agent", "clone_children", "nsdelegate"))]
            found[",".join(opts)] = point
    return found


def v2_only() -> bool:
    h = hierarchies()
    return list(h) == [""]


@dataclass
class CgroupTree:
    """``/specon-nodes-O`` in every hierarchy: the nodes' kubelet roots and runtime groups."""

    name: str

    def _dirs(self) -> list[Path]:
        return [mount / self.name for mount in hierarchies().values()]

    def create_node(self, node: str) -> tuple[str, Path]:
        """The kubelet cgroup root of ``node`` (``/name/node``) made in every hierarchy, and the
        runtime group's ``cgroup.procs`` to put containerd in."""
        h = hierarchies()
        if v2_only():
            root = h[""]
            wanted = set((root / "cgroup.controllers").read_text().split()) & {
                "cpu", "cpuset", "memory", "pids", "io", "hugetlb"}
            for parent in (root, root / self.name):
                parent.mkdir(exist_ok=True)
                for c in sorted(wanted):
                    with contextlib.suppress(OSError):
                        (parent / "cgroup.subtree_control").write_text(f"+{c}")
            (root / self.name / node).mkdir(exist_ok=True)
            (root / self.name / node / "kubepods").mkdir(exist_ok=True)
            runtime = root / self.name / f"{node}-runtime"
            runtime.mkdir(exist_ok=True)
            return f"/{self.name}/{node}", runtime / "cgroup.procs"
        for ctrl, mount in h.items():
            # The hybrid host's v2 mount (no controllers): runc makes each container's cgroup
            # there too (its PSI files: the agent reads cpu.pressure), below the node's folder.
            for d in (mount / self.name, mount / self.name / node,
                      mount / self.name / node / "kubepods"):
                d.mkdir(exist_ok=True)
                if "cpuset" in ctrl.split(","):
                    for f in ("cpuset.cpus", "cpuset.mems"):
                        if not (d / f).read_text().strip():
                            (d / f).write_text((d.parent / f).read_text())
        pids = next(m for c, m in h.items() if "pids" in c.split(","))
        runtime = pids / self.name / f"{node}-runtime"
        runtime.mkdir(exist_ok=True)
        return f"/{self.name}/{node}", runtime / "cgroup.procs"

    def cap_cpu(self, node: str, cores: float) -> None:
        """Cap ``node``'s kubelet root at ``cores`` CPUs (CFS quota per 100 ms period): the node
        then runs no faster than a machine of that many cores, whatever this host has. On cgroup
        v1 the kernel refuses a child a quota above its parent's (EINVAL), so a pod's CPU
        limit on such a node must not exceed the cap."""
        quota = max(1000, round(cores * 100_000))
        h = hierarchies()
        if v2_only():
            (h[""] / self.name / node / "cpu.max").write_text(f"{quota} 100000")
            return
        cpu = next(m for c, m in h.items() if "cpu" in c.split(","))
        (cpu / self.name / node / "cpu.cfs_period_us").write_text("100000")
        (cpu / self.name / node / "cpu.cfs_quota_us").write_text(str(quota))

    def kubepods_binds(self, node: str) -> list[tuple[Path, Path]]:
        """What makes ``node`` look like a machine of its own to the chart's DaemonSet: in the
        node's mount namespace, its kubelet's pods subtree (``/name/node/kubepods``) is bound at
        the canonical ``<hierarchy>/kubepods`` of each hierarchy the agent mounts (those with
        ``cpu`` or ``cpuacct``, and the v2 mount: on a hybrid host its ``unified`` one), where a
        cgroupfs-driver kubelet on a real host keeps it: one ``agent.cgroup.kubepodsPath``
        (``kubepods``, docs/user-guide.md) then serves both nodes. The mount points are empty
        cgroups on the host, left in place (a concurrent session's node may be bound on
        them)."""
        out = []
        for ctrl, mount in hierarchies().items():
            # the v2 mount: the hierarchy (v2 only) or, on a hybrid host, the PSI files
            wanted = ({"cpu", "cpuacct"} & set(ctrl.split(","))) if ctrl else True
            if wanted:
                out.append((mount / self.name / node / "kubepods", mount / "kubepods"))
        return out

    def pids(self) -> set[int]:
        out: set[int] = set()
        for d in self._dirs():
            for procs in d.rglob("cgroup.procs") if d.is_dir() else ():
                with contextlib.suppress(OSError):
                    out |= {int(p) for p in procs.read_text().split()}
        return out

    def kill_all(self, timeout: float = 20) -> None:
        """SIGKILL every process in the tree (containers, shims, containerd), until none is
        left."""
        deadline = time.monotonic() + timeout
        while (left := self.pids()) and time.monotonic() < deadline:
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)

    def remove(self) -> None:
        for d in self._dirs():
            if not d.is_dir():
                continue
            for sub in sorted((p for p in d.rglob("*") if p.is_dir()),
                              key=lambda p: len(p.parts), reverse=True):
                with contextlib.suppress(OSError):
                    sub.rmdir()
            with contextlib.suppress(OSError):
                d.rmdir()


# -- the network -----------------------------------------------------------------------------
@dataclass
class NodeNetwork:
    """The nodes' network (module docstring); ``octet`` is O in 10.O.0.0/16."""

    octet: int
    size: int
    created: list[str] = field(default_factory=list)  # netns names, for the teardown

    @property
    def tag(self) -> str:
        return f"spc{self.octet}"

    @property
    def host_ip(self) -> str:
        return f"10.{self.octet}.0.1"

    @property
    def cluster_cidr(self) -> str:
        return f"10.{self.octet}.0.0/16"

    def node_ip(self, i: int) -> str:
        return f"10.{self.octet}.0.{i + 1}"

    def pod_cidr(self, i: int) -> str:
        return f"10.{self.octet}.{i}.0/24"

    def netns(self, i: int) -> str:
        return f"{self.tag}-n{i}"

    @property
    def switch(self) -> str:
        return f"{self.tag}-sw"

    @classmethod
    def create(cls, size: int) -> NodeNetwork:
        """Pick a free 10.O.0.0/16 (not used by any address, route or namespace here) and build
        the switch, the host's port on it and one namespace per node."""
        NET_LOCK.parent.mkdir(parents=True, exist_ok=True)
        with NET_LOCK.open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            reap_stale()
            used = run("ip", "-4", "-o", "addr").stdout + run("ip", "-4", "route").stdout
            netns = set(run("ip", "netns", "list").stdout.split())
            for octet in range(100, 250):
                if octet == 96 or f" 10.{octet}." in used or f"\n10.{octet}." in used \
                        or used.startswith(f"10.{octet}.") \
                        or any(n.startswith(f"spc{octet}-") for n in netns):
                    continue
                net = cls(octet, size)
                _owner_file(octet).write_text(f"{os.getpid()} {_start_time(os.getpid())}\n")
                try:
                    net._build()
                except BaseException:
                    net.destroy()
                    raise
                return net
        raise NodeError("no free 10.O.0.0/16 for the nodes' network")

    def _add_netns(self, name: str) -> None:
        run("ip", "netns", "add", name)
        self.created.append(name)
        run("ip", "-n", name, "link", "set", "lo", "up")

    def _build(self) -> None:
        sw, tag = self.switch, self.tag
        self._add_netns(sw)
        run("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
        run("ip", "-n", sw, "link", "set", "br0", "up")
        run("ip", "link", "add", tag, "type", "veth", "peer", "name", "host", "netns", sw)
        run("ip", "addr", "add", f"{self.host_ip}/24", "dev", tag)
        run("ip", "link", "set", tag, "up")
        run("ip", "-n", sw, "link", "set", "host", "master", "br0", "up")
        for i in range(1, self.size + 1):
            ns = self.netns(i)
            self._add_netns(ns)
            run("ip", "-n", sw, "link", "add", f"n{i}", "type", "veth", "peer", "name", "eth0",
                "netns", ns)
            run("ip", "-n", sw, "link", "set", f"n{i}", "master", "br0", "up")
            run("ip", "-n", ns, "addr", "add", f"{self.node_ip(i)}/24", "dev", "eth0")
            run("ip", "-n", ns, "link", "set", "eth0", "up")
            run("ip", "-n", ns, "route", "add", "default", "via", self.host_ip)
            run("ip", "route", "add", self.pod_cidr(i), "via", self.node_ip(i), "dev", tag)
        for i in range(1, self.size + 1):
            for j in range(1, self.size + 1):
                if i != j:
                    run("ip", "-n", self.netns(i), "route", "add", self.pod_cidr(j), "via",
                        self.node_ip(j))

    def note_mount_namespace(self, path: Path) -> None:
        """Record a node's mount namespace file, for :func:`reap_stale`."""
        with _owner_file(self.octet).open("a") as f:
            f.write(f"mntns {path}\n")

    def note_process(self, pid: int) -> None:
        """Record a process outside the nodes' cgroups and namespaces (the plane's), for
        :func:`reap_stale`."""
        with _owner_file(self.octet).open("a") as f:
            f.write(f"proc {pid} {_start_time(pid)}\n")

    def destroy(self) -> None:
        """Delete the namespaces (their interfaces, the host's port and its routes go too)."""
        for name in reversed(self.created):
            run("ip", "netns", "del", name, check=False)
        self.created.clear()
        run("ip", "link", "del", self.tag, check=False)
        _owner_file(self.octet).unlink(missing_ok=True)


def _owner_file(octet: int) -> Path:
    return NET_LOCK.parent / f"specon-nodes-{octet}.owner"


def _start_time(pid: int) -> str:
    """A process's start time (field 22 of /proc/PID/stat): with the PID, it names the process
    even once the PID is reused."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def reap_stale() -> list[int]:
    """Undo the nodes of a test session that died without its teardown (killed, out of
    memory): its owner file names a process that no longer runs. Its containers, shims and
    containerds are found by their cgroups (``/specon-nodes-O``), its kubelets and proxies by
    the namespaces they run in; only those are ended. Returns the octets reaped."""
    reaped = []
    for owner in NET_LOCK.parent.glob("specon-nodes-*.owner"):
        try:
            octet = int(owner.name.split("-")[2].split(".")[0])
            first, *notes = owner.read_text().splitlines()
            pid_text, _, started = first.strip().partition(" ")
            pid = int(pid_text)
        except (ValueError, IndexError, OSError):
            continue
        if _start_time(pid) == started and started:
            continue  # its session still runs
        net = NodeNetwork(octet, 0)
        netns = [n for n in run("ip", "netns", "list").stdout.split()
                 if n.startswith(f"{net.tag}-")]
        for name in netns:
            for pid_in in run("ip", "netns", "pids", name, check=False).stdout.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid_in), signal.SIGKILL)
        tree = CgroupTree(f"specon-nodes-{octet}")
        tree.kill_all()
        for note in notes:  # the nodes' mount namespaces, kept by a bind mount each
            kind, _, rest = note.partition(" ")
            if kind == "mntns":
                run("umount", rest, check=False)
            elif kind == "proc":
                proc_pid, _, proc_start = rest.partition(" ")
                if proc_start and _start_time(int(proc_pid)) == proc_start:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(proc_pid), signal.SIGKILL)
        net.created = netns
        net.destroy()
        tree.remove()
        reaped.append(octet)
    return reaped


# -- images ----------------------------------------------------------------------------------
PAUSE_IMAGE = "specon.test/pause:3.10.1"
SCHEDULER_REPOSITORY = "specon.test/kube-scheduler"
IMAGE_LABEL = "org.specon.test=nodes"


def docker_build(tag: str, context: Path, dockerfile: str, **build_args: str) -> None:
    """``docker build`` on the local engine (labelled, so what the tests made is known)."""
    (context / "Dockerfile").write_text(dockerfile)
    args = [a for k, v in build_args.items() for a in ("--build-arg", f"{k}={v}")]
    run("docker", "build", "-q", "--network", "none", "--label", IMAGE_LABEL, "-t", tag, *args,
        str(context),
        timeout=900)


def build_system_images(bin_dir: Path, base_image: str, workdir: Path) -> dict[str, str]:
    """The images a cluster needs besides the project's, made from the plane's binaries: the
    pause image (FROM scratch, the static pause built by build.sh) and kube-scheduler (the
    plane's binary on the local base image), for the chart's specon-scheduler."""
    version = run(str(bin_dir / "kube-scheduler"), "--version").stdout.split()[-1]
    ctx = workdir / "pause-image"
    ctx.mkdir(parents=True, exist_ok=True)
    shutil.copy2(bin_dir / "pause", ctx / "pause")
    docker_build(PAUSE_IMAGE, ctx, "FROM scratch\nCOPY pause /pause\nUSER 65535:65535\n"
                 'ENTRYPOINT ["/pause"]\n')
    ctx = workdir / "scheduler-image"
    ctx.mkdir(parents=True, exist_ok=True)
    shutil.copy2(bin_dir / "kube-scheduler", ctx / "kube-scheduler")
    scheduler = f"{SCHEDULER_REPOSITORY}:{version}"
    docker_build(scheduler, ctx, "ARG BASE\nFROM ${BASE}\n"
                 "COPY kube-scheduler /usr/local/bin/kube-scheduler\n"
                 "USER 65532:65532\n", BASE=base_image)
    return {"pause": PAUSE_IMAGE, "scheduler": scheduler}


def docker_image_id(name: str) -> str:
    return run("docker", "image", "inspect", "--format", "{{.Id}}", name).stdout.strip()


def import_images(sockets: Sequence[tuple[Path, Path]], images: Sequence[str]) -> None:
    """Put ``images`` (local Docker names) into each containerd (socket, marker file): one
    ``docker save`` of those a node lacks (by image ID), streamed to every ``ctr import``."""
    ids = {img: docker_image_id(img) for img in images}
    todo: list[tuple[Path, Path, dict[str, str]]] = []
    for sock, marker in sockets:
        have = json.loads(marker.read_text()) if marker.exists() else {}
        if any(have.get(img) != ident for img, ident in ids.items()):
            todo.append((sock, marker, have))
    if not todo:
        return
    names = sorted({img for _, _, have in todo for img in images if have.get(img) != ids[img]})
    save = subprocess.Popen(["docker", "save", *names], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    ctrs = [subprocess.Popen(["ctr", "--address", str(sock), "-n", "k8s.io", "images",
                              "import", "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT) for sock, _, _ in todo]
    assert save.stdout is not None
    try:
        while chunk := save.stdout.read(1 << 20):
            for c in ctrs:
                assert c.stdin is not None
                c.stdin.write(chunk)
    finally:
        for c in ctrs:
            assert c.stdin is not None
            with contextlib.suppress(BrokenPipeError):
                c.stdin.close()
    if save.wait() != 0:
        raise NodeError(f"docker save {' '.join(names)}: {save.stderr.read().decode()[-500:]}"
                        if save.stderr else "docker save failed")
    for c, (sock, marker, have) in zip(ctrs, todo, strict=True):
        out = c.stdout.read().decode() if c.stdout else ""
        if c.wait() != 0:
            raise NodeError(f"ctr images import into {sock}: {out[-1000:]}")
        have.update({img: ids[img] for img in names})
        marker.write_text(json.dumps(have, indent=1))


def _no_sys_resource() -> bool:
    """True when this process's bounding set lacks CAP_SYS_RESOURCE (bit 24)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapBnd:"):
            return not int(line.split()[1], 16) >> 24 & 1
    return False


# -- one node --------------------------------------------------------------------------------
def _lock_slot(prefix: str) -> tuple[Path, IO[str]]:
    """The first free cache slot (its folder and the open, locked lock file)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    for slot in range(64):
        f = (CACHE / f"{prefix}-{slot}.lock").open("w")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            continue
        d = CACHE / f"{prefix}-{slot}"
        d.mkdir(exist_ok=True)
        return d, f
    raise NodeError(f"all 64 cache slots of {CACHE} are in use")


@dataclass
class RealNode:
    """One node: its namespaces, containerd, kubelet and kube-proxy (all :class:`Component`)."""

    name: str
    index: int
    workdir: Path
    net: NodeNetwork
    cgroup_root: str = ""
    #: CPUs the node may use (None: the host's): its cgroup's cap, and its kubelet's allocatable
    cpu_cap: float | None = None
    components: dict[str, Component] = field(default_factory=dict)
    slot: Path | None = None
    _slot_lock: IO[str] | None = None

    @property
    def ip(self) -> str:
        return self.net.node_ip(self.index)

    @property
    def netns(self) -> str:
        return self.net.netns(self.index)

    @property
    def mntns(self) -> Path:
        return self.workdir / "mntns"

    @property
    def containerd_socket(self) -> Path:
        """The socket as this (the host's) mount namespace sees it."""
        return self.workdir / "run-containerd" / "containerd.sock"

    @property
    def pod_log_dir(self) -> Path:
        """The node's /var/log/pods, as the host sees it."""
        return self.workdir / "var-log-pods"

    def enter(self, *argv: str, net: bool = True) -> list[str]:
        """``argv`` run inside this node's namespaces."""
        return ["nsenter", *([f"--net=/run/netns/{self.netns}"] if net else []),
                f"--mount={self.mntns}", "--", *argv]

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run("ctr", "--address", str(self.containerd_socket), "-n", "k8s.io", *args,
                   check=check)

    # -- set-up --------------------------------------------------------------------------------
    def prepare(self, tree: CgroupTree) -> None:
        """Cgroups, the cache slot, the mount namespace and containerd's configuration."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "logs").mkdir(exist_ok=True)
        self.cgroup_root, self._runtime_procs = tree.create_node(self.name)
        if self.cpu_cap is not None:
            tree.cap_cpu(self.name, self.cpu_cap)
        self.slot, self._slot_lock = _lock_slot("containerd")
        for d in ("run-containerd", "var-log-pods", "cni-conf", "cni-ipam", "kubelet",
                  "sysctl"):
            (self.workdir / d).mkdir(exist_ok=True)
        # The mount namespace: created once, kept by a bind mount of its file.
        self.mntns.touch()
        run("unshare", f"--mount={self.mntns}", "--propagation", "private", "true")
        self.net.note_mount_namespace(self.mntns)
        binds = [(self.workdir / "run-containerd", Path("/run/containerd")),
                 (self.pod_log_dir, Path("/var/log/pods")), *tree.kubepods_binds(self.name)]
        for key, value in KUBELET_SYSCTLS.items():
            proc = Path("/proc/sys") / key
            if proc.read_text().strip() != str(value):
                f = self.workdir / "sysctl" / key.replace("/", ".")
                f.write_text(f"{value}\n")
                binds.append((f, proc))
        for _, target in binds:
            if not str(target).startswith("/proc/") and not target.exists():
                target.mkdir(parents=True)  # an empty mount point on the host
        script = " && ".join(f"mount --bind '{src}' '{dst}'" for src, dst in binds)
        run(*self.enter("sh", "-c", script, net=False))
        self._write_containerd_config()
        self._write_cni_config()

    def _write_containerd_config(self) -> None:
        assert self.slot is not None
        cfg = f"""version = 2
root = "{self.slot / 'root'}"
state = "/run/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "{self.slot / 'opt'}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  # Pods' network namespaces pinned under the node's own /run/containerd, not the host's
  # /run/netns (where they would outlive the node as empty files).
  netns_mounts_under_state_dir = true
  # Root here lacks CAP_SYS_RESOURCE, so no process may lower its OOM score below its parent's
  # (the kubelet asks -998 for every pod sandbox: runc's "failed to update
  # /proc/self/oom_score_adj: Permission denied"); containerd then clamps it to its own.
  restrict_oom_score_adj = {str(_no_sys_resource()).lower()}
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{self.workdir / 'cni-conf'}"
"""
        (self.workdir / "containerd.toml").write_text(cfg)

    def _write_cni_config(self) -> None:
        conf = {"cniVersion": "1.0.0", "name": "specon-pods", "plugins": [{
            "type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False,
            "hairpinMode": True,
            "ipam": {"type": "host-local", "dataDir": str(self.workdir / "cni-ipam"),
                     "ranges": [[{"subnet": self.net.pod_cidr(self.index)}]],
                     "routes": [{"dst": "0.0.0.0/0"}]},
        }]}
        (self.workdir / "cni-conf" / "10-specon.conflist").write_text(json.dumps(conf, indent=1))

    def start_containerd(self) -> None:
        argv = ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self._runtime_procs),
                *self.enter("containerd", "--config", str(self.workdir / "containerd.toml"))]
        comp = Component(f"{self.name}-containerd", argv, self.workdir / "logs" / "containerd.log")
        self.components["containerd"] = comp
        comp.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if not comp.running():
                raise NodeError(f"containerd of {self.name} exited:\n{comp.tail()}")
            if self.containerd_socket.exists() and self.ctr("version", check=False).returncode == 0:
                break
            time.sleep(0.2)
        else:
            raise NodeError(f"containerd of {self.name} not answering:\n{comp.tail()}")
        # Containers a previous session left in this cache slot are not this node's.
        for kind in ("containers",):
            ids = self.ctr(kind, "ls", "-q", check=False).stdout.split()
            if ids:
                self.ctr("tasks", "kill", "-s", "SIGKILL", *ids, check=False)
                self.ctr(kind, "rm", *ids, check=False)

    def start_kubelet(self, plane: Plane, bin_dir: Path, dns_ip: str) -> None:
        crt, key = plane.client_cert(f"kubelet-{self.name}", f"system:node:{self.name}",
                                     ["system:nodes"])
        kubeconfig = plane.cert_kubeconfig(self.workdir / "kubelet.kubeconfig", crt, key,
                                           f"system:node:{self.name}")
        cfg = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "address": self.ip, "port": 10250, "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": 10248,
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(plane.ca_file)}},
            "authorization": {"mode": "Webhook"},
            "cgroupDriver": "cgroupfs", "cgroupRoot": self.cgroup_root,
            "containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
            "clusterDNS": [dns_ip], "clusterDomain": CLUSTER_DOMAIN,
            # Pods get the cluster DNS only; nothing outside this machine is reachable anyway.
            "resolvConf": "",
            "failSwapOn": False,
            "serializeImagePulls": False,
            # A shared test machine: never evict pods for the host's own use of memory or disk.
            "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%",
                             "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
            "imageGCHighThresholdPercent": 100,
            "nodeStatusUpdateFrequency": "5s",
            "syncFrequency": "10s",
            "shutdownGracePeriod": "0s",
        }
        if self.cpu_cap is not None:
            # allocatable = the cap: the scheduler sees the node as the machine it stands for
            host_m = 1000 * (os.cpu_count() or 1)
            cfg["systemReserved"] = {"cpu": f"{max(0, host_m - round(self.cpu_cap * 1000))}m"}
        cfg_path = self.workdir / "kubelet.yaml"
        cfg_path.write_text(yaml.safe_dump(cfg))
        argv = self.enter(
            str(bin_dir / "kubelet"), f"--config={cfg_path}", f"--kubeconfig={kubeconfig}",
            f"--root-dir={self.workdir / 'kubelet'}",
            f"--cert-dir={self.workdir / 'kubelet' / 'pki'}",
            f"--hostname-override={self.name}", f"--node-ip={self.ip}",
            f"--node-labels={NODE_LABEL}=true", "--v=2")
        comp = Component(f"{self.name}-kubelet", argv, self.workdir / "logs" / "kubelet.log")
        self.components["kubelet"] = comp
        comp.start()

    def start_kube_proxy(self, plane: Plane, bin_dir: Path) -> None:
        crt, key = plane.client_cert(f"kube-proxy-{self.name}", "system:kube-proxy")
        kubeconfig = plane.cert_kubeconfig(self.workdir / "kube-proxy.kubeconfig", crt, key,
                                           "system:kube-proxy")
        cfg = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "mode": "iptables", "clusterCIDR": self.net.cluster_cidr,
            "hostnameOverride": self.name, "bindAddress": self.ip,
            "healthzBindAddress": f"{self.ip}:10256", "metricsBindAddress": "127.0.0.1:10249",
            # Machine-wide conntrack settings are left alone (0: do not touch).
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s",
                          "tcpCloseWaitTimeout": "0s"},
            "iptables": {"syncPeriod": "10s", "minSyncPeriod": "0s"},
        }
        cfg_path = self.workdir / "kube-proxy.yaml"
        cfg_path.write_text(yaml.safe_dump(cfg))
        comp = Component(f"{self.name}-kube-proxy",
                         self.enter(str(bin_dir / "kube-proxy"), f"--config={cfg_path}"),
                         self.workdir / "logs" / "kube-proxy.log")
        self.components["kube-proxy"] = comp
        comp.start()

    # -- teardown ------------------------------------------------------------------------------
    def stop(self) -> None:
        for name in ("kube-proxy", "kubelet"):
            comp = self.components.get(name)
            if comp is not None:
                comp.stop(grace=10)

    def release(self) -> None:
        comp = self.components.get("containerd")
        if comp is not None:
            comp.stop(grace=10)
        if self.mntns.exists():
            run("umount", str(self.mntns), check=False)
        if self._slot_lock is not None:
            self._slot_lock.close()
            self._slot_lock = None


# -- the cluster -------------------------------------------------------------------------------
@dataclass
class RealCluster:
    """The plane (real-node flavour), the network, the nodes and the cluster DNS."""

    plane: Plane
    net: NodeNetwork
    tree: CgroupTree
    nodes: list[RealNode]
    bin_dir: Path
    workdir: Path
    coredns: Component | None = None
    startup_seconds: float = 0.0

    @property
    def node_names(self) -> list[str]:
        return [n.name for n in self.nodes]

    @classmethod
    def start(cls, bin_dir: Path, workdir: Path, images: Sequence[str], count: int = 2,
              prefix: str = "real", cpu_caps: Sequence[float] | None = None) -> RealCluster:
        """``cpu_caps``: one cap per node (CgroupTree.cap_cpu; the kubelet reserves the rest
        of the host's CPUs, so that the node's allocatable is its cap), or None: uncapped."""
        problems = missing_requirements()
        if problems:
            raise NodeError("cannot run real nodes here: " + "; ".join(problems))
        t0 = time.monotonic()
        net = NodeNetwork.create(count)
        tree = CgroupTree(f"specon-nodes-{net.octet}")
        plane = Plane(bin_dir=bin_dir, workdir=workdir / "plane", address=net.host_ip,
                      real_nodes=True)
        if cpu_caps is not None and len(cpu_caps) != count:
            raise NodeError(f"{len(cpu_caps)} CPU caps for {count} nodes")
        nodes = [RealNode(f"{prefix}-{i}", i, workdir / f"{prefix}-{i}", net,
                          cpu_cap=cpu_caps[i - 1] if cpu_caps is not None else None)
                 for i in range(1, count + 1)]
        cluster = cls(plane, net, tree, nodes, bin_dir, workdir)
        try:
            try:
                plane.start()
            finally:
                for comp in plane.components.values():
                    if comp.proc is not None:
                        net.note_process(comp.proc.pid)
            for node in nodes:
                node.prepare(tree)
                node.start_containerd()
            import_images([(n.containerd_socket, n.slot / "imported.json") for n in nodes
                           if n.slot is not None], [PAUSE_IMAGE, *images])
            dns_ip = nodes[0].ip
            for node in nodes:
                node.start_kubelet(plane, bin_dir, dns_ip)
                node.start_kube_proxy(plane, bin_dir)
            cluster._start_coredns()
            cluster.wait_ready()
        except BaseException:
            cluster.stop()
            raise
        cluster.startup_seconds = time.monotonic() - t0
        return cluster

    def _start_coredns(self) -> None:
        first = self.nodes[0]
        corefile = self.workdir / "Corefile"
        corefile.write_text(f""".:53 {{
    errors
    health {first.ip}:8080
    ready {first.ip}:8181
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {self.plane.kubeconfig} admin
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
    cache 5
    loadbalance
}}
""")
        self.coredns = Component("coredns", first.enter(
            str(self.bin_dir / "coredns"), "-conf", str(corefile)),
            self.workdir / "coredns.log")
        self.coredns.start()

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        pending = set(self.node_names)
        while time.monotonic() < deadline:
            for node in self.nodes:
                for comp in node.components.values():
                    if not comp.running():
                        raise NodeError(f"{comp.name} exited:\n{comp.tail()}")
            if self.coredns is not None and not self.coredns.running():
                raise NodeError(f"coredns exited:\n{self.coredns.tail()}")
            res = self.plane.kubectl("get", "nodes", "-o", "json", check=False)
            if res.returncode == 0:
                for item in json.loads(res.stdout)["items"]:
                    conds = {c["type"]: c["status"]
                             for c in item.get("status", {}).get("conditions", [])}
                    taints = [t["key"] for t in item.get("spec", {}).get("taints") or []]
                    if conds.get("Ready") == "True" and not taints:
                        pending.discard(item["metadata"]["name"])
            if not pending:
                return
            time.sleep(0.5)
        raise NodeError(f"nodes not Ready after {timeout:.0f} s: {sorted(pending)}\n"
                        + self.log_tails())

    def stop(self) -> None:
        """Undo everything, in reverse: kubelets and proxies, every process in the nodes'
        cgroups (containers, shims, containerd), the plane, DNS, namespaces, cgroups."""
        for node in self.nodes:
            with contextlib.suppress(Exception):
                node.stop()
        if self.coredns is not None:
            self.coredns.stop()
        for node in self.nodes:
            with contextlib.suppress(Exception):
                node.release()
        self.tree.kill_all()
        self.plane.stop()
        self.net.destroy()
        self.tree.remove()

    # -- diagnostics ---------------------------------------------------------------------------
    def components(self) -> Iterator[Component]:
        yield from self.plane.components.values()
        for node in self.nodes:
            yield from node.components.values()
        if self.coredns is not None:
            yield self.coredns

    def log_tails(self, lines: int = 25) -> str:
        return "\n".join(f"--- {c.name} ({c.log}) ---\n{c.tail(lines)}"
                         for c in self.components())

    def describe(self) -> dict[str, Any]:
        return {"octet": self.net.octet, "nodes": {n.name: n.ip for n in self.nodes},
                "apiserver": self.plane.server}
