"""No module reads another object's private attribute (`obj._name` where obj is not `self`/`cls`): the owner
gives a public method or property instead. Third-party and standard-library private API that has no public
form is listed, each with why."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("fanout", "pipelines", "actors")

# (file, attribute): private API of a library we do not own, with no public way to do the same
ALLOWED = {
    ("actors/_llama.py", "_handle"): "ctypes.CDLL's handle, to dlclose a probe library",
    ("actors/reranker.py", "_ctx"): "llama_cpp.Llama's context: the logits of the last position",
    ("actors/reranker.py", "_model"): "llama_cpp.Llama's model: a context of our own on it",
    ("fanout/cli/main.py", "_run_exitfuncs"): "atexit: run the exit handlers before os._exit",
    ("fanout/cli/main.py", "_exit"): "os._exit (public despite the underscore)",
    ("fanout/serve/h11_protocol.py", "_value2member_map_"): "enum's value lookup of HTTPStatus",
    ("fanout/store/chunk_rows.py", "_take_rows"): "lance.LanceDataset's rows by row id (no public form yet)",
}


def _private_reads() -> list[tuple[str, int, str]]:
    out = []
    for folder in FOLDERS:
        for f in sorted((ROOT / folder).rglob("*.py")):
            rel = str(f.relative_to(ROOT))
            for n in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
                if not (isinstance(n, ast.Attribute) and n.attr.startswith("_") and not n.attr.startswith("__")):
                    continue
                if isinstance(n.value, ast.Name) and n.value.id in ("self", "cls"):
                    continue
                out.append((rel, n.lineno, ast.unparse(n)))
    return out


def test_no_private_attribute_is_read_across_objects():
    bad = [f"{f}:{line} {expr}" for f, line, expr in _private_reads()
           if (f, expr.rsplit(".", 1)[-1]) not in ALLOWED]
    assert not bad, "private attributes read from outside their object:\n" + "\n".join(bad)
