"""Per-turn credit (issue 41): the estimators against single-turn GRPO on one-turn sessions, hand-computed
values, and an exact enumeration of a tiny continue/stop policy showing the bias of per-turn-index normalisation
when the policy controls the session length, and that the leave-one-out per-position baseline has none."""

from __future__ import annotations

import itertools

import pytest
import torch

from rpbench.core.errors import ConfigError
from rpbench.objectives.losses import group_advantages
from rpbench.objectives.turn_credit.advantages import TURN_ADVANTAGES, TurnBatch, TurnCreditSettings
from rpbench.objectives.turn_credit.tokens import token_advantages
from rpbench.validate import validate

CREDIT = TurnCreditSettings(gamma=1.0, mix_weight=0.3, share_temperature=0.5)


def batch_of(session, turns, lengths, scored, group_size, scale, credit=CREDIT) -> TurnBatch:
    return TurnBatch(
        torch.tensor(session, dtype=torch.float64),
        torch.tensor(turns, dtype=torch.float64),
        torch.tensor(lengths),
        torch.tensor(scored),
        group_size,
        scale,
        credit,
    )


@pytest.mark.parametrize("scale", ["group", "none"])
@pytest.mark.parametrize("name", sorted(TURN_ADVANTAGES.names()))
def test_on_one_turn_sessions_every_estimator_is_single_turn_grpo(name, scale):
    """Two groups of four one-turn sessions (one unscored, one group constant): each estimator equals
    group_advantages of the session reward plus the turn reward (utterance_share: of the session reward, the
    only thing it distributes)."""
    session = [0.2, 0.9, 0.4, 0.1, 0.5, 0.5, 0.5, 0.5]
    turn = [0.3, -0.2, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    scored = [True, True, False, True, True, True, True, True]
    batch = batch_of(session, [[t] for t in turn], [1] * 8, scored, 4, scale)
    reward = torch.tensor(session, dtype=torch.float64)
    if name != "utterance_share":
        reward = reward + torch.tensor(turn, dtype=torch.float64)
    expected = group_advantages(reward, 4, scale, scored=torch.tensor(scored))
    got = TURN_ADVANTAGES.get(name)(batch)[:, 0]
    assert got.tolist() == pytest.approx(expected.tolist(), abs=1e-12)
    assert expected[:4].abs().sum() > 0.5 and expected[4:].abs().sum() == 0  # the comparison is not trivial


def test_returns_and_the_leave_one_out_baseline_by_hand():
    """One group: session A 3 turns (turn rewards 1, 0, 2; session reward 1), B 1 turn (0.5; 0), C 2 turns
    (0, 1; 3). gamma 0.5: A's returns 1 + 0.5 * (0 + 0.5 * 3) = 1.75, 1.5, 3; B's 0.5; C's 0 + 0.5 * 4 = 2, 4.
    turn_loo (scale none, n = 3): A turn 1: 2/3 * (1.75 - (0.5 + 2) / 2); turn 2: 2/3 * (1.5 - 4); turn 3 no other
    session reaches it: 2/3 * 3. turn_return turn 2 over A and C alone: +-(4 - 1.5) / 2."""
    credit = TurnCreditSettings(gamma=0.5, mix_weight=0.5, share_temperature=1.0)
    batch = batch_of([1.0, 0.0, 3.0], [[1, 0, 2], [0.5, 0, 0], [0, 1, 0]], [3, 1, 2], [True] * 3, 3, "none", credit)
    assert batch.returns().tolist() == [[1.75, 1.5, 3.0], [0.5, 0.0, 0.0], [2.0, 4.0, 0.0]]
    loo = TURN_ADVANTAGES.get("turn_loo")(batch)
    assert loo[0].tolist() == pytest.approx([2 / 3 * (1.75 - 1.25), 2 / 3 * (1.5 - 4), 2.0])
    assert loo[1].tolist() == pytest.approx([2 / 3 * (0.5 - (1.75 + 2) / 2), 0, 0])
    per_index = TURN_ADVANTAGES.get("turn_return")(batch)
    assert per_index[:, 1].tolist() == pytest.approx([-1.25, 0.0, 1.25])
    assert per_index[0, 2] == 0  # alone at its turn: no comparison, no credit (the per-index bias)


def test_utterance_share_distributes_the_session_reward_by_the_turn_rewards():
    """Shares softmax(r / 0.5): turn rewards 0 and ln 2 / 2 give shares 1/3, 2/3 of 2 turns x reward 0.9 ->
    0.6, 1.2; a one-turn session of reward 0.3 keeps 0.3. Pooled over the three turns (scale none): minus 0.7."""
    batch = batch_of([0.9, 0.3], [[0.0, 0.6931471805599453 / 2], [5.0, 0.0]], [2, 1], [True, True], 2, "none")
    got = TURN_ADVANTAGES.get("utterance_share")(batch)
    assert got.flatten().tolist() == pytest.approx([0.6 - 0.7, 1.2 - 0.7, 0.3 - 0.7, 0.0])


# -- the continue/stop policy, enumerated exactly --------------------------------------------------------------
L = 3  # at most L turns; after turn t < L the policy continues with probability sigmoid(theta_t)
TURN_REWARD = [1.0, -2.0, 3.0]  # paid by turn t


def trajectories(theta: torch.Tensor):
    """(length, probability, per-turn score vectors d log pi(action after turn t) / d theta) of every session."""
    p = torch.sigmoid(theta)
    out = []
    for length in range(1, L + 1):
        prob, scores = torch.tensor(1.0, dtype=torch.float64), []
        for t in range(length):
            score = torch.zeros(L - 1, dtype=torch.float64)
            if t < L - 1:  # a decision after turn t: continue (t + 1 < length) or stop
                go = t + 1 < length
                prob = prob * (p[t] if go else 1 - p[t])
                score[t] = (1 - p[t]) if go else -p[t]
            scores.append(score)
        out.append((length, prob, scores))
    return out


def true_gradient(theta: torch.Tensor) -> torch.Tensor:
    """d E[sum of turn rewards] / d theta by autograd on the exact expectation (a route of its own)."""
    theta = theta.clone().requires_grad_(True)
    p = torch.sigmoid(theta)
    value, reach = 0.0, 1.0
    for t in range(L):
        value = value + reach * TURN_REWARD[t]
        if t < L - 1:
            reach = reach * p[t]
    (grad,) = torch.autograd.grad(value, theta)
    return grad


def expected_estimate(name: str, theta: torch.Tensor, group_size: int) -> torch.Tensor:
    """E over groups of the estimator's gradient: mean over sessions of sum over turns of score x advantage."""
    sessions = trajectories(theta)
    total = torch.zeros(L - 1, dtype=torch.float64)
    for group in itertools.product(sessions, repeat=group_size):
        lengths = [length for length, _, _ in group]
        turns = [[TURN_REWARD[t] if t < n else 0.0 for t in range(L)] for n in lengths]
        batch = batch_of([0.0] * group_size, turns, lengths, [True] * group_size, group_size, "none")
        advantages = TURN_ADVANTAGES.get(name)(batch)
        prob = torch.prod(torch.stack([p for _, p, _ in group]))
        estimate = sum(
            scores[t] * advantages[i, t] for i, (_, _, scores) in enumerate(group) for t in range(len(scores))
        )
        total += prob * estimate / group_size
    return total


@pytest.mark.parametrize("group_size", [2, 3])
def test_the_leave_one_out_per_turn_baseline_is_unbiased_and_the_per_index_normalisation_is_not(group_size):
    """True gradient vs the exact expectation of each estimator's gradient (advantage_scale none). turn_loo: equal
    times (G - 1) / G (its factor); session_grpo: parallel to it; turn_return (each turn index normalised over the
    sessions that reach it): a different direction, since a later turn is compared within fewer sessions."""
    theta = torch.tensor([0.3, -0.4], dtype=torch.float64)
    truth = true_gradient(theta)
    factor = (group_size - 1) / group_size
    loo = expected_estimate("turn_loo", theta, group_size)
    assert loo.tolist() == pytest.approx((factor * truth).tolist(), rel=1e-10)
    session = expected_estimate("session_grpo", theta, group_size)
    assert session.tolist() == pytest.approx((factor * truth).tolist(), rel=1e-10)
    naive = expected_estimate("turn_return", theta, group_size)
    cosine = float(naive @ truth / (naive.norm() * truth.norm()))
    assert cosine < 0.99  # biased in direction, not only in scale
    assert truth.abs().min() > 0.1


def test_a_turns_advantage_reaches_exactly_its_tokens():
    """Row 0: tokens of turns 0, 0, (user), 1, (user), 2; row 1: one turn. Only the policy's tokens get a value,
    in order."""
    per_turn = torch.tensor([[1.0, 2.0, 3.0], [-1.0, 0.0, 0.0]])
    got = token_advantages(per_turn, [[0, 0, -1, -1, 1, -1, 2], [-1, 0, 0]])
    assert got.tolist() == [[1.0, 1.0, 2.0, 3.0], [-1.0, -1.0, 0.0, 0.0]]
    with pytest.raises(ValueError, match="turn 3"):
        token_advantages(per_turn, [[3], [0]])


@pytest.mark.slow  # composes and validates a run per case
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["objective.advantage=nope"], r"objective.advantage='nope': expected a registered estimator \(mt_grpo"),
        (["env=none", "data=sample", "objective.advantage=turn_loo"], "session_grpo without env=conversation"),
        (["objective.advantage=turn_loo", "objective.advantage_scale=batch"], "group or none with"),
        (["objective.advantage=utterance_share"], "env.turn_rewards: at least one turn reward"),
        (["+env.turn_rewards.nope=1.0"], r"env.turn_rewards.nope=1.0: expected a registered turn reward"),
        (
            ["env.rewards=[{name: non_empty, weight: 1.0}]", "+env.turn_rewards.judge_breaks=-1.0"],
            "a session_judge among env.rewards",
        ),
        (["objective.turn_credit.gamma=1.5"], r"objective.turn_credit.gamma=1.5: expected a number in \[0, 1\]"),
    ],
)
def test_turn_credit_settings_are_checked_at_startup(tmp_path, overrides, message, composed):
    cfg = composed(
        tmp_path / "run", "objective=grpo", "env=conversation", "data=sample_conversation", "judge=local", *overrides
    )
    with pytest.raises(ConfigError, match=message):
        validate(cfg)
