"""Interpolate two LoRA adapters of one base model in weight space (exact, on the merged updates).

    .venv/bin/python scripts/interpolate_adapters.py builtin:smollm2-135m-alignir-v3 RUN 0.5 OUT

writes OUT, whose update is 0.5·ΔW(v3) + 0.5·ΔW(RUN); score it like any adapter
(``alignir beir --model smollm2-135m --adapter OUT`` or benchmarks/gpu/gpu_train.py --score-adapter).
"""
from __future__ import annotations

import argparse
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    from alignir.encoders.train.interpolate import interpolate_adapters

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("start", help="the adapter at weight 0 (a folder or builtin:NAME), e.g. the run's starting point")
    ap.add_argument("end", help="the adapter at weight 1, e.g. the run fine-tuned from START")
    ap.add_argument("weight", type=float, help="0 gives START's update, 1 END's")
    ap.add_argument("out", type=Path, help="a new (or empty) folder")
    args = ap.parse_args(argv)
    out = interpolate_adapters(args.start, args.end, args.weight, args.out)
    print(f"interpolated {args.start} (x{1 - args.weight:g}) + {args.end} (x{args.weight:g}) -> {out}")


if __name__ == "__main__":
    main()
