"""Importing this module warms math-verify: its first parse of each kind of answer compiles grammars and
fills caches (about 0.3-0.5 s each), which would otherwise count against the first items' time limit.

The pools preload it, so the forkserver warms up once and every worker, replacements included, starts
warm (rewards.pool, rewards.verl_entry.POOL_PRELOAD).
"""

from rewards import math as math_reward

# One of each answer shape the benchmarks use: integer, fraction, decimal, tuple, set, interval,
# equation, radical, scientific notation, text.
WARM_UP_ITEMS = [
    ("\\boxed{42}", "42"),
    ("\\boxed{\\frac{1}{2}}", "0.5"),
    ("\\boxed{(1, 2)}", "(1,2)"),
    ("\\boxed{1, 2}", "$1$,$2$"),
    ("\\boxed{(0, 4]}", "(0,4]"),
    ("\\boxed{x = 2}", "x=2"),
    ("\\boxed{2\\sqrt{3}}", "\\sqrt{12}"),
    ("\\boxed{3 \\times 10^{8}}", "3 \\times 10^{8}"),
    ("\\boxed{\\text{east}}", "\\text{east}"),
]


def warm_up() -> None:
    for response, answer in WARM_UP_ITEMS:
        math_reward.score(response, answer, 1)


warm_up()
