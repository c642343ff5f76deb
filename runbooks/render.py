"""Rendering runbook bodies: a sandboxed, strict Jinja2 environment over a finding's evidence.

Strict: a variable the body uses but the finding lacks raises, so a runbook never shows blank text
where a group id should be. Sandboxed (immutable): evidence is data from AWS (tag values, names) and a
user runbook is code from a directory; neither may reach Python internals or mutate anything.

Quoted by policy, not by the author's care: every ``{{ ... }}`` renders as a token that
:mod:`fmdoctor.runbooks.commands` then writes for where it stands: one quoted shell word in a command (or
``⟨refused: why⟩`` when it cannot be what the command needs), visible escapes in prose and code. A runbook
that forgets ``| sh`` is as safe as one that remembers it (``sh`` no longer quotes twice).

Without a finding, the body renders over :class:`Placeholder` values that print where each value
comes from (``⟨evidence.security_group⟩``), so a runbook can be read before any check has run.
"""

from __future__ import annotations

import contextvars
import re
from typing import TYPE_CHECKING, Any

from jinja2 import StrictUndefined, Template, TemplateError, UndefinedError
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from pydantic import ValidationError

from fmdoctor.engine.incidents import command_words, local_check_words
from fmdoctor.engine.model import Finding
from fmdoctor.runbooks.commands import Command, ShellVar, ShellWord, Values, place_values
from fmdoctor.runbooks.errors import RunbookRenderError
from fmdoctor.safety.text import visible

if TYPE_CHECKING:
    from fmdoctor.runbooks.model import Runbook

# Attribute names Jinja probes on values it calls or prints; a placeholder must not answer them.
_VARIANTS = re.compile(r"{%-?\s*if\b")
_JINJA_PROBES = frozenset({"unsafe_callable", "alters_data", "jinja_pass_arg"})


class Placeholder:
    """Stands for a value a finding would supply; prints as ``⟨path⟩`` and chains like the real thing."""

    __slots__ = ("_path",)

    def __init__(self, path: str):
        self._path = path

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name in _JINJA_PROBES:
            raise AttributeError(name)
        if name == "items":  # `for key, value in evidence.subnets.items()` shows one pair
            return lambda: [(Placeholder(f"{self._path} key"), Placeholder(f"{self._path} value"))]
        return Placeholder(f"{self._path}.{name}")

    def __getitem__(self, key: Any) -> Placeholder:
        return Placeholder(f"{self._path}.{key}" if isinstance(key, str) else f"{self._path}[{key}]")

    def __iter__(self):  # type: ignore[no-untyped-def]
        # One stand-in element, so a loop over a list shows its body once.
        return iter([Placeholder(f"{self._path}[]")])

    def __bool__(self) -> bool:
        return True

    # `{% if evidence.islands > 1 %}`: an ordering test on a placeholder shows its variant, as `if` does.
    def __gt__(self, _: Any) -> bool:
        return True

    __ge__ = __lt__ = __le__ = __gt__

    def __call__(self, *_: Any, **__: Any) -> Placeholder:
        return self

    def __str__(self) -> str:
        return f"⟨{self._path}⟩"

    __repr__ = __str__


def shell_quote(value: Any) -> ShellWord:
    """The ``sh`` filter: mark a value as a shell word. Commands quote every value anyway (once); in prose a
    marked value is shown quoted too."""
    return value if isinstance(value, ShellWord) else ShellWord(value)


_RENDERING: contextvars.ContextVar[Values | None] = contextvars.ContextVar("fmdoctor_runbook_values", default=None)


def _token(value: Any) -> Any:
    """Jinja's ``finalize``: each printed value becomes a token of this rendering (outside one, e.g. when
    Jinja folds a constant at compile time, the value is the author's own text and prints as it is)."""
    values = _RENDERING.get()
    if values is None or (isinstance(value, str) and values.owns(value)):  # a macro's output: text already
        return value
    return values.token(value)


def _length(value: Any) -> Any:
    return Placeholder(f"{value._path}.length") if isinstance(value, Placeholder) else len(value)


def _percent(value: Any) -> Any:
    """The ``percent`` filter: a ratio as a whole percentage (0.375 -> '38%'), so bodies do no arithmetic."""
    return value if isinstance(value, Placeholder) else f"{float(value) * 100:.0f}%"


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        undefined=StrictUndefined,
        autoescape=False,  # Markdown and shell, not HTML
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        finalize=_token,
    )
    env.filters["sh"] = shell_quote
    env.filters["length"] = env.filters["count"] = _length
    env.filters["percent"] = _percent
    return env


ENV = _environment()


def compile_body(body: str) -> Template:
    return ENV.from_string(body)


def finding_context(finding: Finding | dict[str, Any]) -> dict[str, Any]:
    """The ``finding`` variable: the finding as JSON-shaped data (the same whether it came from a run or a file)."""
    if not isinstance(finding, Finding):
        try:
            finding = Finding.model_validate(finding)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'finding'}: {e['msg']}" for e in exc.errors()[:3]
            )
            raise RunbookRenderError(f"not a finding: {problems}") from None
    data = finding.model_dump(mode="json")
    data["id"] = finding.id
    return data


def render_runbook(runbook: Runbook, finding: Finding | dict[str, Any] | None, cluster: str | None,
                   region: str | None, demo: bool = False) -> str:
    """``demo``: the finding is the demo's, so the body's fmdoctor commands carry ``--demo`` (:func:`commands`)."""
    if finding is None:
        return _render_template_view(runbook, cluster, region, demo)
    data = finding_context(finding)
    context = {
        "finding": data,
        "evidence": data["evidence"],
        "cluster": cluster or ShellVar("$FMDOCTOR_CLUSTER"),
        "region": region or ShellVar("$AWS_REGION"),
        **commands(demo),
    }
    body, refused = _render(runbook, context, Placeholder)
    where = f" · cluster `{_code(cluster)}`" if cluster else ""
    where += f" ({visible(region, lines=False)})" if region else ""
    lines = [
        f"# {runbook.title}",
        "",
        f"**{_code(data['severity'])}** · `{_code(data['check'])}` on `{_code(data['resource'])}`{where}",
        "",
        f"> {visible(data['summary'], lines=False)}",
        "",
    ]
    if refused:
        lines += [f"**Some values of this finding cannot go into a shell command** ({'; '.join(sorted(set(refused)))}):"
                  " they are marked ⟨refused: …⟩ below. Read them in the finding's JSON, where they are escaped, "
                  "before acting on them.", ""]
    unknown = [name for name, value in (("cluster", cluster), ("region", region)) if not value]
    if unknown:
        variables = " and ".join("$FMDOCTOR_CLUSTER" if n == "cluster" else "$AWS_REGION" for n in unknown)
        lines += [f"The {' and '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not known: the commands "
                  f"below use {variables}; set {'it' if len(unknown) == 1 else 'them'} first.", ""]
    return "\n".join(lines) + "\n" + body


def commands(demo: bool) -> dict[str, Command]:
    """The words that start each fmdoctor command a body writes (:func:`fmdoctor.engine.incidents.command_words`):
    ``{{ fmdoctor_check }}``, ``{{ fmdoctor_fix }}``, ``{{ fmdoctor_why_not }}`` and, on a node,
    ``{{ fmdoctor_local }}`` (``sudo fmdoctor check --local``); for the demo's findings each carries ``--demo``, so
    a command pasted from the demo asks the demo, not the real account of the shell it is pasted in."""
    return {"fmdoctor_check": Command(command_words("check", demo)),
            "fmdoctor_fix": Command(command_words("fix", demo)),
            "fmdoctor_why_not": Command(command_words("why-not", demo)),
            "fmdoctor_local": Command(local_check_words(demo))}


def _render(runbook: Runbook, context: dict[str, Any], raw: type) -> tuple[str, list[str]]:
    """The body with every value placed by the quoting policy, and the reasons of values it refused."""
    assert runbook.template is not None
    values = Values()
    reset = _RENDERING.set(values)
    try:
        text = runbook.template.render(context)
        return place_values(text, values, raw), values.refused
    except UndefinedError as exc:
        raise RunbookRenderError(
            f"runbook {runbook.id} ({runbook.source}) needs a value this finding lacks: {exc.message}",
            hint="the finding may come from another fmdoctor version; re-run the check and pass its JSON",
        ) from None
    except SecurityError as exc:
        raise RunbookRenderError(f"runbook {runbook.id} ({runbook.source}) did something unsafe: {exc}") from None
    except (TemplateError, TypeError, ValueError, KeyError, AttributeError) as exc:
        raise RunbookRenderError(f"runbook {runbook.id} ({runbook.source}) failed to render: {exc}") from None
    finally:
        _RENDERING.reset(reset)


def _code(value: Any) -> str:
    """A value shown inside a one-backtick code span of a header line."""
    return visible(value, lines=False).replace("`", "'")


def _line(source: str, context: dict[str, Any]) -> str:
    """One line of fmdoctor's own (the template view's header) with its values placed by the policy the bodies'
    values follow (:func:`fmdoctor.runbooks.commands.place_values`): a cluster named '-x' or with a backtick is
    refused or quoted there as it is in the body, not quoted by another rule."""
    values = Values()
    reset = _RENDERING.set(values)
    try:
        return place_values(compile_body(source).render(context), values, Placeholder)
    finally:
        _RENDERING.reset(reset)


def _render_template_view(runbook: Runbook, cluster: str | None, region: str | None, demo: bool = False) -> str:
    check = runbook.checks[0]
    target = cluster or "NAME"
    header = [
        f"# {runbook.title}",
        "",
        f"**{runbook.severity.value}** · runbook `{runbook.id}` for {', '.join(f'`{c}`' for c in runbook.checks)}",
        "",
        "> No finding given: each ⟨…⟩ below is a value taken from a finding. To fill them in with your "
        "cluster's real values:",
        ">",
        _line("> `{{ fmdoctor_check }} " + ("" if demo else "--cluster {{ cluster }} ")
              + "--only {{ check }} --format json | fmdoctor runbook show {{ runbook }} --finding -`",
              {**commands(demo), "cluster": target, "check": check, "runbook": runbook.id}),
        "",
    ]
    if _VARIANTS.search(runbook.body):
        header += ["Parts of this runbook depend on the finding; without one, the first variant is shown.", ""]
    context = {
        "finding": Placeholder("finding"),
        "evidence": Placeholder("evidence"),
        "cluster": cluster or Placeholder("cluster"),
        "region": region or Placeholder("region"),
        **commands(demo),
    }
    try:
        body = _render(runbook, context, Placeholder)[0] if runbook.template else runbook.body
    except Exception:  # a body that needs real values (arithmetic, comparisons): show its source instead
        body = ("The template needs real values to render; its source follows.\n\n```jinja\n"
                + runbook.body.strip("\n") + "\n```\n")
    return "\n".join(header) + "\n" + body
