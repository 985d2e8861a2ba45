"""The ``alignir`` command line. Each group of commands lives in retrieval/commands/."""
from __future__ import annotations

import typer

app = typer.Typer(
    name="alignir",
    help="Sparse/dense hybrid retrieval from LLM embeddings by aligned-token decoding.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register_all() -> None:
    from alignir.retrieval.commands import analyze, evaluate, export, indexing, train

    for module in (indexing, evaluate, export, analyze, train):
        module.register(app)


_register_all()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
