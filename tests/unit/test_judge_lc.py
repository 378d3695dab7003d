"""AlpacaEval 2.0 win rate and LC win rate: equal to alpaca_eval 0.6.6's own numbers, plus the fixed
edge cases.

How the worked values were derived: alpaca_eval 0.6.6 was pip-installed next to our pins; its
``metrics/glm_winrate.get_length_controlled_winrate`` was run on the annotations below (outputs
``"a" * reference_length`` / ``"b" * model_length``), with a stub ``pkg_resources`` (removed from
current setuptools) and ``hf_hub_download`` redirected to a ``df_gamed.csv`` written from
``prior_rows`` (it downloads that file on every call). Our port must reproduce every value.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import pytest

from autorl.tasks import get_task, load_task_module

_LC = load_task_module(get_task("alpacaeval"), "lc.py")
LCPrior, head_to_head, length_controlled_win_rate = (
    _LC.LCPrior,
    _LC.head_to_head,
    _LC.length_controlled_win_rate,
)

NAN = math.nan

WORKED: dict[str, dict[str, Any]] = {
    "binary": {
        "reference_lengths": [
            379,
            257,
            279,
            360,
            239,
            314,
            336,
            105,
            41,
            134,
            128,
            351,
            366,
            22,
            209,
            332,
            69,
            322,
            65,
            197,
            330,
            135,
            149,
            125,
        ],
        "model_lengths": [
            509,
            193,
            693,
            322,
            345,
            363,
            416,
            396,
            366,
            696,
            569,
            559,
            496,
            443,
            251,
            692,
            337,
            166,
            594,
            128,
            603,
            436,
            98,
            49,
        ],
        "preferences": [
            2.0,
            2.0,
            2.0,
            1.0,
            2.0,
            2.0,
            2.0,
            2.0,
            2.0,
            2.0,
            2.0,
            2.0,
            2.0,
            2.0,
            1.0,
            2.0,
            2.0,
            1.0,
            2.0,
            1.0,
            2.0,
            2.0,
            2.0,
            2.0,
        ],
        "win_rate": 83.33333333333334,
        "length_controlled_minimal": 69.41326019676298,
        "length_controlled_v1": 71.3797673262562,
        "prior_rows": [
            (0, 0.633, -0.281, -1.075),
            (1, 0.776, 0.664, -1.273),
            (2, 0.648, 0.819, 0.128),
            (3, 0.44, -0.049, 0.81),
            (4, 0.467, -0.094, 0.532),
            (5, 0.666, 1.386, 0.253),
            (6, 0.745, 0.33, -1.294),
            (7, 0.536, 1.498, 1.375),
            (8, 0.844, 0.896, -1.974),
            (9, 0.777, 3.224, -0.699),
            (10, 0.475, -1.258, -0.594),
            (11, 0.323, 0.065, 1.975),
            (12, 0.597, 0.867, 0.594),
            (13, 0.364, -0.982, 0.459),
            (14, 0.421, 0.743, 1.92),
            (15, 0.54, 2.537, 1.463),
            (16, 0.635, 3.385, 0.689),
            (17, 0.691, 0.273, -0.837),
            (18, 0.597, 0.863, 0.59),
            (19, 0.832, 1.041, -1.706),
            (20, 0.712, 1.782, -0.085),
            (21, 0.647, 0.568, -0.092),
            (22, 0.645, -0.721, -1.655),
            (23, 0.723, 1.545, -0.242),
            (0, 0.657, -0.124, -1.075),
            (1, 0.591, -0.814, -1.273),
            (2, 0.375, -1.623, 0.128),
            (3, 0.548, 0.648, 0.81),
            (4, 0.32, -2.418, 0.532),
            (5, 0.633, 0.813, 0.253),
            (6, 0.609, -0.658, -1.294),
            (7, 0.33, -0.329, 1.375),
            (8, 0.702, -0.508, -1.974),
            (9, 0.485, -1.337, -0.699),
            (10, 0.633, 0.069, -0.594),
            (11, 0.196, -1.416, 1.975),
            (12, 0.367, -0.756, 0.594),
            (13, 0.55, 0.344, 0.459),
            (14, 0.255, -0.477, 1.92),
            (15, 0.494, 0.921, 1.463),
            (16, 0.549, 0.534, 0.689),
            (17, 0.505, -1.284, -0.837),
            (18, 0.38, -0.642, 0.59),
            (19, 0.694, -0.345, -1.706),
            (20, 0.465, -0.61, -0.085),
            (21, 0.397, -1.822, -0.092),
            (22, 0.599, -1.453, -1.655),
            (23, 0.411, -2.189, -0.242),
        ],
    },
    "draws": {
        "reference_lengths": [
            70,
            68,
            322,
            209,
            244,
            248,
            290,
            30,
            204,
            76,
            172,
            372,
            228,
            46,
            226,
            69,
            306,
            380,
            392,
            256,
            349,
            160,
            75,
            214,
        ],
        "model_lengths": [
            321,
            470,
            696,
            207,
            601,
            113,
            256,
            555,
            188,
            475,
            332,
            368,
            660,
            575,
            590,
            393,
            687,
            687,
            111,
            159,
            229,
            396,
            580,
            348,
        ],
        "preferences": [
            1.5,
            2.0,
            2.0,
            1.0,
            2.0,
            1.5,
            2.0,
            2.0,
            2.0,
            2.0,
            1.5,
            2.0,
            2.0,
            2.0,
            2.0,
            1.5,
            2.0,
            2.0,
            1.0,
            2.0,
            1.5,
            2.0,
            2.0,
            2.0,
        ],
        "win_rate": 81.25,
        "length_controlled_minimal": 70.48446272270526,
        "length_controlled_v1": 72.90029337448249,
        "prior_rows": [
            (0, 0.734, 0.853, -0.662),
            (1, 0.566, 0.413, 0.418),
            (2, 0.837, 1.037, -1.786),
            (3, 0.592, 0.5, 0.304),
            (4, 0.384, 0.127, 1.525),
            (5, 0.597, 0.701, 0.459),
            (6, 0.754, 2.512, -0.454),
            (7, 0.436, 1.973, 2.263),
            (8, 0.373, 0.327, 1.881),
            (9, 0.421, -0.654, 0.237),
            (10, 0.456, -2.304, -0.622),
            (11, 0.427, 0.9, 1.988),
            (12, 0.825, 0.145, -2.498),
            (13, 0.613, 1.541, 0.759),
            (14, 0.474, -0.506, -0.046),
            (15, 0.824, 2.331, -1.316),
            (16, 0.766, 1.032, -0.882),
            (17, 0.648, 1.485, 0.447),
            (18, 0.677, 0.952, -0.047),
            (19, 0.541, 2.927, 1.466),
            (20, 0.64, 0.415, -0.205),
            (21, 0.502, 1.329, 1.597),
            (22, 0.644, 0.517, -0.117),
            (23, 0.742, 0.716, -0.855),
            (0, 0.741, 0.96, -0.662),
            (1, 0.403, -0.613, 0.418),
            (2, 0.6, -2.416, -1.786),
            (3, 0.366, -1.27, 0.304),
            (4, 0.411, 0.299, 1.525),
            (5, 0.462, -0.175, 0.459),
            (6, 0.535, -0.433, -0.454),
            (7, 0.2, -0.78, 2.263),
            (8, 0.371, 0.311, 1.881),
            (9, 0.354, -2.211, 0.237),
            (10, 0.543, -0.531, -0.622),
            (11, 0.19, -1.702, 1.988),
            (12, 0.85, 0.439, -2.498),
            (13, 0.318, -1.19, 0.759),
            (14, 0.412, -1.177, -0.046),
            (15, 0.603, -0.742, -1.316),
            (16, 0.734, 0.6, -0.882),
            (17, 0.525, 0.176, 0.447),
            (18, 0.403, -1.378, -0.047),
            (19, 0.477, 0.742, 1.466),
            (20, 0.445, -0.962, -0.205),
            (21, 0.231, -1.292, 1.597),
            (22, 0.464, -0.654, -0.117),
            (23, 0.484, -2.557, -0.855),
        ],
    },
    "nan": {
        "reference_lengths": [
            360,
            348,
            331,
            345,
            46,
            328,
            377,
            119,
            84,
            49,
            323,
            379,
            249,
            253,
            319,
            20,
            337,
            365,
            70,
            394,
            342,
            128,
            202,
            329,
        ],
        "model_lengths": [
            632,
            76,
            467,
            318,
            254,
            576,
            487,
            297,
            619,
            372,
            600,
            99,
            638,
            573,
            382,
            358,
            234,
            188,
            210,
            548,
            283,
            685,
            278,
            386,
        ],
        "preferences": [
            NAN,
            1.0,
            2.0,
            2.0,
            1.0,
            2.0,
            NAN,
            2.0,
            2.0,
            2.0,
            2.0,
            2.0,
            NAN,
            2.0,
            2.0,
            1.0,
            1.0,
            2.0,
            NAN,
            2.0,
            2.0,
            2.0,
            2.0,
            2.0,
        ],
        "win_rate": 80.0,
        "length_controlled_minimal": 66.08720296097898,
        "length_controlled_v1": 77.51069200404719,
        "prior_rows": [
            (0, 0.418, -0.268, 0.692),
            (1, 0.801, 2.737, -0.992),
            (2, 0.714, 0.808, -0.491),
            (3, 0.481, 1.12, 1.68),
            (4, 0.6, 0.79, 0.514),
            (5, 0.553, 1.558, 1.253),
            (6, 0.601, 0.591, 0.32),
            (7, 0.519, 1.048, 1.339),
            (8, 0.6, 0.509, 0.243),
            (9, 0.784, 1.658, -0.882),
            (10, 0.841, 1.34, -1.712),
            (11, 0.79, 1.167, -1.093),
            (12, 0.69, -0.102, -1.339),
            (13, 0.664, -0.305, -1.381),
            (14, 0.696, 0.213, -0.959),
            (15, 0.791, 1.874, -0.924),
            (16, 0.708, 0.063, -1.285),
            (17, 0.764, 0.465, -1.343),
            (18, 0.547, 1.713, 1.333),
            (19, 0.582, 1.93, 1.081),
            (20, 0.726, 2.009, -0.195),
            (21, 0.273, -1.447, 1.104),
            (22, 0.67, 0.346, -0.552),
            (23, 0.538, -0.614, -0.67),
            (0, 0.307, -1.868, 0.692),
            (1, 0.505, -2.006, -0.992),
            (2, 0.473, -1.071, -0.491),
            (3, 0.33, -0.095, 1.68),
            (4, 0.605, 0.845, 0.514),
            (5, 0.401, 0.036, 1.253),
            (6, 0.349, -1.781, 0.32),
            (7, 0.254, -1.319, 1.339),
            (8, 0.42, -0.654, 0.243),
            (9, 0.697, 0.284, -0.882),
            (10, 0.661, -0.627, -1.712),
            (11, 0.544, -1.14, -1.093),
            (12, 0.624, -0.577, -1.339),
            (13, 0.589, -0.996, -1.381),
            (14, 0.546, -0.88, -0.959),
            (15, 0.513, -1.35, -0.924),
            (16, 0.591, -0.83, -1.285),
            (17, 0.799, 0.924, -1.343),
            (18, 0.323, -0.415, 1.333),
            (19, 0.542, 0.927, 1.081),
            (20, 0.659, 0.569, -0.195),
            (21, 0.296, -0.938, 1.104),
            (22, 0.602, -0.089, -0.552),
            (23, 0.517, -0.806, -0.67),
        ],
    },
    "soft": {
        "reference_lengths": [
            301,
            341,
            60,
            81,
            194,
            231,
            309,
            159,
            33,
            101,
            193,
            166,
            367,
            182,
            262,
            252,
            54,
            299,
            38,
            25,
        ],
        "model_lengths": [
            418,
            192,
            268,
            430,
            126,
            76,
            496,
            698,
            484,
            585,
            301,
            45,
            462,
            405,
            529,
            434,
            351,
            24,
            494,
            141,
        ],
        "preferences": [
            1.846,
            1.526,
            1.904,
            1.957,
            1.644,
            1.517,
            1.893,
            1.986,
            1.976,
            1.98,
            1.839,
            1.568,
            1.828,
            1.912,
            1.931,
            1.89,
            1.942,
            1.343,
            1.977,
            1.845,
        ],
        "win_rate": 81.52,
        "length_controlled_minimal": 74.62142769325575,
        "length_controlled_v1": 75.55080345757943,
        "prior_rows": [
            (0, 0.548, 1.021, 1.092),
            (1, 0.872, 1.298, -2.232),
            (2, 0.735, 0.432, -1.073),
            (3, 0.587, 1.833, 1.026),
            (4, 0.616, 1.354, 0.684),
            (5, 0.491, 0.257, 0.821),
            (6, 0.794, 1.313, -1.088),
            (7, 0.583, 2.079, 1.086),
            (8, 0.627, -0.277, -1.021),
            (9, 0.626, 0.37, -0.138),
            (10, 0.654, 0.271, -0.504),
            (11, 0.71, 0.841, -0.431),
            (12, 0.797, 1.29, -1.135),
            (13, 0.326, -1.036, 0.767),
            (14, 0.733, 0.762, -0.719),
            (15, 0.544, 0.348, 0.519),
            (16, 0.517, 0.553, 0.971),
            (17, 0.724, 0.042, -1.467),
            (18, 0.763, 2.34, -0.561),
            (19, 0.759, -0.054, -1.969),
            (0, 0.295, -0.968, 1.092),
            (1, 0.777, -0.097, -2.232),
            (2, 0.783, 1.056, -1.073),
            (3, 0.322, -0.715, 1.026),
            (4, 0.4, -0.394, 0.684),
            (5, 0.54, 0.59, 0.821),
            (6, 0.547, -1.082, -1.088),
            (7, 0.419, 0.022, 1.086),
            (8, 0.592, -0.531, -1.021),
            (9, 0.404, -1.735, -0.138),
            (10, 0.448, -1.783, -0.504),
            (11, 0.488, -0.794, -0.431),
            (12, 0.704, 0.144, -1.135),
            (13, 0.407, -0.284, 0.767),
            (14, 0.675, 0.249, -0.719),
            (15, 0.347, -1.15, 0.519),
            (16, 0.427, -0.012, 0.971),
            (17, 0.667, -0.355, -1.467),
            (18, 0.668, 0.322, -0.561),
            (19, 0.77, 0.033, -1.969),
        ],
    },
}


def _prior(tmp_path: Path, rows: list[tuple[int, float, float, float]]) -> LCPrior:
    """Write the rows as AlpacaEval's df_gamed.csv (first half one gamed model, second half the
    other)."""
    path = tmp_path / "df_gamed.csv"
    half = len(rows) // 2
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(
            [
                "model",
                "index",
                "preference",
                "std_delta_len",
                "instruction_difficulty",
                "not_gamed_baseline",
            ]
        )
        for position, (index, pref, std_delta, difficulty) in enumerate(rows):
            writer.writerow(
                [
                    "gamed_verbose" if position < half else "gamed_concise",
                    index,
                    pref,
                    std_delta,
                    difficulty,
                    False,
                ]
            )
    return LCPrior.from_csv(path)


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
