"""Reference Code World Model of Blackjack-v1 (sab=True), written by hand from the environment's documented rules.
State (player sum, dealer's showing card 1-10, usable ace 0/1); action 0 stick, 1 hit. Cards come from an infinite
deck: 1 (ace) to 9 with probability 1/13 each, 10 (ten or face card) with 4/13. An ace counts 11 while that keeps
the hand at 21 or less (a usable ace). Hit: one card is added; over 21 is a bust (-1, the episode ends), otherwise
reward 0. Stick: the dealer turns the hidden card and draws until the hand is 17 or more (a usable ace counts 11, so
the dealer stands on a soft 17); the episode ends with +1 if the player's sum is closer to 21 (or the dealer
busts), 0 on a tie, -1 otherwise.

The cards are random, so a deterministic model can only predict the most likely outcome: a hit busts when that is
more likely than not, and otherwise yields the most likely hand that does not bust (a 10, the most frequent card,
where it does not bust); a stick pays the most likely of -1, 0, +1 under the exact distribution of the dealer's
final hand. With sab=True a natural blackjack (ace + ten in two cards) wins unless the dealer has one too; the state
cannot tell a two-card 21 from a longer one, and 21 is the most likely winner either way.

`step_distribution` gives the exact distribution of the outcome: for a hit, one entry per card (a bust ends the
episode with the busted sum); for a stick, the probabilities of -1, 0 and +1. The one thing it cannot know is whether
a 21 is a natural (only the first state of an episode can be): it scores every 21 as a plain 21, so a natural that
meets the dealer's three-card 21 is called a tie where the environment pays +1."""
import functools

CARDS = tuple(range(1, 11))
CARD_P = {c: (4 / 13 if c == 10 else 1 / 13) for c in CARDS}


def hand_value(hard, has_ace):
    "(total, usable ace) of a hand whose cards add up to `hard` counting aces as 1."
    if has_ace and hard + 10 <= 21:
        return hard + 10, 1
    return hard, 0


@functools.lru_cache(maxsize=None)
def dealer_outcomes(hard, has_ace):
    "Probabilities of the dealer's final total {17..21, 22 meaning bust} from a hand it keeps drawing to."
    total, _ = hand_value(hard, has_ace)
    if total >= 17:
        return {min(total, 22): 1.0}
    out = {}
    for c in CARDS:
        for t, p in dealer_outcomes(hard + c, has_ace or c == 1).items():
            out[t] = out.get(t, 0.0) + CARD_P[c] * p
    return out


def stick_distribution(player_sum, dealer_card):
    "{-1.0: p, 0.0: p, 1.0: p}: the probabilities of the rewards of sticking, over the dealer's hidden card and draws."
    lose = draw = win = 0.0
    for c in CARDS:   # the dealer's hidden card, then its draws
        for t, p in dealer_outcomes(dealer_card + c, dealer_card == 1 or c == 1).items():
            p *= CARD_P[c]
            if t > 21 or t < player_sum: win += p
            elif t == player_sum: draw += p
            else: lose += p
    return {-1.0: lose, 0.0: draw, 1.0: win}


def stick_reward(player_sum, dealer_card):
    "The most likely reward of sticking: -1, 0 or +1 (ties go to the smaller reward)."
    d = stick_distribution(player_sum, dealer_card)
    best = max(d.values())
    return -1.0 if d[-1.0] == best else (0.0 if d[0.0] == best else 1.0)


class Environment:
    def __init__(self):
        self.player_sum, self.dealer_card, self.usable_ace = 12, 10, 0

    def set_state(self, obs):
        self.player_sum, self.dealer_card, self.usable_ace = (int(v) for v in obs)

    def obs(self):
        return (self.player_sum, self.dealer_card, self.usable_ace)

    def step_distribution(self, action):
        if int(action) == 0:
            return [(p, self.obs(), r, True) for r, p in stick_distribution(self.player_sum, self.dealer_card).items() if p > 0]
        hard = self.player_sum - 10 * self.usable_ace
        out = []
        for c in CARDS:
            total, usable = hand_value(hard + c, self.usable_ace == 1 or c == 1)
            out.append((CARD_P[c], (total, self.dealer_card, usable), -1.0 if total > 21 else 0.0, total > 21))
        return out

    def step(self, action):
        if int(action) == 0:
            return self.obs(), stick_reward(self.player_sum, self.dealer_card), True
        hard = self.player_sum - 10 * self.usable_ace
        outcomes, p_bust = {}, 0.0
        for c in sorted(CARDS, reverse=True):   # ties between equally likely hands go to the higher card
            total, usable = hand_value(hard + c, self.usable_ace == 1 or c == 1)
            if total > 21: p_bust += CARD_P[c]
            else: outcomes[(total, usable)] = outcomes.get((total, usable), 0.0) + CARD_P[c]
        if p_bust > 0.5 or not outcomes:
            self.player_sum, self.usable_ace = hard + 10, 0   # the most likely card, a 10, busts the hand
            return self.obs(), -1.0, True
        self.player_sum, self.usable_ace = max(outcomes, key=outcomes.get)
        return self.obs(), 0.0, False
