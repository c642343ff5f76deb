"""Values placed in shell command lines: always one word, and never a value the command cannot take.

A runbook's commands are pasted into a shell at 3 a.m.; the values in them come from the account (S3 keys,
tags, names) or from a model. :class:`ShellScanner` follows the quoting state of the literal command text
(unquoted, inside ``'...'``, inside ``"..."``, in ``$(...)``, in ``$((...))``, in a here-document) and
:func:`place` writes a value so that the shell reads exactly that value as part of the current word:
``shlex.quote`` where unquoted, leaving and re-entering the surrounding quotes where quoted, so an author
may write ``"$(dirname {{ x }})"`` or ``'...{{ x }}...'`` and the value still cannot break out.

Values that cannot be what the command needs are refused (:class:`Refused`) rather than quoted: control
and hidden characters (a newline ends the command; a bidi override makes the line read differently from
what runs), anything but a number in arithmetic, a word starting with ``-`` (read as an option), and, by the
option or filter in front of them, values that are not an AWS id, region, name or S3 URI of the documented
form (EC2 ids ``sg-``/``i-``/``subnet-``... of 8 or 17 hex digits; SageMaker names
``^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$``; S3 bucket naming rules).
"""

from __future__ import annotations

import re
import shlex

from fmdoctor.safety.text import control, hidden

UNQUOTED, SINGLE, DOUBLE, ARITHMETIC, HEREDOC = "unquoted", "single", "double", "arithmetic", "heredoc"
_SAFE = re.compile(r"[\w@%+=:,./-]+", re.ASCII)  # shlex.quote leaves these unquoted
_DOUBLE_SPECIAL = frozenset('"\\$`!')
_NUMBER = re.compile(r"-?\d+(\.\d+)?")
_HEREDOC = re.compile(r"(?<!<)<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")


class Refused(ValueError):
    """The value cannot be placed here; ``reason`` is plain words without quotes (it is shown inside the
    command line, where it must not change the quoting)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _ec2(prefix: str, what: str) -> tuple[re.Pattern[str], str]:
    return re.compile(rf"{prefix}-[0-9a-f]{{8}}(?:[0-9a-f]{{9}})?"), f"{what} id ({prefix}-...)"


_SAGEMAKER_NAME = (re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}"), "SageMaker name")
_RULES: dict[str, tuple[re.Pattern[str], str]] = {
    "region": (re.compile(r"[a-z]{2,4}(-[a-z]+)+-\d{1,2}"), "AWS region"),
    "instance": _ec2("i", "instance"),
    "target": (re.compile(r"m?i-[0-9a-f]{8}(?:[0-9a-f]{9})?"), "instance id (i-...)"),
    "security-group": _ec2("sg", "security group"),
    "subnet": _ec2("subnet", "subnet"),
    "vpc": _ec2("vpc", "VPC"),
    "route-table": _ec2("rtb", "route table"),
    "network-acl": _ec2("acl", "network ACL"),
    "interface": _ec2("eni", "network interface"),
    "vpc-endpoint": _ec2("vpce", "VPC endpoint"),
    "file-system": (re.compile(r"fs-[0-9a-f]{8}(?:[0-9a-f]{9})?"), "FSx file system id (fs-...)"),
    "instance-type": (re.compile(r"[a-z0-9-]+(\.[a-z0-9-]+)+"), "instance type"),
    "sagemaker-name": _SAGEMAKER_NAME,
    "hyperpod-cluster": (re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}|arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:\d{12}:"
                                    r"cluster/[a-z0-9]{12}"), "HyperPod cluster name or ARN"),
    "operation": (re.compile(r"[a-z0-9]+(-[a-z0-9]+)*"), "AWS CLI operation"),
}
# What the option, EC2 filter or shorthand key in front of a value says it must be.
_BY_OPTION = {
    "--region": "region", "--instance-id": "instance", "--instance-ids": "instance", "--node-id": "instance",
    "--node-ids": "instance", "--target": "target", "--group-id": "security-group", "--group-ids": "security-group",
    "--groups": "security-group", "--subnet-id": "subnet", "--vpc-id": "vpc", "--route-table-id": "route-table",
    "--network-acl-id": "network-acl", "--network-interface-id": "interface", "--vpc-endpoint-id": "vpc-endpoint",
    "--file-system-id": "file-system", "--file-system-ids": "file-system", "--instance-types": "instance-type",
    "--endpoint-name": "sagemaker-name", "--cluster-name": "hyperpod-cluster",
    "group-id": "security-group", "subnet-id": "subnet", "vpc-id": "vpc", "instance-id": "instance",
    "network-interface-id": "interface", "route-table-id": "route-table", "GroupId": "security-group",
    "InstanceId": "instance", "SubnetId": "subnet", "VpcId": "vpc", "EndpointName": "sagemaker-name",
}
_OPTION_BEFORE = re.compile(r"(?:^|[\s'\"])(--[a-z][a-z0-9-]*)[ =]$")
_FILTER_BEFORE = re.compile(r"Name=([A-Za-z][A-Za-z-]*),Values?=$")
_KEY_BEFORE = re.compile(r"(?:^|[\s,{\['\"])([A-Z][A-Za-z]*Id|EndpointName)=$")
_OPERATION_BEFORE = re.compile(r"(?:^|[\s;&|(])aws\s+[a-z0-9-]+\s+$")
_BUCKET = re.compile(r"(?=.{3,63}$)[a-z0-9][a-z0-9.-]*[a-z0-9]")


def expected_kind(before: str) -> str | None:
    """What the text in front of a value (on its line) says it must be, e.g. '--group-id ' -> security group."""
    for pattern in (_OPTION_BEFORE, _FILTER_BEFORE, _KEY_BEFORE):
        match = pattern.search(before)
        if match and match.group(1) in _BY_OPTION:
            return _BY_OPTION[match.group(1)]
    return "operation" if _OPERATION_BEFORE.search(before) else None


def check_value(value: str, kind: str | None = None) -> None:
    """Raise :class:`Refused` for a value no command line may carry, or one that is not the ``kind`` needed."""
    bad = next((c for c in value if control(c) or hidden(c)), None)
    if bad is not None:
        what = "a control character" if control(bad) else "an invisible or bidi character"
        raise Refused(f"holds {what} (U+{ord(bad):04X})")
    if kind is not None:
        pattern, what = _RULES[kind]
        if not pattern.fullmatch(value):
            raise Refused(f"not a valid {what}")
    if value.startswith("s3://"):
        bucket = value[5:].split("/", 1)[0]
        if not _BUCKET.fullmatch(bucket) or ".." in bucket:
            raise Refused("not a valid S3 URI (bucket name)")
    if value.startswith("arn:") and not re.fullmatch(r"arn:aws[a-z-]*:[a-z0-9-]+:[a-z0-9-]*:(\d{12})?:\S+", value):
        raise Refused("not a valid ARN")


def place(value: str, scanner: ShellScanner) -> str:
    """``value`` written into the command at the scanner's position, as part of the current word only."""
    state = scanner.state
    check_value(value, expected_kind(scanner.line) if state != HEREDOC else None)
    if state == HEREDOC:
        raise Refused("inside a here-document, where quoting does not apply")
    if state == ARITHMETIC:
        if not _NUMBER.fullmatch(value):
            raise Refused("not a number, in shell arithmetic")
        return value
    if state == SINGLE:
        return value if "'" not in value else "'" + shlex.quote(value) + "'"
    if state == DOUBLE:
        return value if not _DOUBLE_SPECIAL.intersection(value) else '"' + shlex.quote(value) + '"'
    if scanner.at_word_start and value.startswith("-") and not _NUMBER.fullmatch(value):
        raise Refused("starts with a dash, so the command would read it as an option")
    return value if _SAFE.fullmatch(value) else shlex.quote(value)


class ShellScanner:
    """Follows the quoting state of POSIX shell text as it is fed, piece by piece, between values."""

    def __init__(self) -> None:
        self._stack: list[list] = [["cmd", 0]]  # frames: cmd, subst, arith, bq, ', ", comment
        self._escaped = False
        self._prev = "\n"
        self._heredoc: str | None = None
        self.line = ""  # the current line so far (what stands in front of the next value)

    @property
    def state(self) -> str:
        if self._heredoc is not None:
            return HEREDOC
        kind = self._stack[-1][0]
        return {"'": SINGLE, '"': DOUBLE, "arith": ARITHMETIC}.get(kind, UNQUOTED)

    @property
    def at_word_start(self) -> bool:
        return self.state == UNQUOTED and self._prev in " \t\n;&|(=" and not self._escaped

    def feed(self, text: str) -> None:
        for char in text:
            self._step(char)
            self._prev = char
            self.line = "" if char == "\n" else self.line + char

    def feed_value(self) -> None:
        """A value was placed: it is part of a word, and changes no quoting state."""
        self._prev = "x"
        self.line += "x"

    def _step(self, c: str) -> None:  # noqa: C901 (one small state machine)
        frame = self._stack[-1]
        kind = frame[0]
        if self._heredoc is not None:
            if c == "\n" and self.line.strip() == self._heredoc:
                self._heredoc = None
            return
        if self._escaped:  # the escaped character is literal (a backslash-newline continues the line)
            self._escaped = False
            return
        if kind == "comment":
            if c == "\n":
                self._stack.pop()
                self._newline()
        elif kind == "'":
            if c == "'":
                self._stack.pop()
        elif kind == '"':
            if c == "\\":
                self._escaped = True
            elif c == '"':
                self._stack.pop()
            elif c == "`":
                self._stack.append(["bq", 0])
            elif c == "(" and self._prev == "$":
                self._stack.append(["subst", 0])
        else:
            self._code(c, frame)

    def _code(self, c: str, frame: list) -> None:
        kind = frame[0]
        if c == "\\":
            self._escaped = True
        elif c == "'":
            self._stack.append(["'", 0])
        elif c == '"':
            self._stack.append(['"', 0])
        elif c == "`":
            if kind == "bq":
                self._stack.pop()
            else:
                self._stack.append(["bq", 0])
        elif c == "(":
            if self._prev == "$":
                self._stack.append(["subst", 0])
            elif kind == "subst" and self._prev == "(" and frame[1] == 0 and self.line.endswith("$("):
                frame[0] = "arith"
            elif kind in ("subst", "arith"):
                frame[1] += 1
        elif c == ")" and kind == "subst":
            if frame[1] > 0:
                frame[1] -= 1
            else:
                self._stack.pop()
        elif c == ")" and kind == "arith":
            if frame[1] > 0:
                frame[1] -= 1
            elif frame[1] == 0:
                frame[1] = -1  # the first ')' of the closing '))'
            else:
                self._stack.pop()
        elif c == "#" and kind in ("cmd", "subst") and self._prev in " \t\n;&|(":
            self._stack.append(["comment", 0])
        elif c == "\n" and kind == "cmd":
            self._newline()

    def _newline(self) -> None:
        match = _HEREDOC.search(self.line)
        if match and self._stack[-1][0] == "cmd":
            self._heredoc = match.group(2)
