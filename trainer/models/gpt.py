"""A GPT-style decoder over bytes: pre-norm blocks, causal self-attention, 4x MLP, learned positions, tied embedding.

The shape comes from a schemas.model_presets.GptPreset, so the parameter count matches what the planner assumed.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

from schemas.model_presets import GptPreset


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.n_head, d // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out: torch.Tensor = self.proj(y.transpose(1, 2).contiguous().view(b, t, d))  # Module.__call__ is untyped
        return out


class Block(nn.Module):
    """One transformer block; the unit FSDP shards on its own."""

    def __init__(self, d_model: int, n_head: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_head)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        out: torch.Tensor = x + self.mlp(self.ln_2(x))  # Module.__call__ is untyped
        return out


class GPT(nn.Module):
    """Token ids (batch, time) -> next-token logits (batch, time, vocab).

    With activation_checkpointing, training keeps only each block's input and runs the block's forward again in the
    backward pass (torch.utils.checkpoint, non-reentrant): activations of one block at a time instead of all.
    """

    def __init__(self, preset: GptPreset, activation_checkpointing: bool = False) -> None:
        super().__init__()
        self.preset = preset
        self.activation_checkpointing = activation_checkpointing
        self.wte = nn.Embedding(preset.vocab_size, preset.d_model)
        self.wpe = nn.Embedding(preset.seq_len, preset.d_model)
        self.blocks = nn.ModuleList(Block(preset.d_model, preset.n_head) for _ in range(preset.n_layer))
        self.ln_f = nn.LayerNorm(preset.d_model)
        self.apply(self._init_weights)
        for name, param in self.named_parameters():
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(param, mean=0.0, std=0.02 / math.sqrt(2 * preset.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        if t > self.preset.seq_len:
            raise ValueError(f"sequence of {t} tokens is longer than the preset's seq_len {self.preset.seq_len}")
        pos = torch.arange(t, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        recompute = self.activation_checkpointing and self.training and torch.is_grad_enabled()
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if recompute else block(x)
        # Tied output embedding: the logits reuse the input embedding matrix.
        return F.linear(self.ln_f(x), self.wte.weight)
