"""The chat pane: questions, the assistant's answer as it streams (then as Markdown) and its tool calls."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widget import Widget
from textual.widgets import Input, Markdown, Static

from fmdoctor.tui.toolcall import ToolCallView

WELCOME = ("Ask about the cluster, e.g. *is my cluster healthy?*, *why is training slow?*, "
           "*fix the EFA security group*. Press **i** to type a question, **?** for keys.")


class ChatPane(Vertical):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._streaming: Static | None = None
        self._streamed = ""
        self._calls: dict[str, ToolCallView] = {}

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="chat-log"):
            yield Markdown(WELCOME, classes="note")
        yield Input(placeholder="Ask fmdoctor…  (Enter sends, Esc leaves)", id="ask")

    @property
    def log(self) -> VerticalScroll:
        return self.query_one("#chat-log", VerticalScroll)

    def on_mount(self) -> None:
        self.log.anchor()  # stay at the newest line as answers grow, until the person scrolls up

    def _add(self, widget: Widget) -> Widget:
        self.log.mount(widget)
        return widget

    def add_question(self, text: str) -> None:
        self._add(Static(f"› {text}", classes="question", markup=False))
        self.log.anchor()  # a new question follows the answer again
        self._calls.clear()

    def add_markdown(self, text: str, classes: str = "note") -> None:
        # links in an answer come from a model and tool output: shown, never opened by a click
        self._add(Markdown(text, classes=classes, open_links=False))

    def add_token(self, text: str) -> None:
        if self._streaming is None:
            self._streamed = ""
            self._streaming = Static("", classes="answer streaming", markup=False)
            self._add(self._streaming)
        self._streamed += text
        self._streaming.update(self._streamed)

    def finish_answer(self, text: str) -> None:
        """The final, cleaned answer replaces the streamed preview."""
        if self._streaming is not None:
            self._streaming.remove()
            self._streaming = None
        self.add_markdown(text, classes="answer")

    def tool_started(self, call_id: str, name: str, args: dict) -> None:
        self._calls[call_id] = self._add(ToolCallView(call_id, name, args))  # type: ignore[assignment]

    def check_progress(self, done: int, total: int) -> None:
        running = [v for v in self._calls.values() if v.running]
        if running:
            running[-1].progress(done, total)

    def tool_finished(self, call_id: str, name: str, args: dict, status: str, duration_s: float,
                      finding_count: int, message: str) -> None:
        view = self._calls.get(call_id)
        if view is None:
            view = self._calls[call_id] = self._add(ToolCallView(call_id, name, args))  # type: ignore[assignment]
        view.finish(status, duration_s, finding_count, message)
