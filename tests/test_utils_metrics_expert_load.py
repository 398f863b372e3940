"""utils.spec.metrics.expert_load: the experts' load of a mixture-of-experts run from its steps' router counts."""

from utils.spec import metrics

WINDOW = metrics.Window(first_step=2, last_step=3, steps=[2, 3])


def step(number: int, most: list[int], made: list[int]) -> dict:
    return {"step": number, "expert_load_max": most, "expert_load_assigned": made}


def test_each_layers_busiest_expert_against_the_mean_over_the_window_and_the_assignments_not_made():
    # 4 experts, top-2, 8 tokens a step: 16 assignments a layer, a mean of 4 an expert
    steps = [step(1, [16, 16], [16, 16]),  # a warm-up step: left out
             step(2, [4, 8], [16, 16]),  # layer 0 balanced (1.0), layer 1's busiest expert twice the mean (2.0)
             step(3, [6, 6], [16, 12])]  # 1.5, and 6 x 4 / 12 = 2.0 with 4 assignments dropped
    load = metrics.expert_load(steps, WINDOW, experts=4, top_k=2, tokens_per_step=8)
    assert load == {"experts": 4, "layers": 2, "steps": 2, "max_over_mean": 2.0,
                    "max_over_mean_by_layer": [1.25, 2.0], "dropped_assignments": 4}


def test_no_figure_without_counted_steps_in_the_window():
    assert metrics.expert_load([step(1, [4], [16])], WINDOW, experts=4, top_k=2, tokens_per_step=8) is None
    assert metrics.expert_load([step(2, [4], [16])], None, experts=4, top_k=2, tokens_per_step=8) is None
