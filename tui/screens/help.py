"""Keys and what each does."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Markdown, Static

HELP = """\
| key | action |
|---|---|
| **r** | re-run the checks |
| **/** | filter findings (words in severity, check, resource, summary) |
| **s** | sort findings by the next column (or click a column header) |
| **enter** | show the selected finding: evidence and runbook |
| **f** | fix the selected finding: plan, dry run, then you approve or reject |
| **c** | switch cluster |
| **ctrl+s** | save the transcript as Markdown |
| **esc** | cancel running checks or the assistant's turn; leave an input |
| **i** | type a question |
| **ctrl+p** | command palette: every action |
| **?** | this help |
| **q** | quit |

Nothing changes your account unless you press **Approve** on a plan.
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "close", "Close")]

    def compose(self) -> ComposeResult:
        with Vertical(id="help", classes="dialog"):
            yield Static("fmdoctor keys", classes="dialog-title")
            yield Markdown(HELP)

    def action_close(self) -> None:
        self.dismiss(None)
