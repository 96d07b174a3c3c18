"""`LextraLM`: a lextra run or a Hugging Face model as lm-evaluation-harness's model `lextra` (`lm_eval` 0.4.13),
under any inference setup.

The requests run on lextra's own primitives (`features` + `head`, greedy `generate`), rows batched only with rows of
the same length (no padding), so every number equals an unbatched run under any setup. Rolling windows are
lm-eval's disjoint windows of `max_length` (lextra's `chunks` protocol at that length). Contexts start as lextra's
evaluations do (`evaluation_prefix`); an empty context is conditioned on that BOS, else on the separator.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import torch
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
from tqdm import tqdm

from lextra.devices import module_device, resolve_device
from lextra.errors import ConfigError
from lextra.evaluate.perplexity import LOGIT_BUDGET
from lextra.evaluate.prefix import evaluation_prefix
from lextra.evaluate.ruler.evaluate import generate
from lextra.extend import ExtensionMethod
from lextra.pipelines.harness.run import offline
from lextra.pipelines.harness.setup import ModelArgs, parse_model_args
from lextra.pipelines.loading import ModelOptions, load_model_spec

#: tokens generated when a task names no `max_gen_toks` (lm-eval's default)
DEFAULT_GEN_TOKENS = 256


@register_model("lextra")
class LextraLM(TemplateLM):
    """lm-eval's `lextra` model: `ModelArgs` name the model, its setup and its batching."""

    def __init__(self, pretrained: str = "", **kwargs: Any) -> None:
        super().__init__()
        offline()  # before transformers and datasets are imported: they read the switches then
        if kwargs.get("batch_size") == "auto":
            raise ConfigError("the lextra model takes a number as batch_size, not 'auto'")
        self.args = ModelArgs.from_dict({"pretrained": pretrained, **kwargs})
        options = ModelOptions(tokenizer=self.args.tokenizer, train_len=self.args.train_len, quiet=True)
        loaded = load_model_spec(self.args.pretrained, options, resolve_device(self.args.device))
        self.model, self.lextra_tokenizer = loaded.model, loaded.tokenizer
        if not hasattr(self.model, "features"):
            raise ConfigError("lm-eval's lextra model runs decoders (lextra models, the Llama family), not T5")
        train_len = int(self.model.config.train_len)
        self.max_length = self.args.max_length or train_len
        setup = self.args.setup(train_len)
        setup.apply(self.model)
        if isinstance(setup.extension, ExtensionMethod):  # refuse a window past the method's reach before any work
            setup.extension.check_length(self.max_length)
        self.label = loaded.label + self.args.label_suffix()
        self.model_name = loaded.name
        self.prefix = evaluation_prefix(self.model, self.lextra_tokenizer)
        self.model.eval()

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None) -> LextraLM:
        """`--model_args` parsed with lextra's specs kept whole (`parse_model_args`)."""
        extra = {k: v for k, v in (additional_config or {}).items() if v is not None}
        return cls(**{**parse_model_args(arg_string), **extra})

    # --- tokens ---------------------------------------------------------------------------------------------
    @property
    def eot_token_id(self) -> int:
        separator = self.lextra_tokenizer.separator_id
        if separator is None:
            raise ConfigError(f"tokenizer {self.lextra_tokenizer.name} has no end-of-text token for lm-eval")
        return int(separator)

    @property
    def prefix_token_id(self) -> int:
        return int(self.prefix[0]) if self.prefix else self.eot_token_id

    @property
    def tokenizer_name(self) -> str:
        return str(self.lextra_tokenizer.name)

    @property
    def device(self) -> torch.device:
        return module_device(self.model)

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs: Any) -> list[int]:
        """Token ids; with special tokens (the default) after the model's BOS (`evaluation_prefix`)."""
        ids = list(self.lextra_tokenizer.encode(string))
        return ids if add_special_tokens is False else [*self.prefix, *ids]

    def tok_decode(self, ids: Sequence[int]) -> str:
        return str(self.lextra_tokenizer.decode([i for i in ids if 0 <= i < self.lextra_tokenizer.vocab_size]))

    # --- scoring --------------------------------------------------------------------------------------------
    @torch.no_grad()
    def scores(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> list[tuple[float, bool]]:
        """(log-likelihood, greedy) of each continuation after its context, the input cut to its last
        `max_length` tokens; rows of one length run together, `batch_size` at a time."""
        rows: dict[int, list[int]] = defaultdict(list)
        inputs: list[list[int]] = []
        for i, (context, continuation) in enumerate(pairs):
            if not continuation:
                raise ConfigError("lm-eval asked for the likelihood of an empty continuation")
            whole = [*context, *continuation][-(self.max_length + 1) :]
            if len(whole) < 2:
                raise ConfigError("lm-eval asked to score a continuation with no context; the model needs one token")
            inputs.append(whole)
            rows[len(whole) - 1].append(i)
        out: list[tuple[float, bool]] = [(0.0, False)] * len(pairs)
        for length, members in rows.items():
            for start in range(0, len(members), self.args.batch_size):
                batch = members[start : start + self.args.batch_size]
                counts = [min(len(pairs[i][1]), length) for i in batch]
                tokens = torch.tensor([inputs[i] for i in batch], dtype=torch.long, device=self.device)
                totals, greedy = self.score_rows(tokens, counts)
                for i, total, hit in zip(batch, totals.tolist(), greedy.tolist(), strict=True):
                    out[i] = (float(total), bool(hit))
        return out

    def score_rows(self, tokens: torch.Tensor, counts: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Sum of the log-probabilities of each row's last `counts[r]` tokens given the ones before, and whether
        each is the greedy choice; logits a slice of positions at a time (`LOGIT_BUDGET`), never the whole
        (rows x length x vocabulary) at once."""
        scored = max(counts)
        hidden = self.model.features(tokens[:, :-1], last=scored)
        gold = tokens[:, -scored:]
        first = torch.tensor([scored - n for n in counts], device=hidden.device)[:, None]
        totals = torch.zeros(len(counts), dtype=torch.float64, device=hidden.device)
        greedy = torch.ones(len(counts), dtype=torch.bool, device=hidden.device)
        step = max(1, LOGIT_BUDGET // (len(counts) * int(self.model.config.vocab_size)))
        for a in range(0, scored, step):
            b = min(a + step, scored)
            logits = self.model.head(hidden[:, a:b]).float()
            picked = logits.gather(2, gold[:, a:b, None])[..., 0] - logits.logsumexp(dim=-1)
            valid = torch.arange(a, b, device=hidden.device)[None, :] >= first
            totals += torch.where(valid, picked, 0.0).sum(dim=1).double()
            greedy &= torch.where(valid, logits.argmax(dim=-1) == gold[:, a:b], True).all(dim=1)
        return totals, greedy

    def _loglikelihood_tokens(self, requests: list[Any], disable_tqdm: bool = False, **kwargs: Any) -> list:
        results = self.scores([(context, continuation) for _, context, continuation in requests])
        for (key, _, _), result in zip(requests, results, strict=True):
            self.cache_hook.add_partial("loglikelihood", key, result)
        return results

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        """Each document's total log-likelihood over lm-eval's disjoint windows of `max_length` tokens."""
        windows: list[tuple[int, tuple[list[int], list[int]]]] = []
        for index, request in enumerate(requests):
            (text,) = request.args
            ids = self.tok_encode(text, add_special_tokens=False)
            for pair in get_rolling_token_windows(ids, self.prefix_token_id, self.max_length, context_len=1):
                windows.append((index, make_disjoint_window(pair)))
        totals = [0.0] * len(requests)
        for (index, _), (logprob, _) in zip(windows, self.scores([w for _, w in windows]), strict=True):
            totals[index] += logprob
        for request, total in zip(requests, totals, strict=True):
            self.cache_hook.add_partial("loglikelihood_rolling", (request.args[0],), total)
        return totals

    # --- generation -----------------------------------------------------------------------------------------
    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        """Greedy continuations, cut at the first stop string (the task's `until` and the end-of-text token)."""
        groups: dict[tuple[int, int], list[tuple[int, list[int], list[str]]]] = defaultdict(list)
        for i, request in enumerate(requests):
            context, kwargs = request.args
            kwargs = dict(kwargs or {})
            if kwargs.get("do_sample") or float(kwargs.get("temperature", 0.0) or 0.0) > 0.0:
                raise ConfigError("the lextra model decodes greedily; set do_sample: false and temperature: 0")
            until = kwargs.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            until.append(self.tok_decode([self.eot_token_id]))
            budget = int(kwargs.get("max_gen_toks", DEFAULT_GEN_TOKENS))
            ids = self.tok_encode(context)[-max(1, self.max_length - budget) :]
            groups[len(ids), budget].append((i, ids, [u for u in until if u]))
        out = [""] * len(requests)
        bar = tqdm(total=len(requests), disable=disable_tqdm, desc="lextra generate_until")
        for (_, budget), members in groups.items():
            for start in range(0, len(members), self.args.batch_size):
                batch = members[start : start + self.args.batch_size]
                texts = generate(
                    self.model,
                    [ids for _, ids, _ in batch],
                    [[] for _ in batch],
                    self.lextra_tokenizer,
                    budget,
                    finished=stops_in(batch),
                )
                for (i, _, until), text in zip(batch, texts, strict=True):
                    out[i] = text[: min((text.find(s) for s in until if s in text), default=len(text))]
                    self.cache_hook.add_partial("generate_until", requests[i].args, out[i])
                bar.update(len(batch))
        bar.close()
        return out


def stops_in(batch: Sequence[tuple[int, list[int], list[str]]]) -> Callable[[int, str], bool]:
    """`generate`'s stop rule for a batch: row r is done once its text holds one of its stop strings."""
    return lambda r, text: any(stop in text for stop in batch[r][2])
