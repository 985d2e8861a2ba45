"""Package a trained adapter for shipping inside alignir: LoRA weights cast to fp16,
into encoders/adapters/NAME/ (or --dest), with its training record.

    .venv/bin/python scripts/package_adapter.py runs/smollm2-135m-alignir smollm2-135m-alignir

Registering the name (encoders/shipped.py SHIPPED) and re-measuring its recorded nDCG are
separate steps: a packaged adapter scores a hair off its fp32 source.
"""
from __future__ import annotations

import argparse
from pathlib import Path

ADAPTERS = Path(__file__).resolve().parents[1] / "encoders" / "adapters"


def main(argv: list[str] | None = None) -> None:
    from alignir.encoders.train.adapter import package_adapter

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", help="the trained adapter folder (alignir train --out, or one stage of it)")
    ap.add_argument("name", help="the shipped name, e.g. smollm2-135m-alignir")
    ap.add_argument("--dest", type=Path, default=None, help=f"default: {ADAPTERS}/NAME")
    args = ap.parse_args(argv)
    out = package_adapter(args.src, args.dest or ADAPTERS / args.name)
    size = (out / "adapter_model.safetensors").stat().st_size
    print(f"packaged {args.src} -> {out} (LoRA weights {size / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
