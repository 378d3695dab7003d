"""AlpacaEval 2.0 win rate and LC win rate: the fixed edge cases (head-to-head counts, unanimous
preferences, equal lengths, bad inputs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.alpaca_eval_lc import (
    NAN,
    LCPrior,
    head_to_head,
    length_controlled_win_rate,
)
from tests.helpers.alpaca_eval_lc import write_prior as _prior


def test_head_to_head_counts() -> None:
    metrics = head_to_head([2.0, 1.0, 1.5, 0.0, 2.0, NAN])
    assert metrics["n_wins"] == 2 and metrics["n_wins_base"] == 1 and metrics["n_draws"] == 2
    assert metrics["n_total"] == 5 and metrics["win_rate"] == pytest.approx(60.0)
    assert metrics["discrete_win_rate"] == pytest.approx(60.0)


@pytest.mark.parametrize(("preference", "expected"), [(2.0, 100.0), (1.0, 0.0), (1.5, 50.0)])
def test_unanimous_preferences_give_their_own_rate(preference: float, expected: float) -> None:
    # alpaca_eval 0.6.6 returns 50 for all losses (liblinear sees one class) and 99.9996 for all
    # wins.
    metrics = length_controlled_win_rate(
        [preference] * 10 + [NAN], list(range(100, 201, 10)), [50] * 11
    )
    assert metrics["length_controlled_winrate"] == expected


def test_equal_lengths_do_not_break_the_fit() -> None:
    metrics = length_controlled_win_rate([2.0, 1.0] * 10, [100] * 20, [100] * 20)
    assert 0.0 < metrics["length_controlled_winrate"] < 100.0


def test_bad_inputs_say_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="one length pair per preference"):
        length_controlled_win_rate([2.0], [1, 2], [3])
    with pytest.raises(ValueError, match="unknown LC GLM"):
        length_controlled_win_rate([2.0], [1], [3], glm="length_controlled_v9")
    with pytest.raises(ValueError, match="needs the instruction difficulties"):
        length_controlled_win_rate([2.0], [1], [3], glm="length_controlled_v1")
    with pytest.raises(ValueError, match="no usable judge preference"):
        length_controlled_win_rate([NAN, NAN], [1, 2], [3, 4])
    (tmp_path / "bad.csv").write_text("index,preference\n0,0.5\n")
    with pytest.raises(ValueError, match="std_delta_len"):
        LCPrior.from_csv(tmp_path / "bad.csv")
    prior = _prior(tmp_path, [(0, 0.5, 0.1, 0.2), (0, 0.4, -0.1, 0.2)])
    with pytest.raises(ValueError, match="no difficulty for instruction index 1"):
        length_controlled_win_rate(
            [2.0, 1.0], [1, 2], [3, 4], glm="length_controlled_v1", prior=prior
        )
