"""AlpacaEval 2.0's win rate and length-controlled (LC) win rate, ported from ``alpaca_eval`` 0.6.6.

Why a port: ``alpaca_eval`` installs cleanly next to our pins, but 0.6.6 cannot be imported
here (it imports ``pkg_resources``, gone from current setuptools) and its LC code downloads
``df_gamed.csv`` from the model hub on every call, which breaks offline use. This module is a
line-by-line port of ``alpaca_eval/metrics/glm_winrate.py`` (``get_length_controlled_winrate``,
``_get_featurized_data``, ``fit_LogisticRegressionCV``) and ``metrics/helpers.py``
(``AbsoluteScoringRule.describe_head2head``); tests/unit/test_judge_lc_worked.py checks it against
values computed with ``alpaca_eval`` 0.6.6 itself.

Conventions (AlpacaEval's): ``output_1`` is the reference, ``output_2`` the model; a preference
is 1 (reference better), 2 (model better), 1.5 or 0 (draw), NaN (judge answer unusable).

The GLM (``length_controlled_v1``) predicts the preference from ``tanh(std_delta_len)``, the
instruction's difficulty and a model term, with L1-penalised logistic regression (liblinear,
5-fold ``GroupKFold`` CV over 10 values of C, soft labels), regularised towards two "gamed"
baselines (weight 0.2) whose annotations come with the difficulties in ``df_gamed.csv``
(``tatsu-lab/alpaca_eval``). The LC win rate is the mean prediction with the length difference
set to 0. ``length_controlled_minimal`` (also AlpacaEval's) drops the difficulty term and the
regularisation; it is what the fixture uses, whose instructions have no difficulty estimates.

Deviations, each a fix of a degenerate case where ``alpaca_eval`` fails: when every usable
preference is the same value v (all wins, all losses, all draws), the LC win rate is 100 v, the
limit the unpenalised fit tends to (``alpaca_eval`` returns 50 for all losses, because liblinear
then sees a single class, and 99.9996 for all wins); when all length differences are equal (zero
standard deviation) the length feature is 0 instead of NaN.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GLMS: dict[str, dict[str, Any]] = {
    "length_controlled_v1": {
        "difficulty": True,
        "regularize_to_baseline_lambda": 0.2,
        "n_splits": 5,
    },
    "length_controlled_minimal": {
        "difficulty": False,
        "regularize_to_baseline_lambda": None,
        "n_splits": 5,
    },
}
PRIOR_COLUMNS = (
    "index",
    "preference",
    "std_delta_len",
    "instruction_difficulty",
    "not_gamed_baseline",
)


@dataclass(frozen=True)
class LCPrior:
    """What ``length_controlled_v1`` needs besides the annotations (AlpacaEval's ``df_gamed.csv``).

    Attributes:
        difficulty: Instruction index (position in the eval set) to its difficulty.
        rows: The gamed baselines' annotations: ``(preference in [0, 1], std_delta_len,
            difficulty)``.
    """

    difficulty: dict[int, float]
    rows: tuple[tuple[float, float, float], ...]

    @classmethod
    def from_csv(cls, path: Path) -> LCPrior:
        """Read ``df_gamed.csv`` (columns ``index, preference, std_delta_len,
        instruction_difficulty,
        not_gamed_baseline``; others ignored).

        Raises:
            ValueError: A column is missing; the message names it and the file.
        """
        import pandas as pd

        frame = pd.read_csv(path)
        missing = [c for c in PRIOR_COLUMNS if c not in frame.columns]
        if missing:
            raise ValueError(
                f"{path}: LC prior lacks columns {missing}; expected AlpacaEval's df_gamed.csv "
                f"with columns {', '.join(PRIOR_COLUMNS)}"
            )
        first = frame.drop_duplicates("index")
        difficulty = {
            int(i): float(d)
            for i, d in zip(first["index"], first["instruction_difficulty"], strict=True)
        }
        gamed = frame[~frame["not_gamed_baseline"].astype(bool)]
        rows = tuple(
            (float(p), float(s), float(d))
            for p, s, d in zip(
                gamed["preference"],
                gamed["std_delta_len"],
                gamed["instruction_difficulty"],
                strict=True,
            )
        )
        return cls(difficulty, rows)


def _as_pairwise(preference: float) -> float:
    """AlpacaEval's draw encoding: 0 means draw, like 1.5."""
    return 1.5 if preference == 0.0 else float(preference)


def head_to_head(preferences: Sequence[float]) -> dict[str, float]:
    """AlpacaEval's raw win-rate summary (``AbsoluteScoringRule.describe_head2head``).

    >>> head_to_head([2, 1, 1.5, 2, float("nan")])["win_rate"]
    62.5
    """
    prefs = [_as_pairwise(p) for p in preferences]
    valid = [p - 1 for p in prefs if not math.isnan(p) and 1.0 <= p <= 2.0]
    n = len(valid)
    mean = sum(valid) / n if n else float("nan")
    sem = (
        (math.sqrt(sum((v - mean) ** 2 for v in valid) / (n - 1)) / math.sqrt(n))
        if n > 1
        else float("nan")
    )
    return {
        "win_rate": mean * 100,
        "standard_error": sem * 100,
        "n_wins": float(sum(v > 0.5 for v in valid)),
        "n_wins_base": float(sum(v < 0.5 for v in valid)),
        "n_draws": float(sum(p == 1.5 for p in prefs)),
        "n_total": float(n),
        # ZeroOneScoringRule: each preference rounded to a win or a loss, exact draws count half.
        "discrete_win_rate": (
            sum(1.0 if v > 0.5 else 0.5 if v == 0.5 else 0.0 for v in valid) / n * 100
            if n
            else float("nan")
        ),
    }


def _std(values: Sequence[float]) -> float:
    n = len(values)
    if n < 2:
        return float("nan")
    mean = sum(values) / n
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))


def _fit_soft_logistic(x: Any, y: Any, sample_weight: Any, n_splits: int) -> Any:
    """``alpaca_eval``'s ``fit_LogisticRegressionCV(is_ytrue_proba=True)``: soft labels via
    duplication."""
    import numpy as np
    import sklearn
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegressionCV
    from sklearn.metrics import make_scorer
    from sklearn.model_selection import GroupKFold

    n = len(y)
    groups = np.concatenate([np.arange(n), np.arange(n)])
    x_dup = np.concatenate([x, x], axis=0)
    y_dup = np.concatenate([np.ones(n, dtype=int), np.zeros(n, dtype=int)])
    true_prob = np.concatenate([y, 1 - y])
    if sample_weight is None:
        true_sample_weight = None
        weight = true_prob
    else:
        true_sample_weight = np.concatenate([sample_weight, sample_weight])
        weight = true_prob * true_sample_weight
    with sklearn.config_context(enable_metadata_routing=True), warnings.catch_warnings():
        # sklearn 1.9 deprecates `penalty`; kept to match alpaca_eval's exact call (pinned sklearn).
        warnings.simplefilter("ignore", FutureWarning)
        # liblinear often stops early at the grid's largest C values; alpaca_eval's fit does the
        # same.
        warnings.simplefilter("ignore", ConvergenceWarning)
        scorer = make_scorer(
            _logloss_continuous, response_method="predict_proba", greater_is_better=False
        )
        scorer = scorer.set_score_request(true_sample_weight=True, true_prob=True)
        model = LogisticRegressionCV(
            cv=GroupKFold(n_splits=n_splits),
            scoring=scorer,
            random_state=123,
            dual=False,
            penalty="l1",
            solver="liblinear",
            n_jobs=None,
            fit_intercept=False,
        )
        model.set_fit_request(sample_weight=True)
        model.fit(
            X=x_dup,
            y=y_dup,
            sample_weight=weight,
            groups=groups,
            true_sample_weight=true_sample_weight,
            true_prob=true_prob,
        )
    return model


def _logloss_continuous(
    y_true: Any, y_pred: Any, true_prob: Any, true_sample_weight: Any = None
) -> float:
    """Log loss against soft targets (sklearn scorers expect hard labels; alpaca_eval's
    workaround)."""
    import numpy as np

    y_soft = np.where(y_true == 1, true_prob, 1 - true_prob)
    y_pred = np.clip(y_pred, 1e-15, 1 - 1e-15)
    losses = y_soft * np.log(y_pred) + (1 - y_soft) * np.log(1 - y_pred)
    if true_sample_weight is not None:
        losses = losses * true_sample_weight
    return float(-np.mean(losses))


def length_controlled_win_rate(
    preferences: Sequence[float],
    reference_lengths: Sequence[int],
    model_lengths: Sequence[int],
    *,
    glm: str = "length_controlled_minimal",
    prior: LCPrior | None = None,
    indices: Sequence[int] | None = None,
) -> dict[str, float]:
    """AlpacaEval 2.0's metrics for one model against the reference, LC win rate included.

    Args:
        preferences: One per instruction, AlpacaEval convention (2 = model better; NaN = unusable).
        reference_lengths: Characters of each reference output (``output_1``).
        model_lengths: Characters of each model output (``output_2``).
        glm: ``"length_controlled_v1"`` (needs ``prior``) or ``"length_controlled_minimal"``.
        prior: Difficulties and gamed-baseline annotations (``df_gamed.csv``) for v1.
        indices: Each instruction's position in the full eval set (for the difficulty lookup);
            default ``0..n-1``.

    Returns:
        ``head_to_head`` metrics plus ``length_controlled_winrate`` (0-100).

    Raises:
        ValueError: Mismatched lengths, an unknown GLM, a missing prior, or no usable preference.
    """
    import numpy as np

    n = len(preferences)
    if not (len(reference_lengths) == len(model_lengths) == n):
        raise ValueError(
            f"need one length pair per preference; got {n} preferences, {len(reference_lengths)} "
            f"reference lengths, {len(model_lengths)} model lengths"
        )
    if glm not in GLMS:
        raise ValueError(f"unknown LC GLM {glm!r}; valid: {', '.join(GLMS)}")
    info = GLMS[glm]
    if info["difficulty"] and prior is None:
        raise ValueError(
            f"{glm} needs the instruction difficulties of AlpacaEval's df_gamed.csv (an LCPrior)"
        )
    metrics = head_to_head(preferences)
    usable = [_as_pairwise(p) - 1 for p in preferences if not math.isnan(p)]
    if not usable:
        raise ValueError("no usable judge preference: every annotation was NaN")
    if len(set(usable)) == 1:
        metrics["length_controlled_winrate"] = usable[0] * 100
        return metrics

    delta = [float(r - m) for r, m in zip(reference_lengths, model_lengths, strict=True)]
    std = _std(delta)
    std_delta = [d / std if std and math.isfinite(std) else 0.0 for d in delta]
    y = np.array([_as_pairwise(p) - 1 for p in preferences], dtype=float)
    idx = list(indices) if indices is not None else list(range(n))
    columns = [np.tanh(np.array(std_delta))]
    test_columns = [np.zeros(n)]
    if info["difficulty"]:
        assert prior is not None
        try:
            diff = np.array([prior.difficulty[i] for i in idx], dtype=float)
        except KeyError as missing:
            raise ValueError(
                f"the LC prior has no difficulty for instruction index {missing}"
            ) from None
        columns.append(diff)
        test_columns.append(diff)
    columns.append(np.ones(n))
    test_columns.append(np.ones(n))
    x = np.stack(columns, axis=1)
    x_test = np.stack(test_columns, axis=1)
    weight = None
    lam = info["regularize_to_baseline_lambda"]
    if lam:
        assert prior is not None
        gamed = np.array([[math.tanh(s), d, 0.0] for _, s, d in prior.rows], dtype=float).reshape(
            -1, 3
        )
        x = np.concatenate([gamed, x], axis=0)
        y = np.concatenate([np.array([p for p, _, _ in prior.rows], dtype=float), y])
        # Divided by 2 because df_gamed holds two gamed baselines (alpaca_eval's comment).
        weight = np.concatenate([np.full(len(prior.rows), lam / 2), np.ones(n)])
    keep = ~np.isnan(y)
    model = _fit_soft_logistic(
        x[keep], y[keep], None if weight is None else weight[keep], info["n_splits"]
    )
    predicted = model.predict_proba(x_test)[:, 1]
    metrics["length_controlled_winrate"] = float(predicted.mean() * 100)
    return metrics
