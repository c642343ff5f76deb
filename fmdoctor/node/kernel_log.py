"""This boot's kernel messages, from the first source the node lets fmdoctor read.

``journalctl -k -b`` (this boot only, ISO timestamps), then ``dmesg --time-format iso`` (the ring buffer,
which can have wrapped), then /var/log/kern.log or /var/log/messages (several boots: lines from before the
boot time in /proc/uptime are dropped). Unprivileged users usually get none of them; that is reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from fmdoctor.engine.host import Host

COMMANDS = (
    ("journalctl -k -b", ("journalctl", "-k", "-b", "--no-pager", "-o", "short-iso")),
    ("dmesg", ("dmesg", "--time-format", "iso")),
)
FILES = ("/var/log/kern.log", "/var/log/messages")
_NO_PERMISSION = ("insufficient permissions", "not seeing messages", "operation not permitted", "permission denied")


@dataclass
class KernelLog:
    source: str | None = None
    text: str = ""
    boot_time: datetime | None = None  # set when the source spans boots and had to be cut
    attempts: list[str] = field(default_factory=list)  # why the sources before it were not used


def boot_time(host: Host, now: datetime) -> datetime | None:
    uptime = host.read_text("/proc/uptime")
    try:
        return now - timedelta(seconds=float((uptime or "").split()[0]))
    except (IndexError, ValueError):
        return None


def read_kernel_log(host: Host, now: datetime) -> KernelLog:
    log = KernelLog()
    for label, argv in COMMANDS:
        result = host.run(argv)
        complaint = f"{result.stdout}\n{result.stderr}".lower()
        if result.missing:
            log.attempts.append(f"{label}: not installed")
        elif not result.ok or any(text in complaint for text in _NO_PERMISSION):
            first = (result.stderr or result.stdout).strip().splitlines()[:1]
            log.attempts.append(f"{label}: {first[0] if first else f'exit {result.returncode}'}")
        else:
            log.source, log.text = label, result.stdout
            return log
    for path in FILES:
        text = host.read_text(path)
        if text is None:
            log.attempts.append(f"{path}: not readable")
            continue
        log.source, log.text, log.boot_time = path, text, boot_time(host, now)
        return log
    return log
