"""etj_trainer.models (the package): the architecture's tower, or the job's own, and a
fresh local copy of a trained one. In-process, eager."""

from __future__ import annotations

import numpy as np
import pytest
from harness import job_spec

from etj.api.architectures import FIRST_ORDER, Architecture
from etj_trainer.models import TOWERS, build_model_tower, build_tower, has_first_order, local_tower
from etj_trainer.models.ctr import tower_inputs_of


def _model(architecture: Architecture):
    spec = job_spec(model={**job_spec().model.to_wire(), "architecture": architecture.value})
    return spec.model


def test_every_architecture_has_its_tower():
    assert set(TOWERS) == set(Architecture)


@pytest.mark.parametrize("architecture", list(Architecture))
def test_the_tower_is_the_architectures_and_says_if_it_has_first_order_tables(tf, architecture):
    model = _model(architecture)
    tower = build_tower(model, tower_inputs_of(model), seed=3)
    assert type(tower) is TOWERS[architecture]
    assert has_first_order(model) == (architecture in FIRST_ORDER)
    assert type(build_model_tower(model, tower_inputs_of(model), 3)) is TOWERS[architecture]


def test_the_same_seed_builds_the_same_tower(tf):
    model = _model(Architecture.DCN_V2)
    inputs = tower_inputs_of(model)
    a, b = build_tower(model, inputs, 3), build_tower(model, inputs, 3)
    np.testing.assert_array_equal(a.params.numpy(), b.params.numpy())
    assert not np.array_equal(a.params.numpy(), build_tower(model, inputs, 4).params.numpy())


def test_a_local_tower_holds_the_trained_values(tf):
    model = _model(Architecture.DNN)
    inputs = tower_inputs_of(model)
    trained = build_tower(model, inputs, 3)
    trained.params.assign(trained.params * 2.0 + 1.0)
    copy = local_tower(model, inputs, 3, trained)
    assert copy is not trained
    np.testing.assert_array_equal(copy.params.numpy(), trained.params.numpy())
