"""AlpacaEval 2.0 win rate and LC win rate: equal to alpaca_eval 0.6.6's own numbers on the
worked annotations of tests/helpers/alpaca_eval_lc.py (our port must reproduce every value), and a
length advantage is discounted."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.alpaca_eval_lc import (
    WORKED,
    length_controlled_win_rate,
)
from tests.helpers.alpaca_eval_lc import write_prior as _prior


@pytest.mark.parametrize("case", sorted(WORKED))
def test_matches_alpaca_eval(case: str, tmp_path: Path) -> None:
    data = WORKED[case]
    args = (data["preferences"], data["reference_lengths"], data["model_lengths"])
    minimal = length_controlled_win_rate(*args, glm="length_controlled_minimal")
    assert minimal["win_rate"] == pytest.approx(data["win_rate"], abs=1e-9)
    assert minimal["length_controlled_winrate"] == pytest.approx(
        data["length_controlled_minimal"], abs=1e-6
    )
    v1 = length_controlled_win_rate(
        *args, glm="length_controlled_v1", prior=_prior(tmp_path, data["prior_rows"])
    )
    assert v1["length_controlled_winrate"] == pytest.approx(data["length_controlled_v1"], abs=1e-6)


def test_length_advantage_is_discounted() -> None:
    """A model that wins mostly where it is longer gets an LC win rate below its raw win rate."""
    data = WORKED["binary"]
    metrics = length_controlled_win_rate(
        data["preferences"], data["reference_lengths"], data["model_lengths"]
    )
    assert metrics["length_controlled_winrate"] < metrics["win_rate"]
