"""Adam's update as part of a captured training step (``bnn_zoo.core.fast.captured_step``): the moments
and step counts stay torch's own (``optimizer.state``, what checkpoints store and a later
``optimizer.step()`` continues from), the learning rate is read from the optimizer at each step
(a schedule changes it without a new capture), and the update is Adam's, as torch writes it for a
tensor learning rate (``torch.optim.adam``'s capturable single-tensor form: its functional
``adam()`` refuses to be traced on a CPU, so it is written out here), traced into the step's graph
so that a compiler fuses it with the backward pass.

Usage::

    adam = InGraphAdam(optimizer, params)   # ValueError where the optimizer is not a plain Adam
    moments = adam.moments()                # (exp_avgs, exp_avg_sqs, steps, [lr]): the graph's inputs
    with torch.no_grad():
        update(grads_of_adam_params, *moments, **adam.constants)
"""
from __future__ import annotations

import torch


class InGraphAdam:
    """Adam's state for ``params`` (the step's parameters; those ``optimizer`` moves are updated),
    as inputs of a graph: its moments and step counts where torch's fused Adam keeps them (made as
    it makes them where it has not stepped yet), and its learning rate as a tensor on the
    parameters' device, refilled when the optimizer's changes."""

    def __init__(self, optimizer: torch.optim.Optimizer, params: list[torch.Tensor]):
        if type(optimizer) is not torch.optim.Adam or len(optimizer.param_groups) != 1:
            raise ValueError("Adam's update joins the captured step for torch.optim.Adam with one parameter group")
        group = optimizer.param_groups[0]
        unsupported = [k for k, plain in (("amsgrad", False), ("maximize", False), ("weight_decay", 0),
                                          ("differentiable", False)) if group.get(k, plain) != plain]
        if unsupported or isinstance(group["lr"], torch.Tensor):
            raise ValueError(f"Adam's update joins the captured step with a float lr and without "
                             f"{', '.join(unsupported) or 'a tensor lr'}")
        moved = {id(p) for p in group["params"]}
        self.optimizer = optimizer
        self.index = [i for i, p in enumerate(params) if id(p) in moved]  # the step's parameters Adam moves
        self.params = [params[i] for i in self.index]
        beta1, beta2 = group["betas"]
        self.constants = {"beta1": float(beta1), "beta2": float(beta2), "eps": float(group["eps"])}
        device = self.params[0].device if self.params else torch.device("cpu")
        self.lr, self._lr = torch.tensor(float(group["lr"]), device=device), float(group["lr"])

    def moments(self) -> tuple[list, list, list, list]:
        """(exp_avgs, exp_avg_sqs, steps, [lr]) as the optimizer holds them now."""
        state = self.optimizer.state
        for p in self.params:
            if not state[p]:  # as torch.optim.Adam (fused) makes them at its first step
                state[p].update(step=torch.zeros((), dtype=torch.float32, device=p.device),
                                exp_avg=torch.zeros_like(p, memory_format=torch.preserve_format),
                                exp_avg_sq=torch.zeros_like(p, memory_format=torch.preserve_format))
        lr = self.optimizer.param_groups[0]["lr"]  # its group now (load_state_dict makes new ones)
        if lr != self._lr:  # a new epoch's learning rate: written on the device, no wait
            self._lr = float(lr)
            self.lr.fill_(self._lr)
        held = [state[p] for p in self.params]
        return [s["exp_avg"] for s in held], [s["exp_avg_sq"] for s in held], [s["step"] for s in held], [self.lr]

    def tensors(self) -> list[torch.Tensor]:
        """Every tensor the update writes or reads besides the gradients (what a CUDA graph keeps in place)."""
        exp_avgs, exp_avg_sqs, steps, lr = self.moments()
        return [*self.params, *exp_avgs, *exp_avg_sqs, *steps, *lr]


def update(params, grads, exp_avgs, exp_avg_sqs, steps, lr, beta1: float, beta2: float, eps: float) -> None:
    """One Adam step in place on ``params`` and the moments (``lr``: [a 0-d tensor]; a parameter
    without a gradient stays as it is, as torch's Adam leaves it)."""
    lr, = lr
    for param, grad, exp_avg, exp_avg_sq, step in zip(params, grads, exp_avgs, exp_avg_sqs, steps):
        if grad is None:
            continue
        step.add_(1)
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        step_size_neg = (lr / (1 - beta1 ** step)).neg()
        bias_correction2_sqrt = (1 - beta2 ** step).sqrt()
        denom = (exp_avg_sq.sqrt() / (bias_correction2_sqrt * step_size_neg)).add_(eps / step_size_neg)
        param.addcdiv_(exp_avg, denom)
