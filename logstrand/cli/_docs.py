"""docs/cli.md, generated from the command-line interface itself.

    .venv/bin/python -m logstrand.cli._docs > docs/cli.md

A test compares the file with this output, so the page never drifts from the
commands.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import typer

# typer bundles its own copy of click and keeps it private: the objects below
# are used through click's documented attributes only (duck typing).


def _rows(cmd: Any, ctx: Any) -> list[tuple[str, str, str]]:
    rows = []
    for p in cmd.get_params(ctx):
        if p.name == "help":
            continue
        if p.param_type_name == "argument":
            name = f"`{(p.name or '').upper()}`"
            default = "" if p.required else _default(p.default)
            help_text = getattr(p, "help", None) or ""
        else:
            names = ", ".join(f"`{o}`" for o in [*p.opts, *p.secondary_opts])
            kind = str(p.display_type(ctx)).strip("<>").upper().replace(" ", "_")
            metavar = "" if p.is_flag else f" `{kind}`"
            name = names + metavar
            default = _default(p.default) if p.show_default is not False else ""
            help_text = p.help or ""
            if p.envvar and p.envvar not in help_text:
                help_text += f" (env: `{p.envvar}`)"
        rows.append((name, help_text.replace("|", "\\|").replace("\n", " "), default))
    return rows


def _default(value: Any) -> str:
    if value is None or value == () or callable(value):
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f"`{value}`"


def _walk(cmd: Any, path: list[str], out: list[str]) -> None:
    ctx = cmd.context_class(cmd, info_name=" ".join(path))
    level = "#" * min(len(path) + 1, 4)
    out.append(f"{level} `{' '.join(path)}`\n")
    doc = inspect.cleandoc(cmd.help or "")
    if doc:
        out.append(doc + "\n")
    if hasattr(cmd, "list_commands"):
        subs = cmd.list_commands(ctx)
        out.append("| command | what it does |\n|---|---|")
        for name in subs:
            sub = cmd.get_command(ctx, name)
            assert sub is not None
            short = sub.get_short_help_str(limit=100).replace("|", "\\|")
            out.append(f"| `{name}` | {short} |")
        out.append("")
        for name in subs:
            sub = cmd.get_command(ctx, name)
            assert sub is not None
            _walk(sub, [*path, name], out)
        return
    pieces = " ".join(cmd.collect_usage_pieces(ctx))
    pieces = re.sub(r"\{(\w+)\}", lambda m: m.group(1).upper(), pieces)
    out.append(f"```\n{' '.join(path)} {pieces}\n```\n")
    rows = _rows(cmd, ctx)
    if rows:
        out.append("| argument / option | meaning | default |\n|---|---|---|")
        out += [f"| {n} | {h} | {d} |" for n, h, d in rows]
        out.append("")


def render() -> str:
    from ._app import app

    command = typer.main.get_command(app)
    out = [
        "# Command-line reference",
        "",
        "Generated from the CLI itself (`.venv/bin/python -m logstrand.cli._docs > docs/cli.md`);",
        "`tests/unit/test_cli_docs.py` keeps it current. Every command exits with 0 when",
        "done, 1 when the operation failed (unknown log, nodes not answering, a node down",
        "for `status`), 2 for bad usage or input; errors are one line on stderr. Commands",
        "that print results take `--json` for scripts.",
        "",
    ]
    _walk(command, ["logstrand"], out)
    return "\n".join(out).rstrip("\n") + "\n"


if __name__ == "__main__":
    import sys

    sys.stdout.write(render())
