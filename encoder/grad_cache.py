"""Gradient caching: a contrastive step over a batch larger than one forward can hold (Gao,
Zhang, Han & Callan 2021, "Scaling Deep Contrastive Learning Batch Size under Memory Limited
Setup"; the ``GradCache`` library's method).

In-batch negatives make the loss a function of every vector of the batch at once, so a
batch cannot simply be cut into accumulated micro-batches: each would see only its own
negatives. Gradient caching splits the step in two instead:

1. every text of the step is encoded in chunks of at most ``chunk`` texts *without* a graph;
   the loss is taken over all the vectors at once and differentiated with respect to the
   vectors alone (cheap: no network in that graph);
2. each chunk is encoded again *with* a graph, and its vectors are back-propagated with
   their cached gradient, accumulating the parameters' gradients chunk by chunk.

The parameters get the gradient of the whole batch's loss (equal to one big forward's up to
floating-point order), while activations are held for one chunk at a time: the batch is
bounded by time, not by memory. The cost is a second forward of every text (about a third
more compute per step). The random state is saved before each chunk's first forward and put
back for its second, so dropout drops the same units both times.

On a CPU the smaller working set can more than pay for the second forward: a step of 512
pairs (32- and 128-token texts, the shipped architecture) took 5.2-5.6 s in chunks of 64
against 6.7-7.5 s whole, at 1.0 GB of peak memory against 4.2 GB, the same loss (AMD EPYC,
2 cores, bf16 autocast; two alternating runs of a /tmp script, not recorded).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from encoder.device import autocast

Loss = Callable[..., tuple[torch.Tensor, torch.Tensor]]


def _rng_state(device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), cuda


def _set_rng_state(device: torch.device, state: tuple[torch.Tensor, torch.Tensor | None]
                   ) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


def cached_backward(model: torch.nn.Module, inputs: Sequence[torch.Tensor | None],
                    loss_fn: Loss, chunk: int, device: torch.device,
                    *loss_args: object) -> tuple[torch.Tensor, torch.Tensor]:
    """Accumulate into ``model``'s parameter gradients the gradient of
    ``loss_fn(*vectors, *loss_args)``, where ``vectors[i]`` is ``model(inputs[i])[0]`` (None
    stays None), encoding at most ``chunk`` rows a forward. Returns (loss, the loss
    function's second value) detached. The caller zeroes the gradients before and steps
    the optimiser after, as for ``loss.backward()``."""
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    states: list[list[tuple[torch.Tensor, torch.Tensor | None]]] = []
    vectors: list[torch.Tensor | None] = []
    for ids in inputs:  # 1. every vector, no graph; the random state of each chunk kept
        if ids is None:
            states.append([])
            vectors.append(None)
            continue
        parts, kept = [], []
        for s in range(0, len(ids), chunk):
            kept.append(_rng_state(device))
            with torch.no_grad(), autocast(device):
                parts.append(model(ids[s:s + chunk])[0])
        states.append(kept)
        vectors.append(torch.cat(parts).detach().requires_grad_())
    loss, extra = loss_fn(*vectors, *loss_args)
    loss.backward()  # the gradient of the loss with respect to each vector alone
    for ids, v, kept in zip(inputs, vectors, states, strict=True):  # 2. chunk by chunk
        if ids is None or v is None or v.grad is None:
            continue
        for n, s in enumerate(range(0, len(ids), chunk)):
            _set_rng_state(device, kept[n])
            with autocast(device):
                part = model(ids[s:s + chunk])[0]
            part.backward(v.grad[s:s + chunk].to(part.dtype))
    return loss.detach(), extra.detach()
