"""On Python 3.10 pip gives releases of pydantic-ai and LangChain that the recorders do not
record whole: the recorder refuses them at import, naming the release it needs.  Run in the
3.10 environments (tox -e pydantic-ai-py310, langchain-py310), one framework each."""

from __future__ import annotations

import importlib
import re
import sys

import pytest
from conftest import need

# the framework's module -> (its recorder, the release it needs)
RECORDERS = {
    "pydantic_ai": ("session_pydantic_ai", "pydantic-ai-slim 2.68"),
    "langchain_core": ("session_langchain", "langchain-core 1.8"),
}


@pytest.mark.parametrize("framework", sorted(RECORDERS))
def test_an_older_release_is_refused_at_import(framework: str) -> None:
    need(framework)
    recorder, needed = RECORDERS[framework]
    installed = importlib.import_module(framework).__version__
    numbers = tuple(int(number) for number in re.findall(r"\d+", installed)[:2])
    wanted = tuple(int(number) for number in re.findall(r"\d+", needed)[:2])
    assert numbers < wanted, f"{framework} {installed} installed: run the recorder's own tests here"
    sys.modules.pop(recorder, None)
    with pytest.raises(ImportError, match=re.escape(f"{needed} or later")) as refused:
        importlib.import_module(recorder)
    assert installed in str(refused.value)
    assert recorder not in sys.modules  # nothing half-imported is left to record with
