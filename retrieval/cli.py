"""The ``alignir`` command line. Each group of commands lives in retrieval/commands/."""
from __future__ import annotations

import inspect

import typer

app = typer.Typer(
    name="alignir",
    help="Sparse/dense hybrid retrieval from LLM embeddings by aligned-token decoding.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register_all() -> None:
    from alignir.retrieval.commands import analyze, evaluate, export, indexing, serve, train

    for module in (indexing, evaluate, export, analyze, train, serve):
        module.register(app)
    _one_line_summaries(app)


def _one_line_summaries(group: typer.Typer) -> None:
    """Help texts from the commands' docstrings with each paragraph on one line, so the terminal
    wraps them (typer keeps the source's line breaks), and the first paragraph as the summary
    `alignir --help` lists."""
    for info in group.registered_commands:
        if info.callback is None:
            continue
        text = info.help if isinstance(info.help, str) else inspect.getdoc(info.callback) or ""
        paragraphs = [" ".join(p.split()) for p in inspect.cleandoc(text).split("\n\n")]
        paragraphs = [p for p in paragraphs if p]
        if paragraphs:
            info.help = "\n\n".join(paragraphs)
        if paragraphs and info.short_help is None:
            info.short_help = paragraphs[0]
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _one_line_summaries(sub.typer_instance)


_register_all()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
