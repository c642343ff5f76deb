"""What stands between untrusted text and the places it goes: a terminal, a chat, a shell, a model.

Text in a cluster is written by whoever controls its resources (tag values, S3 keys, AWS messages) or by a
model; this package holds the one policy for each destination, so every front end applies the same rules:

- :mod:`~fmdoctor.safety.text`: for people, control characters and escape sequences never reach a terminal
  and invisible or bidi characters are shown as escapes (``\\u202e``); for a model, they are removed; JSON
  stays exact with those characters escaped.
- :mod:`~fmdoctor.safety.redact`: secrets and account ids out of anything sent to a model or a chat.
- :mod:`~fmdoctor.safety.shell`: a value placed in a shell command line is one quoted word, and a value that
  cannot be what the command needs (an AWS id, region or S3 URI) is refused.
"""

from fmdoctor.safety.redact import Redactor, redact_data
from fmdoctor.safety.text import dumps_json, strip_invisible, visible

__all__ = ["Redactor", "dumps_json", "redact_data", "strip_invisible", "visible"]
