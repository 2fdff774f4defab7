"""One pipeline stage of a GPT: a contiguous run of its blocks, with the embeddings on the first stage and the final
norm and tied logits on the last.

Parameter names are the unsplit GPT's (`wte.weight`, `blocks.5.attn.qkv.weight`, `ln_f.bias`), so a checkpoint
reshards between pipeline layouts and the plain model. The last stage holds its own copy of the embedding matrix
under the same name `wte.weight` for the tied logits; the copies start equal and stay equal because their gradients
are summed across the first and last stage before every optimizer step (trainer/model_parallel.py).
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from trainer.models.gpt import GPT, embed, logits, run_blocks


def stage_bounds(n_layer: int, stages: int) -> list[range]:
    """The blocks of each stage: contiguous, as even as the count allows (later stages take the remainder)."""
    cuts = [n_layer * i // stages for i in range(stages + 1)]
    return [range(cuts[i], cuts[i + 1]) for i in range(stages)]


class GPTStage(nn.Module):
    """Stage `index` of `stages`: the first's input is token ids, the last's output is logits, the rest pass
    activations (batch, time, d_model)."""

    def __init__(self, gpt: GPT, index: int, stages: int) -> None:
        super().__init__()
        self.preset = gpt.preset
        self.activation_checkpointing = gpt.activation_checkpointing
        self.first, self.last = index == 0, index == stages - 1
        self.wte: nn.Embedding | None = None
        if self.first:
            self.wte = gpt.wte
        elif self.last:
            self.wte = copy.deepcopy(gpt.wte)
        self.wpe: nn.Embedding | None = gpt.wpe if self.first else None
        # a ModuleDict keyed by the block's index in the whole model keeps the unsplit names (blocks.N....)
        self.blocks = nn.ModuleDict({str(i): gpt.blocks[i] for i in stage_bounds(len(gpt.blocks), stages)[index]})
        self.ln_f: nn.LayerNorm | None = gpt.ln_f if self.last else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.wpe is not None and self.wte is not None:
            x = embed(self.wte, self.wpe, x, self.preset.seq_len)
        recompute = self.activation_checkpointing and self.training and torch.is_grad_enabled()
        x = run_blocks(self.blocks.values(), x, recompute)
        if self.ln_f is not None and self.wte is not None:
            return logits(self.ln_f, self.wte.weight, x)
        return x
