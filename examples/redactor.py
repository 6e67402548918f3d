"""A pattern-based redactor for session.py: secrets that tools print never reach the file.

    import session
    from redactor import redact

    s = session.create("chat.jsonl", redact=redact)

``redact`` receives each event's and checkpoint's JSON-ready ``data`` just before it is
encoded, and returns what to write instead.  The patterns cover common key formats; add your
own.  Keys of ``CallConfig.extra`` that name credentials are already dropped by session.py.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, Dict

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a clone
import session

SECRET = re.compile(
    r"""
      sk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}          # OpenAI and Anthropic API keys
    | (?:AKIA|ASIA)[0-9A-Z]{16}                     # AWS access key ids
    | gh[pousr]_[A-Za-z0-9]{36,}                    # GitHub tokens
    | github_pat_[A-Za-z0-9_]{40,}                  # GitHub fine-grained tokens
    | xox[abprs]-[A-Za-z0-9-]{10,}                  # Slack tokens
    | AIza[0-9A-Za-z_-]{35}                         # Google API keys
    | eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}  # JSON Web Tokens
    | (?<=Bearer\ )[A-Za-z0-9._~+/=-]{16,}          # bearer tokens in headers and logs
    | -----BEGIN[ A-Z]*PRIVATE\ KEY-----[\s\S]*?-----END[ A-Z]*PRIVATE\ KEY-----
    """,
    re.VERBOSE,
)


def scrub(text: str) -> str:
    return SECRET.sub("[REDACTED]", text)


def redact_value(value: Any) -> Any:
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {key: redact_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [redact_value(item) for item in value]
    if isinstance(value, session.RawJSON):  # the replacement holds no quote or backslash
        text = value.text.decode() if isinstance(value.text, bytes) else value.text
        return session.RawJSON(scrub(text))
    return value


def redact(data: Dict[str, Any]) -> Dict[str, Any]:
    """The function to give ``session.create`` and ``session.open`` as ``redact=``."""
    return {key: redact_value(item) for key, item in data.items()}


if __name__ == "__main__":
    sample = {"result": {"output": "export OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwx"}}
    print(redact(sample))
