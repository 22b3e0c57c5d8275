"""Stand-in behavioural tests of MountainCar-v0, written by hand from its description for the provider test double
(cwm_nb.testing.capable_model). The last test is wrong on purpose (gravity acts on a car that is not pushed), so
the real environment drops it."""

def test_reward_is_minus_one(Environment):
    env = Environment(); env.set_state([-0.5, 0.0])
    assert env.step(1)[1] == -1.0

def test_reaching_the_flag_ends_episode(Environment):
    env = Environment(); env.set_state([0.49, 0.02])
    next_state, reward, done = env.step(2)
    assert next_state[0] >= 0.5 and done

def test_left_wall_stops_the_car(Environment):
    env = Environment(); env.set_state([-1.2, -0.05])
    next_state, _, done = env.step(0)
    assert abs(next_state[0] + 1.2) < 1e-6 and next_state[1] == 0.0 and not done

def test_pushing_right_beats_pushing_left(Environment):
    a, b = Environment(), Environment()
    a.set_state([-0.5, 0.0]); b.set_state([-0.5, 0.0])
    assert a.step(2)[0][1] > b.step(0)[0][1]

def test_no_push_keeps_velocity(Environment):
    env = Environment(); env.set_state([-0.3, 0.01])
    assert abs(env.step(1)[0][1] - 0.01) < 1e-9, "without a push the velocity should not change"
