"""weft.train.fit: the trainer of weft train, given a model defined in Python. It trains the
Python module's own tensors, evaluates in eval mode, writes checkpoints that resume exactly, runs
data parallel under mpirun to one process's parameters, and refuses what it cannot do with the
command's message."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import weft
from weft import nn

BUILD = os.environ.get("WEFT_BUILD_DIR", "build")
WEFT = os.path.join(BUILD, "weft")


class SmallMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.ReLU())
        self.head = nn.Linear(32, 10)
        self.modes = []  # the training flag each forward saw

    def forward(self, x):
        self.modes.append(self.training)
        return self.head(self.body(x))


def small_mlp(seed=0):
    weft.manual_seed(seed)
    return SmallMLP()


def values(model):
    return {name: t.numpy().copy() for name, t in model.state_dict().items()}


QUICK = dict(batch_size=32, threads=1, log=False)


def test_fit_trains_the_python_modules_own_tensors():
    model = small_mlp()
    weight = model.head.weight
    before = values(model)
    result = weft.train.fit(model, steps=60, **QUICK)
    assert model.head.weight is weight  # trained in place, not replaced
    assert all(not np.array_equal(before[n], v) for n, v in values(model).items())
    assert result["model"] == "python:SmallMLP"
    assert result["steps"] == 60 and result["samples"] == 60 * 32
    assert result["params"] == 784 * 32 + 32 + 32 * 10 + 10
    # 60 steps of AdamW on Fashion-MNIST take a linear probe well past chance (10%).
    assert result["test_accuracy"] > 0.6
    # Evaluation ran in eval mode, training in train mode, and the model is left in train mode.
    assert model.modes[:60] == [True] * 60 and False in model.modes[60:]
    assert model.training


def test_a_resumed_fit_continues_to_the_same_parameters(tmp_path):
    # A constant schedule: cosine's is planned over the run's steps, which differ between the two.
    options = dict(QUICK, schedule="constant")
    straight = small_mlp()
    weft.train.fit(straight, steps=20, **options)
    first = small_mlp()
    weft.train.fit(first, steps=10, out=str(tmp_path / "run"), **options)
    saved = weft.load(str(tmp_path / "run"))
    assert sorted(saved) == sorted(values(first))
    for name, v in values(first).items():
        np.testing.assert_array_equal(saved[name].numpy(), v)
    resumed = small_mlp(seed=7)  # another initialisation: the checkpoint's weights replace it
    result = weft.train.fit(resumed, steps=20, resume=str(tmp_path / "run"), **options)
    assert result["start_step"] == 10 and result["steps"] == 20
    for name, v in values(straight).items():
        np.testing.assert_array_equal(values(resumed)[name], v, err_msg=name)


def test_a_checkpoint_of_fit_loads_into_the_model_and_weft_eval_says_how(tmp_path):
    model = small_mlp()
    weft.train.fit(model, steps=5, out=str(tmp_path / "run"), **QUICK)
    other = small_mlp(seed=3)
    other.load_state_dict(weft.load(str(tmp_path / "run")))
    for name, v in values(model).items():
        np.testing.assert_array_equal(values(other)[name], v)
    cli = subprocess.run([WEFT, "eval", "--checkpoint", str(tmp_path / "run")], capture_output=True, text=True)
    assert cli.returncode == 2
    assert "holds SmallMLP, a model defined in Python (weft.train.fit)" in cli.stderr
    assert "model.load_state_dict(weft.load(" in cli.stderr


def test_frozen_tensors_stay_bit_identical():
    model = small_mlp()
    model.body[1].weight.requires_grad_(False)  # frozen in Python
    frozen_before = model.body[1].weight.numpy().copy()
    bias_before = model.head.bias.numpy().copy()
    weft.train.fit(model, steps=10, freeze="^head\\.bias$", **QUICK)  # and by weft train's --freeze
    np.testing.assert_array_equal(model.body[1].weight.numpy(), frozen_before)
    np.testing.assert_array_equal(model.head.bias.numpy(), bias_before)
    assert not np.array_equal(model.head.weight.numpy(), small_mlp().head.weight.numpy())


def test_bf16_and_accumulation_train_through_the_same_flags():
    result = weft.train.fit(small_mlp(), steps=30, precision="bf16", grad_accum=2, **QUICK)
    assert result["precision"] == "bf16" and result["grad_accum"] == 2
    assert result["test_accuracy"] > 0.5


@pytest.mark.parametrize("options, error, words", [
    (dict(no_such_option=1), ValueError, "--no-such-option"),
    (dict(batch_size=0), ValueError, "--batch-size"),
    (dict(grad_accum=3), ValueError, "--grad-accum: must divide --batch-size"),
    (dict(optimizer="lion"), ValueError, "--optimizer"),
    (dict(checkpoint_activations=True), ValueError, "cuts weft's own models"),
    (dict(json=True), TypeError, "fit() takes no 'json' option: it returns the result"),
])
def test_options_fit_cannot_take_are_refused_with_the_flags_message(options, error, words):
    with pytest.raises(error, match=None) as raised:
        weft.train.fit(small_mlp(), **dict(QUICK, **options))
    assert words in str(raised.value)


def test_data_it_cannot_read_is_refused_naming_it():
    # Neither a data set weft knows nor a folder or table that exists.
    with pytest.raises(weft.Error, match="cannot open cifar-10: No such file or directory"):
        weft.train.fit(small_mlp(), "cifar-10", **QUICK)


class Broken(nn.Module):
    def __init__(self, returns):
        super().__init__()
        self.fc = nn.Linear(784, 10)
        self.returns = returns

    def forward(self, x):
        if self.returns == "raise":
            raise KeyError("raised in forward")
        return "not a tensor"


def test_an_exception_in_forward_reaches_the_caller_as_itself():
    with pytest.raises(KeyError, match="raised in forward"):
        weft.train.fit(Broken("raise"), steps=2, **QUICK)
    with pytest.raises(TypeError, match="returned a str, not a weft.Tensor"):
        weft.train.fit(Broken("str"), steps=2, **QUICK)


RANK_SCRIPT = """
import sys
import numpy as np
sys.path.insert(0, {tests!r})
import weft
from test_train import small_mlp, values
model = small_mlp()
weft.train.fit(model, steps=4, batch_size=32, optimizer="sgd", threads=1, eval_every=0, log=False)
if weft.train.rank() == 0:
    np.savez({out!r}, **values(model))
"""


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed")
def test_under_mpirun_fit_trains_data_parallel_to_one_processs_parameters(tmp_path):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
    tests = os.path.dirname(os.path.abspath(__file__))
    outputs = {}
    for ranks in (1, 2):
        out = str(tmp_path / f"ranks{ranks}.npz")
        script = tmp_path / f"fit{ranks}.py"
        script.write_text(RANK_SCRIPT.format(tests=tests, out=out))
        command = ["mpirun", "-np", str(ranks), "--bind-to", "none", sys.executable, str(script)]
        run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stdout + run.stderr
        outputs[ranks] = np.load(out)
    for name in outputs[1].files:
        # The same samples make each step; two ranks sum the gradient in another order. (SGD: Adam's
        # first update, lr times the gradient's sign, would turn a rounding of a gradient near zero
        # into a difference of twice the learning rate.)
        np.testing.assert_allclose(outputs[2][name], outputs[1][name], rtol=1e-5, atol=1e-6, err_msg=name)


class WiderHead(nn.Module):
    """SmallMLP's body with a head of another shape, under other names."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.ReLU())
        self.head = nn.Sequential(nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 10))

    def forward(self, x):
        return self.head(self.body(x))


def test_init_from_with_reinit_takes_a_head_of_another_shape(tmp_path):
    base = small_mlp()
    weft.train.fit(base, steps=10, out=str(tmp_path / "base"), **QUICK)
    weft.manual_seed(1)
    tuned = WiderHead()
    fresh_head = tuned.head[0].weight.numpy().copy()
    result = weft.train.fit(tuned, steps=1, init_from=str(tmp_path / "base"), reinit="^head\\.", freeze="^body\\.",
                            **QUICK)
    assert result["steps"] == 1
    np.testing.assert_array_equal(tuned.body[1].weight.numpy(), base.body[1].weight.numpy())
    assert not np.array_equal(tuned.head[0].weight.numpy(), fresh_head)  # trained from its fresh values
    with pytest.raises(weft.Error, match="has no 'head.0.weight'"):
        weft.train.fit(WiderHead(), steps=1, init_from=str(tmp_path / "base"), **QUICK)


class TableClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(2, 16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(weft.relu(self.fc1(x)))


def test_fit_takes_weft_train_s_own_data_a_csv_table(tmp_path):
    rng = np.random.default_rng(0)
    centres = {"low": (-2.0, 0.0), "mid": (0.0, 2.0), "high": (2.0, 0.0)}
    rows = ["x,y,kind"] + [f"{cx + rng.normal(0, .3):.4f},{cy + rng.normal(0, .3):.4f},{kind}"
                           for _ in range(100) for kind, (cx, cy) in centres.items()]
    (tmp_path / "points.csv").write_text("\n".join(rows) + "\n")
    weft.manual_seed(0)
    result = weft.train.fit(TableClassifier(), str(tmp_path / "points.csv"), steps=60, eval_every=0, **QUICK)
    assert result["test_accuracy"] > 0.95
    with pytest.raises(ValueError, match="points.csv: no label column .colour.; its columns are .x., .y., .kind."):
        weft.train.fit(TableClassifier(), str(tmp_path / "points.csv"), steps=1, label_column="colour", **QUICK)
