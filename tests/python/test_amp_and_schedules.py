"""weft.amp (autocast, GradScaler) and weft.optim's schedulers from Python: the scopes and the
scaler weft train --precision uses, and schedules that follow their formulas step by step."""
import math

import numpy as np
import pytest

import weft


def test_autocast_runs_linear_in_bf16_inside_its_scope_only():
    x, w = weft.randn(4, 8), weft.randn(3, 8)
    assert weft.amp.autocast_dtype() is None
    with weft.amp.autocast(weft.bf16):
        assert weft.amp.autocast_dtype() == weft.bf16
        assert weft.linear(x, w).dtype == weft.bf16
        with weft.amp.autocast(enabled=False):
            assert weft.amp.autocast_dtype() is None
            assert weft.linear(x, w).dtype == weft.f32
        assert weft.amp.autocast_dtype() == weft.bf16
    assert weft.amp.autocast_dtype() is None
    assert weft.linear(x, w).dtype == weft.f32


def test_autocast_refuses_a_type_it_cannot_compute_in():
    with pytest.raises(ValueError):
        with weft.amp.autocast(weft.i8):
            pass


def quadratic():
    p = weft.tensor([1.0, -2.0, 3.0], requires_grad=True)
    return p, (p * p).sum()


def test_grad_scaler_steps_as_an_unscaled_step_and_skips_overflow():
    p, loss = quadratic()
    opt = weft.optim.SGD([p], lr=0.1)
    scaler = weft.amp.GradScaler(init_scale=1024.0, growth_interval=1)
    scaled = scaler.scale(loss)
    assert scaled.item() == pytest.approx(1024.0 * loss.item())
    scaled.backward()
    assert scaler.step(opt)
    scaler.update()
    np.testing.assert_allclose(p.numpy(), np.array([1.0, -2.0, 3.0]) * (1 - 0.2), rtol=1e-6)
    assert scaler.get_scale() == 2048.0  # a clean step at growth_interval 1 doubles it

    before = p.numpy().copy()
    opt.zero_grad()
    (p * float("inf")).sum().backward()
    assert not scaler.step(opt)
    scaler.update()
    np.testing.assert_array_equal(p.numpy(), before)
    assert scaler.get_scale() == 1024.0 and scaler.skipped_steps == 1


def lrs(scheduler, optimizer, steps):
    seen = []
    for _ in range(steps):
        seen.append(optimizer.lr)
        scheduler.step()
    return seen


def test_step_lr_follows_its_formula():
    p, _ = quadratic()
    opt = weft.optim.SGD([p], lr=0.5)
    assert lrs(weft.optim.StepLR(opt, step_size=3, gamma=0.1), opt, 7) == pytest.approx(
        [0.5 * 0.1 ** (t // 3) for t in range(7)])


def test_cosine_warmup_follows_its_formula_and_resumes_from_its_step():
    p, _ = quadratic()
    opt = weft.optim.AdamW([p], lr=1e-3)
    sched = weft.optim.CosineWarmupLR(opt, warmup_steps=2, total_steps=10, min_lr=1e-4)
    want = [1e-3 * t / 2 if t < 2 else 1e-4 + (1e-3 - 1e-4) * (1 + math.cos(math.pi * (t - 2) / 8)) / 2
            for t in range(12)]
    want[10:] = [1e-4, 1e-4]
    assert lrs(sched, opt, 12) == pytest.approx(want)
    state = sched.state_dict()
    fresh = weft.optim.AdamW([p], lr=1e-3)
    again = weft.optim.CosineWarmupLR(fresh, warmup_steps=2, total_steps=10, min_lr=1e-4)
    again.load_state_dict(sched.state_dict() | {"last_step": 5})
    assert fresh.lr == pytest.approx(want[5]) and state == {"last_step": 12}


def test_schedules_refuse_what_they_cannot_take():
    with pytest.raises(ValueError):
        weft.optim.StepSchedule(0.1, 0)
    with pytest.raises(ValueError):
        weft.optim.CosineWarmupSchedule(0.1, 5, 3)
