"""LoRA training of the trained embedders (AutoRegEmbed, LLM2Comp, GIRCSE) and the InfoNCE baseline.

- ``losses``: every loss on plain tensors (InfoNCE; AutoRegEmbed CDA eq.2 + App. B/C variants;
  NLL; CTKD KL eq.5; SimCSE eq.8; GIRCSE stepwise eq.7 + ICR eq.8).
- ``data``: BEIR pairs with BM25 hard negatives, jsonl triples, raw text; resumable batches.
- ``infonce`` / ``autoregembed`` / ``llm2comp`` / ``gircse``: one ``Method`` per paper (stages).
- ``trainer``: ``TrainConfig`` + ``train(cfg)``: LoRA via peft, AdamW, warm-up + linear decay,
  grad accumulation, bf16 / gradient checkpointing on GPU, loss log, checkpoint + resume.
- ``adapter``: save / load adapters by path (+ soft tokens + training config), their hash.
- ``genbase``: decoder-side forward helpers (the inference helpers and the embedders' shell live in
  encoders/embedders/{generative,trained,adapters}.py; training imports inference, never the reverse).
"""
