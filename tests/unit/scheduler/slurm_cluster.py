"""A real Slurm on this machine for the tests: munged, slurmctld, one slurmd per configured node, slurmrestd.

Debian bookworm's packages (``slurmctld slurmd slurmrestd munge slurm-client``, Slurm 22.05), started from a
generated ``slurm.conf`` in a temporary directory on free ports, nothing under /etc touched. Every node runs its
own ``slurmd -N NAME`` on its own port (NodeHostname=localhost, NodeAddr=127.0.0.1), so Slurm judges each one
itself: a node configured with ``Gres=gpu:8`` and no gres.conf reports no GPUs, and slurmctld sets it INVAL with
"gres/gpu count reported lower than configured (0 < 8)". slurmrestd refuses to run as root (and as SlurmUser), so
it runs as an unprivileged system user created here (``-u``), with rest_auth/jwt; tokens come from ``scontrol
token`` (auth/jwt as AuthAltTypes with a key file, https://slurm.schedmd.com/jwt.html).

Node names are HyperPod/ParallelCluster-style ``ip-10-0-1-N`` hostnames, so the one node identity maps them to
instances of a test inventory by their address, as it does on those clusters.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

BINARIES = ("munged", "slurmctld", "slurmd", "slurmrestd", "sinfo", "squeue", "scontrol", "sbatch")
INSTALL_HINT = ("install Debian's Slurm and munge (apt-get install slurmctld slurmd slurmrestd munge slurm-client) "
                "to run the real-Slurm tests; as root, since slurmd must start jobs")
REST_USER = "fmdoctor-slurmrest"
READY_TIMEOUT_S = 60.0

# slurmrestd loads only the Slurm API plugin: the slurmdbd ones (openapi/dbv0.0.NN) refuse to start without one
# name -> Gres; the healthy ones have none configured, so they register as configured
NODES = {"ip-10-0-1-11": "", "ip-10-0-1-12": "", "ip-10-0-1-13": "", "ip-10-0-1-14": "gpu:8"}


def missing() -> str | None:
    """Why the real-Slurm tests cannot run here, or None."""
    absent = [b for b in BINARIES if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]
    if absent:
        return f"{', '.join(absent)} not installed: {INSTALL_HINT}"
    if os.geteuid() != 0:
        return "the real-Slurm tests start slurmd and create a system user, which needs root"
    return None


def _free_ports(count: int) -> list[int]:
    sockets, ports = [], []
    for _ in range(count):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
        ports.append(int(s.getsockname()[1]))
    for s in sockets:
        s.close()
    return ports


def _sbin(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


@dataclass
class SlurmCluster:
    workdir: Path
    conf: Path
    rest_url: str

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, argv: Sequence[str]) -> str:
        done = subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=30, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {done.returncode}: {done.stderr}")
        return done.stdout

    def token(self, user: str = "root", lifespan: int = 900) -> str:
        out = self.run(["scontrol", "token", f"username={user}", f"lifespan={lifespan}"])
        return out.strip().removeprefix("SLURM_JWT=")

    def sbatch(self, name: str, nodes: Sequence[str]) -> str:
        out = self.run(["sbatch", "--parsable", "-J", name, "-N", str(len(nodes)), "-w", ",".join(nodes),
                        "--wrap", "sleep 600", "-o", "/dev/null"])
        job = out.strip().split(";")[0]
        self.wait(lambda: job in self.run(["squeue", "-h", "-t", "R", "-o", "%i"]).split(), f"job {job} running")
        return job

    def cancel_all(self) -> None:
        self.run(["scancel", "--user=root"])
        self.wait(lambda: not self.run(["squeue", "-h", "-o", "%i"]).strip(), "no jobs")

    def state(self, node: str) -> str:
        return self.run(["sinfo", "-h", "-N", "-n", node, "-o", "%T"]).strip()

    def drain(self, node: str, reason: str) -> None:
        self.run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"])

    def resume(self, node: str) -> None:
        self.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])

    @staticmethod
    def wait(ready: object, what: str, timeout: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():  # type: ignore[operator]
                return
            time.sleep(0.3)
        raise TimeoutError(f"Slurm: {what} not reached in {timeout:.0f}s")


def _ensure_rest_user() -> None:
    try:
        pwd.getpwnam(REST_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", REST_USER],
                       check=True, capture_output=True)


# ParallelCluster-style dynamic nodes (its slurm.conf: State=CLOUD, PrivateData=cloud so sinfo lists them while
# powered down, SuspendProgram/ResumeProgram its scripts): here the programs do nothing, so a node asked to power
# up stays POWERING_UP (never registers) as a real one does until its instance has booted.
CLOUD_CONF = ("PrivateData=cloud", "SuspendProgram=/bin/true", "ResumeProgram=/bin/true", "SuspendTime=600",
              "ResumeTimeout=600")


def _conf(d: Path, ports: list[int], cloud_nodes: str | None = None) -> str:
    ctld, rest, *node_ports = ports
    lines = [
        "ClusterName=fmdoctor-test", "SlurmctldHost=localhost(127.0.0.1)", f"SlurmctldPort={ctld}",
        "AuthType=auth/munge", f"AuthInfo=socket={d}/munge.sock", "CredType=cred/munge",
        "AuthAltTypes=auth/jwt", f"AuthAltParameters=jwt_key={d}/jwt.key",
        "SlurmUser=root", "SlurmdUser=root", f"StateSaveLocation={d}/state", f"SlurmdSpoolDir={d}/spool/%n",
        f"SlurmctldPidFile={d}/slurmctld.pid", f"SlurmdPidFile={d}/slurmd-%n.pid",
        f"SlurmctldLogFile={d}/slurmctld.log", f"SlurmdLogFile={d}/slurmd-%n.log",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
        "SwitchType=switch/none", "MpiDefault=none", "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
        "ReturnToService=2", "SlurmdTimeout=300", "GresTypes=gpu", "SchedulerParameters=sched_interval=1",
    ]
    for (name, gres), port in zip(NODES.items(), node_ports, strict=True):
        extra = f" Gres={gres}" if gres else ""
        lines.append(f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} CPUs=1 "
                     f"RealMemory=100{extra} State=UNKNOWN")
    if cloud_nodes:
        lines += [*CLOUD_CONF, f"NodeName={cloud_nodes} CPUs=1 RealMemory=100 State=CLOUD"]
    lines.append("PartitionName=train Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


@contextmanager
def slurm_cluster(cloud_nodes: str | None = None) -> Iterator[SlurmCluster]:
    """Start the cluster; yields it once every node has registered (the gres node INVAL, the others idle).
    ``cloud_nodes`` (a host list) adds powered-down CLOUD nodes as ParallelCluster's dynamic nodes are."""
    _ensure_rest_user()
    d = Path(tempfile.mkdtemp(prefix="fmdoctor-slurm-"))
    processes: list[subprocess.Popen[bytes]] = []
    started: list[Path] = []  # pid files of the daemons that fork
    try:
        d.chmod(0o755)  # slurmrestd (unprivileged) reads slurm.conf here
        (d / "state").mkdir()
        (d / "spool").mkdir()
        for key in ("munge.key", "jwt.key"):
            (d / key).write_bytes(secrets.token_bytes(64))
            (d / key).chmod(0o600)
        ports = _free_ports(2 + len(NODES))
        conf = d / "slurm.conf"
        conf.write_text(_conf(d, ports, cloud_nodes), encoding="utf-8")
        conf.chmod(0o644)
        env = {**os.environ, "SLURM_CONF": str(conf)}
        subprocess.run([_sbin("munged"), "-f", f"--key-file={d}/munge.key", f"--socket={d}/munge.sock",
                        f"--pid-file={d}/munged.pid", f"--log-file={d}/munged.log", f"--seed-file={d}/munged.seed"],
                       check=True, capture_output=True, timeout=30)
        started.append(d / "munged.pid")
        subprocess.run([_sbin("slurmctld"), "-f", str(conf)], check=True, capture_output=True, env=env, timeout=30)
        started.append(d / "slurmctld.pid")
        cluster = SlurmCluster(d, conf, f"http://127.0.0.1:{ports[1]}")
        cluster.wait(lambda: subprocess.run(["scontrol", "ping"], env=env, capture_output=True).returncode == 0,
                     "slurmctld answering")
        for name in NODES:
            subprocess.run([_sbin("slurmd"), "-f", str(conf), "-N", name], check=True, capture_output=True, env=env,
                           timeout=30)
            started.append(d / f"slurmd-{name}.pid")
        processes.append(subprocess.Popen(
            [_sbin("slurmrestd"), "-f", str(conf), "-a", "rest_auth/jwt", "-s", "openapi/v0.0.38", "-u", REST_USER,
             f"127.0.0.1:{ports[1]}"],
            env={**env, "SLURM_JWT": "daemon"}, stdout=(d / "slurmrestd.log").open("wb"), stderr=subprocess.STDOUT))

        def registered() -> bool:
            states = cluster.run(["sinfo", "-h", "-N", "-o", "%N %T"]).split("\n")
            seen = dict(line.split() for line in states if line.strip())
            return all(seen.get(n) in ("idle", "inval") for n in NODES)

        cluster.wait(registered, "every node registered")

        def rest_listening() -> bool:
            if processes[0].poll() is not None:
                raise RuntimeError(f"slurmrestd exited: {(d / 'slurmrestd.log').read_text()[-600:]}")
            with socket.socket() as probe:
                return probe.connect_ex(("127.0.0.1", ports[1])) == 0

        cluster.wait(rest_listening, "slurmrestd listening")
        yield cluster
    finally:
        for process in processes:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
        for pid_file in reversed(started):
            try:
                pid = int(pid_file.read_text().strip())
                os.kill(pid, 15)
            except (OSError, ValueError):
                continue
            _wait_gone(pid)
        shutil.rmtree(d, ignore_errors=True)


def _wait_gone(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except OSError:
            return
        time.sleep(0.1)
    with suppress(OSError):
        os.kill(pid, 9)
