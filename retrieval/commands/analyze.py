"""``alignir analyze``: “A Text is Worth Several Tokens” §3-4 alignment analysis of a BEIR collection's texts.

Encodes a sample of the collection with one or more embedders of one LLM, then reports
Hit@K / LAR / GAR (eq.6-8), the v_j spectrum between a base embedder and the others
(eq.9-10), the PC1 adjustment sweep (eq.14) and the eq.12 contributions, writes PNG plots,
and prints a table of top aligned tokens marked literal / stem / novel.
"""
from __future__ import annotations

from alignir.errors import InvalidInputError

import json
import os
import random
from pathlib import Path

import typer


def sample_texts(beir_dir: str | os.PathLike, n: int, seed: int = 0, source: str = "corpus") -> tuple[list[str], list[str]]:
    """(ids, texts) of ``n`` randomly chosen (seeded) entries of corpus.jsonl ("title text")
    or queries.jsonl, in file order.  Empty texts are skipped."""
    name = {"corpus": "corpus.jsonl", "queries": "queries.jsonl"}.get(source)
    if name is None:
        raise InvalidInputError(f"source must be 'corpus' or 'queries', got {source!r}")
    path = Path(beir_dir) / name
    if not path.is_file():
        raise InvalidInputError(f"{path} not found: {beir_dir} is not a BEIR folder")
    if n < 1:
        raise InvalidInputError(f"n must be >= 1, got {n}")
    ids, texts = [], []
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise InvalidInputError(f"{path}:{lineno}: invalid JSON ({e.msg})") from None
            text = " ".join(x for x in (rec.get("title") or "", rec.get("text") or "") if x).strip()
            if text:
                ids.append(str(rec.get("_id", lineno)))
                texts.append(text)
    if not texts:
        raise InvalidInputError(f"{path} holds no non-empty texts")
    pick = sorted(random.Random(seed).sample(range(len(texts)), min(n, len(texts))))
    return [ids[i] for i in pick], [texts[i] for i in pick]


def register(app: typer.Typer) -> None:
    """Attach this module's commands to the main app."""

    @app.command("analyze")
    def analyze(
        beir_dir: Path = typer.Argument(..., help="BEIR folder (corpus.jsonl, queries.jsonl)"),
        model: str = typer.Option("smollm2-135m", "--model", help="model spec (registered name, .gguf, HF folder, hub id)"),
        pooling: str = typer.Option("last,mean,prompteol", "--pooling",
                                    help="comma-separated embedders (e.g. last,mean,prompteol); "
                                         "NAME@ADAPTER_DIR adds a trained LoRA adapter to NAME"),
        base: str = typer.Option(None, "--base", help="embedder playing f in the spectral analysis (default: last if given)"),
        n: int = typer.Option(1000, "--n", help="number of texts sampled"),
        source: str = typer.Option("corpus", "--source", help="corpus or queries"),
        k: int = typer.Option(10, "--k", help="K of Hit@K and tokens per table row"),
        match: str = typer.Option("stem", "--match", help="exact | stem | lemma | stem+lemma (yellow tokens)"),
        max_length: int = typer.Option(256, "--max-length", help="token budget per text (texts are truncated)"),
        seed: int = typer.Option(0, "--seed", help="sampling seed"),
        show: int = typer.Option(5, "--show", help="texts shown in the terminal table"),
        out: Path = typer.Option(None, "--out", help="folder for report.json, embeddings and PNG plots"),
        as_json: bool = typer.Option(False, "--json", help="print the metrics as JSON only"),
        device: str = typer.Option("auto", "--device"),
    ) -> None:
        """Alignment analysis (“A Text is Worth Several Tokens” §3-4): Hit@K, LAR, GAR, v_j spectrum, PC1 sweep, plots."""
        import numpy as np
        from rich.console import Console

        from alignir.encoders.analysis import alignment_table, analyze_embeddings, write_plots
        from alignir.encoders.embedders import get_embedder
        from alignir.encoders.models import load_model

        names = [p.strip() for p in pooling.split(",") if p.strip()]
        if not names:
            raise typer.BadParameter("--pooling names no embedder")
        if len(set(names)) != len(names):
            raise typer.BadParameter(f"--pooling repeats an embedder: {pooling}")
        try:
            _, texts = sample_texts(beir_dir, n, seed, source)
            loaded = load_model(model, device=device)
            H = {}
            for name in names:
                family, _, adapter = name.partition("@")
                opts = {"adapter": adapter} if adapter else {}
                try:
                    emb = get_embedder(family, loaded, max_length=max_length, progress=not as_json, **opts)
                except TypeError as e:
                    raise InvalidInputError(f"embedder {family!r} does not take these options ({e})") from None
                H[name] = emb.encode_documents(texts)
            report = analyze_embeddings(texts, H, loaded.tokenizer, loaded.lm_head, loaded.special_ids,
                                        base=base, k=k, match=match, max_length=max_length)
        except ValueError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None
        summary = {"model": model, "collection": str(beir_dir), "source": source, "seed": seed,
                   "max_length": max_length, **report.summary}
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            for name, X in H.items():
                np.save(out / f"embeddings_{name}.npy", X)
            summary["plots"] = [os.path.basename(p) for p in write_plots(report, loaded.tokenizer, str(out), k=k)]
            (out / "report.json").write_text(json.dumps(summary, indent=2))
        if as_json:
            typer.echo(json.dumps(summary, indent=2))
            return
        con = Console()
        for name in names:
            con.print(alignment_table(texts[:show], report.rankings[name], report.surface[:show], loaded.tokenizer,
                                      k=k, title=f"{model} / {name}"))
        from rich.table import Table

        t = Table(title=f"alignment on {len(texts)} texts of {beir_dir} (match={match})")
        cols = [f"hit@{k}", "lar", "gar"] + ([f"hit@{k}_stem", "lar_stem", "gar_stem"] if match != "exact" else []) + ["v1_share"]
        t.add_column("embedder")
        for c in cols:
            t.add_column(c, justify="right")
        for name in names:
            m = report.summary["embedders"][name]
            t.add_row(name, *[f"{m[c]:.3f}" if c in m else "-" for c in cols])
        con.print(t)
        pc = report.summary["pc1"]
        s = Table(title=f"PC1 adjustment of {pc['base']}: λ = {pc['lambda']}")
        for c in ("factor", "lambda", f"hit@{k}", "lar", "gar"):
            s.add_column(c, justify="right")
        for r in pc["sweep"]:
            s.add_row(f"{r['factor']:g}", f"{r['lambda']:.3g}", f"{r[f'hit@{k}']:.3f}", f"{r['lar']:.3f}", f"{r['gar']:.3f}")
        con.print(s)
        if out is not None:
            con.print(f"report and plots in {out}")
