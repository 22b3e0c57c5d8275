"""Stand-in behavioural tests of Taxi-v3, written by hand from its description for the provider test double
(cwm_nb.testing.capable_model). A state is ((taxi_row * 5 + taxi_col) * 5 + passenger_location) * 4 + destination.
The last test is wrong on purpose (a drop-off away from the destination is illegal), so the real environment drops
it."""

def encode(row, col, passenger, destination):
    return ((row * 5 + col) * 5 + passenger) * 4 + destination

def test_illegal_pickup_costs_ten(Environment):
    env = Environment(); env.set_state(encode(2, 2, 0, 1))
    next_state, reward, done = env.step(4)
    assert reward == -10 and next_state == encode(2, 2, 0, 1) and not done

def test_moving_south_costs_one(Environment):
    env = Environment(); env.set_state(encode(2, 2, 0, 1))
    assert env.step(0)[:2] == [encode(3, 2, 0, 1), -1]

def test_delivery_pays_twenty_and_ends(Environment):
    env = Environment(); env.set_state(encode(0, 4, 4, 1))
    next_state, reward, done = env.step(5)
    assert reward == 20 and done

def test_dropoff_anywhere_pays(Environment):
    env = Environment(); env.set_state(encode(2, 2, 4, 1))
    assert env.step(5)[1] == 20, "dropping the passenger off should pay"
