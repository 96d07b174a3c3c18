"""Scoring retrieval prompts: greedy decoding with the KV cache (exact match of the answer) and the rank of the
gold answer's total log-likelihood among distractor answers (rank 1 = correct; ties count against the gold), for any
model called as `model(tokens, cache=cache)` whose `new_cache()` has `repeat_rows(r)`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from lextra.devices import module_device
from lextra.model import GPT


@torch.no_grad()
def prefill(model: Any, prompts: Tensor) -> tuple[Tensor, Any]:
    """Run equal-length prompts (B, L) once; the last position's logits (B, V) and the filled cache (logits are
    computed at that position only)."""
    from lextra.hf import HFCausalLM

    prompts = prompts.to(module_device(model))
    cache = model.new_cache()
    if isinstance(model, GPT):
        hidden = model.features(prompts, cache=cache)
        return model.head(hidden[:, -1]).float(), cache
    if isinstance(model, HFCausalLM):
        out = model.model(input_ids=prompts, cache=cache.hf, use_cache=True, logits_to_keep=1)
        return out.logits[:, -1].float(), cache
    return model(prompts, cache=cache)[:, -1].float(), cache


@torch.no_grad()
def greedy_continue(model: Any, logits: Tensor, cache: Any, steps: int, stop_token: int | None = None) -> Tensor:
    """Greedy tokens (B, steps) after a prefill; stops early once every row has produced `stop_token`."""
    out: list[Tensor] = []
    done = torch.zeros(logits.shape[0], dtype=torch.bool, device=logits.device)
    for step in range(steps):
        token = logits.argmax(dim=-1)
        out.append(token)
        if stop_token is not None:
            done |= token == stop_token
            if bool(done.all()):
                break
        if step + 1 < steps:
            logits = model(token[:, None], cache=cache)[:, -1].float()
    return torch.stack(out, dim=1) if out else logits.new_zeros(logits.shape[0], 0, dtype=torch.long)


@torch.no_grad()
def candidate_loglik(model: Any, logits: Tensor, cache: Any, candidates: Sequence[Sequence[Sequence[int]]]) -> Tensor:
    """Total log-likelihood (B, C) of each row's C candidate continuations (token-id lists) after the prompt."""
    B, C = len(candidates), len(candidates[0])
    if any(len(row) != C for row in candidates):
        raise ValueError("every prompt needs the same number of candidates")
    longest = max(len(c) for row in candidates for c in row)
    padded = [[[*cand, *[0] * (longest - len(cand))] for cand in row] for row in candidates]
    lengths = [[len(cand) for cand in row] for row in candidates]
    ids = torch.tensor(padded, dtype=torch.long, device=logits.device)
    positions = torch.arange(longest, device=logits.device)
    valid = positions < torch.tensor(lengths, device=logits.device)[..., None]
    first = F.log_softmax(logits, dim=-1)  # (B, V): predicts each candidate's first token
    scores = first.gather(1, ids[:, :, 0]) * valid[:, :, 0]
    if longest > 1:
        expanded = cache.repeat_rows(C)
        flat = ids.view(B * C, longest)
        rest = F.log_softmax(model(flat[:, :-1], cache=expanded).float(), dim=-1)
        picked = rest.gather(2, flat[:, 1:, None])[..., 0].view(B, C, longest - 1)
        scores = scores + (picked * valid[:, :, 1:]).sum(dim=-1)
    return scores


def gold_rank(scores: Tensor) -> Tensor:
    """Rank of column 0 (the gold answer) per row: 1 + the distractors scoring at least as high."""
    return 1 + (scores[:, 1:] >= scores[:, :1]).sum(dim=1)


@torch.no_grad()
def score_prompts(
    model: Any,
    prompts: Sequence[Sequence[int]],
    answers: Sequence[Sequence[int]],
    distractors: Sequence[Sequence[Sequence[int]]] | None = None,
) -> dict[str, list]:
    """Greedy-decode each answer's length and rank the gold answer among its distractors: per prompt `generated`
    ids, `exact`, and with distractors `rank` and every candidate's `loglik` (gold first)."""
    lengths = {len(p) for p in prompts}
    if len(lengths) != 1:
        raise ValueError(f"score_prompts needs prompts of one length, got lengths {sorted(lengths)}")
    batch = torch.tensor([list(p) for p in prompts], dtype=torch.long, device=module_device(model))
    logits, cache = prefill(model, batch)
    result: dict[str, list] = {}
    if distractors is not None:
        candidates = [[list(a), *map(list, d)] for a, d in zip(answers, distractors, strict=True)]
        scores = candidate_loglik(model, logits, cache, candidates)
        result["rank"] = gold_rank(scores).tolist()
        result["loglik"] = scores.tolist()
    steps = max(len(a) for a in answers)
    generated = greedy_continue(model, logits, cache, steps).tolist()
    result["generated"] = [g[: len(a)] for g, a in zip(generated, answers, strict=True)]
    result["exact"] = [g == list(a) for g, a in zip(result["generated"], answers, strict=True)]
    return result
