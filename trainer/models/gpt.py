"""A GPT-style decoder over bytes: pre-norm blocks, causal self-attention, 4x MLP, learned positions, tied embedding.

The shape comes from a schemas.model_presets.GptPreset, so the parameter count matches what the planner assumed.
The attention's qkv projection is head-major: its output rows are, head by head, that head's query, key and value.
Any contiguous run of whole heads is then a self-contained slice of the layer, which is what tensor parallelism's
column split hands each process (trainer/model_parallel.py); the same weights compute the same function however
many processes share them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

from schemas.model_presets import GptPreset


class CausalSelfAttention(nn.Module):
    """Multi-head causal attention. It reads the number of heads from its qkv output, so a column-split qkv (whole
    heads per process) runs the heads it holds and its row-split proj sums the processes' parts."""

    def __init__(self, d_model: int, n_head: int) -> None:
        super().__init__()
        self.head_dim = d_model // n_head
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        qkv: torch.Tensor = self.qkv(x)  # (b, t, heads x 3 x head_dim), heads held by this process
        heads = qkv.shape[-1] // (3 * self.head_dim)
        q, k, v = qkv.view(b, t, heads, 3, self.head_dim).permute(3, 0, 2, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out: torch.Tensor = self.proj(y.transpose(1, 2).reshape(b, t, heads * self.head_dim))
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


def embed(wte: nn.Embedding, wpe: nn.Embedding, idx: torch.Tensor, seq_len: int) -> torch.Tensor:
    """Token ids (batch, time) -> the first block's input: token plus position embeddings."""
    t = idx.shape[1]
    if t > seq_len:
        raise ValueError(f"sequence of {t} tokens is longer than the preset's seq_len {seq_len}")
    pos = torch.arange(t, device=idx.device)
    out: torch.Tensor = wte(idx) + wpe(pos)
    return out


def run_blocks(blocks: Iterable[nn.Module], x: torch.Tensor, recompute: bool) -> torch.Tensor:
    """x through the blocks in order; with recompute, each block's activations are recomputed in the backward pass."""
    for block in blocks:
        x = checkpoint(block, x, use_reentrant=False) if recompute else block(x)
    return x


def logits(ln_f: nn.LayerNorm, wte_weight: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The last block's output -> next-token logits. Tied output embedding: the logits reuse the input embedding."""
    return F.linear(ln_f(x), wte_weight)


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
        x = embed(self.wte, self.wpe, idx, self.preset.seq_len)
        recompute = self.activation_checkpointing and self.training and torch.is_grad_enabled()
        return logits(self.ln_f, self.wte.weight, run_blocks(self.blocks, x, recompute))


def qkv_head_major(state: dict[str, torch.Tensor], n_head: int) -> dict[str, torch.Tensor]:
    """A state dict whose qkv rows are query-key-value-major (all queries, then all keys, then all values: the
    layout of model.pt files of config schema_version 1) with the rows reordered head-major, as this GPT reads them."""
    return {name: qkv_rows_head_major(name, tensor, n_head) for name, tensor in state.items()}


def qkv_rows_head_major(name: str, tensor: torch.Tensor, n_head: int) -> torch.Tensor:
    """One tensor of a state keyed by parameter name: an attention qkv weight or bias (or a same-shaped optimizer
    moment of one) with its query-key-value-major rows reordered head-major; any other tensor as it is."""
    if not (name.endswith("attn.qkv.weight") or name.endswith("attn.qkv.bias")):
        return tensor
    rest = tensor.shape[1:]
    head_dim = tensor.shape[0] // (3 * n_head)
    return tensor.view(3, n_head, head_dim, *rest).transpose(0, 1).reshape(tensor.shape).contiguous()
