"""Stand-in behavioural tests of CartPole-v1, written by hand from its description for the provider test double
(cwm_nb.testing.capable_model): what a capable model might answer to the test-writing prompt. The last test is
wrong on purpose (the cart moves the way it is pushed), so the real environment drops it."""

def test_cart_beyond_track_ends_episode(Environment):
    env = Environment(); env.set_state([2.39, 1.0, 0.0, 0.0])
    assert env.step(1)[2], "the cart passes x = 2.4: the episode must end"

def test_pole_beyond_twelve_degrees_ends_episode(Environment):
    env = Environment(); env.set_state([0.0, 0.0, 0.2, 1.0])
    assert env.step(1)[2], "the pole passes 12 degrees (0.2095 rad): the episode must end"

def test_reward_is_one_per_step(Environment):
    env = Environment(); env.set_state([0.0, 0.0, 0.0, 0.0])
    assert env.step(0)[1] == 1.0

def test_upright_pole_goes_on(Environment):
    env = Environment(); env.set_state([0.0, 0.0, 0.01, 0.0])
    assert not env.step(0)[2]

def test_push_right_moves_cart_left(Environment):
    env = Environment(); env.set_state([0.0, 0.0, 0.0, 0.0])
    assert env.step(1)[0][1] < 0, "pushing right should move the cart left"
