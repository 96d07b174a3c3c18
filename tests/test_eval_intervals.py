"""Perplexity cells independent of the other lengths asked, their bootstrap intervals over documents, and the one
report that sets models, setups and seeds side by side with them."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from lextra.cli import main
from lextra.data import prepare_data
from lextra.errors import ConfigError
from lextra.evaluate import EvalConfig, Evaluation, PerplexityPoint, evaluate_model
from lextra.evaluate.bootstrap import ppl_interval, ratio_interval
from lextra.model import GPT, GPTConfig
from lextra.reporting.perplexity import perplexity_report, side_by_side
from lextra.train import TrainConfig, train


@pytest.fixture(scope="module")
def data():
    return prepare_data("python-code", limit_chars=60_000)


def _model(scheme: str = "rope") -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(n_layer=1, n_head=2, d_model=32, train_len=16, layer_plan=scheme)).eval()


def test_a_cell_does_not_change_when_other_lengths_are_added(data) -> None:
    """The span (tokens scored per document) is 16 x L_tr whatever lengths are asked: the cell at 16 is the same
    number, on the same documents, alone and beside 64 and 256."""
    model = _model()
    alone = evaluate_model(model, data, EvalConfig(lengths=[16], documents=3), progress=False)
    beside = evaluate_model(model, data, EvalConfig(lengths=[16, 64, 256], documents=3), progress=False)
    assert alone.span == beside.span == 256 and alone.sources == beside.sources
    for protocol in ("chunks", "sliding", "last-token"):
        a, b = alone.point(protocol, 16), beside.point(protocol, 16)  # (b's windows may run inside longer ones)
        assert a.tokens_by_document == b.tokens_by_document and a.nll_by_document == pytest.approx(b.nll_by_document)
        assert (a.ppl, a.low, a.high) == pytest.approx((b.ppl, b.low, b.high))
    # the same tokens at every length: chunks and sliding score the span of each document at 16 and at 256
    assert beside.point("chunks", 16).tokens_by_document == beside.point("chunks", 256).tokens_by_document == [256] * 3
    assert beside.point("sliding", 64).tokens == 3 * 256


def test_a_span_shorter_than_the_longest_length_is_refused(data, tmp_path: Path, capsys) -> None:
    with pytest.raises(ConfigError, match=r"evaluation length 512 is longer than the 256 tokens scored per document"):
        evaluate_model(_model(), data, EvalConfig(lengths=[16, 512], documents=1), progress=False)
    model = GPTConfig(n_layer=1, n_head=2, d_model=32, train_len=16, layer_plan="rope")
    config = TrainConfig(limit_chars=60_000, model=model, batch_size=2, steps=1, warmup=1, eval_sequences=0)
    train(config, tmp_path / "run", progress=False)
    out = tmp_path / "o"
    assert main(["eval", str(tmp_path / "run"), "--lengths", "64", "--span", "32", "--quiet", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pass --span 64 or more" in err[0]
    assert not out.exists()  # nothing written


def test_the_bootstrap_interval_covers_the_true_perplexity_about_95_percent_of_the_time() -> None:
    """Documents whose per-token NLL varies around 3.0: the interval of exp(mean NLL) holds exp(3.0) in about 95% of
    200 independent corpora of 24 documents (a percentile bootstrap undercovers a little at this size)."""
    rng = np.random.default_rng(1)
    covered = 0
    for _ in range(200):
        tokens = rng.integers(200, 400, size=24)
        rates = 3.0 + rng.normal(0.0, 0.3, size=24)
        low, high = ppl_interval(list(rates * tokens), list(tokens))  # type: ignore[misc]
        covered += low <= math.exp(3.0) <= high
    assert 0.86 <= covered / 200 <= 0.99


def test_intervals_shrink_with_agreeing_documents_and_pairing() -> None:
    tokens = [100] * 8
    same = [250.0] * 8  # every document at NLL 2.5: no spread, a zero-width interval
    assert ppl_interval(same, tokens) == pytest.approx((math.exp(2.5), math.exp(2.5)))
    spread = [100.0 * r for r in (2.0, 2.2, 2.4, 2.6, 2.8, 3.0, 3.2, 3.4)]
    low, high = ppl_interval(spread, tokens)  # type: ignore[misc]
    assert low < math.exp(2.7) < high
    # the same documents 0.1 nats harder at the longer length: the paired ratio is exactly e^0.1, with no width,
    # although each length alone has a wide interval
    harder = [n + 10.0 for n in spread]
    assert ratio_interval((harder, tokens), (spread, tokens)) == pytest.approx((math.exp(0.1), math.exp(0.1)))
    assert ppl_interval(spread[:1], tokens[:1]) is None  # one document: no interval


def _evaluation(train_len: int, rates: dict[int, list[float]]) -> Evaluation:
    """An evaluation whose chunks cell at each length has these per-document NLL rates (100 tokens each)."""
    points = {n: PerplexityPoint.of([100 * r for r in per_doc], [100] * len(per_doc)) for n, per_doc in rates.items()}
    return Evaluation({"chunks": points}, sorted(rates), train_len, {}, len(next(iter(rates.values()))), False, {})


def test_the_report_ranks_by_the_summary_column_and_says_which_gaps_the_intervals_decide(tmp_path: Path) -> None:
    flat = _evaluation(16, {16: [2.0, 2.1, 2.2, 2.3], 64: [2.0, 2.1, 2.2, 2.3]})
    rising = _evaluation(16, {16: [2.0, 2.1, 2.2, 2.3], 64: [2.5, 2.6, 2.7, 2.8]})
    close = _evaluation(16, {16: [2.0, 2.1, 2.2, 2.3], 64: [2.5, 2.6, 2.7, 2.9]})  # ratio wider than rising's
    paths = side_by_side({"close": [close], "flat": [flat], "rising": [rising]}, tmp_path)
    table = paths["table"].read_text()
    rows = [line for line in table.splitlines() if line.startswith("| flat") or line.startswith("| r")
            or line.startswith("| close")]  # fmt: skip
    assert [r.split("|")[1].strip() for r in rows] == ["flat", "rising", "close"]  # ranked by 4x / 1x
    assert rows[0].endswith("| 1.000 ± 0.000 | yes |")  # flat's ratio lies wholly below rising's
    assert rows[1].endswith("| no |") and rows[2].endswith("| - |")  # rising and close overlap
    assert "95% percentile-bootstrap interval over documents (4 documents" in table
    csv = paths["csv"].read_text().splitlines()
    assert csv[0] == "model,protocol,length,multiple,ppl,low,high,interval_over,seeds,precision"
    assert csv[1].startswith("close,chunks,16,1,") and csv[1].endswith(",documents,1,fp32")


def test_seeds_of_one_label_pool_into_a_mean_with_a_t_interval(tmp_path: Path) -> None:
    seeds = [_evaluation(16, {16: [2.0, 2.2], 32: [2.0 + d, 2.2 + d]}) for d in (0.1, 0.2, 0.3)]
    perplexity_report({"rope": seeds}, tmp_path)
    table = (tmp_path / "table.md").read_text()
    ppl32 = [e.ppl("chunks", 32) for e in seeds]
    mean, sd = float(np.mean(ppl32)), float(np.std(ppl32, ddof=1))
    assert f"| {mean:.2f} ± {4.303 * sd / math.sqrt(3):.2f} |" in table  # t(0.975, 2) = 4.303
    assert "95% t-interval (3 seeds)" in table


def test_report_pools_result_files_of_one_label_and_several_seeds(tmp_path: Path, capsys) -> None:
    import json

    folders = []
    for seed, shift in ((0, 0.0), (1, 0.1), (None, 0.2)):  # a file without a seed is its own row
        folder = tmp_path / f"eval-{seed}"
        folder.mkdir()
        evaluation = _evaluation(16, {16: [2.0 + shift, 2.2], 32: [2.1 + shift, 2.3]})
        folder.joinpath("results.json").write_text(json.dumps({"label": "rope", "seed": seed, **evaluation.to_dict()}))
        folders.append(str(folder))
    assert main(["report", *folders, "--out", str(tmp_path / "report")]) == 0
    table = (tmp_path / "report" / "table.md").read_text()
    rows = [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| rope")]
    assert sorted(rows) == ["rope", f"rope ({tmp_path / 'eval-None'})"]  # seeds 0, 1 pooled; the seedless apart
    assert "95% t-interval (2 seeds)" in table and "bootstrap interval over documents" in table
