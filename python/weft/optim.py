"""weft.optim: the optimizers every ``weft train`` run uses, each updating its parameters in place,
and learning-rate schedulers in PyTorch's manner over weft's schedules.

weft's schedules are pure functions of the step (``schedule.lr_at(step)``), so a scheduler's whole
state is its step count.
"""
from ._weft import optim as _optim

Optimizer, SGD, Adam, AdamW = _optim.Optimizer, _optim.SGD, _optim.Adam, _optim.AdamW
clip_grad_norm_ = _optim.clip_grad_norm_
ConstantSchedule, StepSchedule, CosineWarmupSchedule = (_optim.ConstantSchedule, _optim.StepSchedule,
                                                        _optim.CosineWarmupSchedule)


class LRScheduler:
    """Sets ``optimizer.lr`` from ``schedule`` (one of weft's): at construction for the first update,
    then at each ``step()``, which is called after ``optimizer.step()`` as PyTorch's schedulers are."""

    def __init__(self, optimizer, schedule):
        self.optimizer, self.schedule, self.last_step = optimizer, schedule, 0
        optimizer.lr = schedule.lr_at(0)

    def step(self):
        self.last_step += 1
        self.optimizer.lr = self.schedule.lr_at(self.last_step)

    def get_last_lr(self):
        return [self.optimizer.lr]

    def state_dict(self):
        return {"last_step": self.last_step}

    def load_state_dict(self, state):
        self.last_step = state["last_step"]
        self.optimizer.lr = self.schedule.lr_at(self.last_step)


class StepLR(LRScheduler):
    """The optimizer's lr times ``gamma`` every ``step_size`` steps, as torch.optim.lr_scheduler.StepLR."""

    def __init__(self, optimizer, step_size, gamma=0.1):
        super().__init__(optimizer, StepSchedule(optimizer.lr, step_size, gamma))


class CosineWarmupLR(LRScheduler):
    """A linear warmup from 0 over ``warmup_steps``, then a cosine decay to ``min_lr`` at
    ``total_steps``: the schedule of ``weft train --schedule cosine``."""

    def __init__(self, optimizer, warmup_steps, total_steps, min_lr=0.0):
        super().__init__(optimizer, CosineWarmupSchedule(optimizer.lr, warmup_steps, total_steps, min_lr))
