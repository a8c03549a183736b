import torch
from torch.autograd.function import once_differentiable

from fastops._bugs import PLANTED


class TopKRouter(torch.autograd.Function):
    """Mixture-of-experts gates: softmax over experts, the top ``k`` kept and renormalised, the
    rest zero."""

    @staticmethod
    def forward(ctx, logits, k=2):
        probs = torch.softmax(logits, -1)
        top, index = probs.topk(k, -1)
        gates = torch.zeros_like(probs).scatter(-1, index, top / top.sum(-1, keepdim=True))
        ctx.save_for_backward(probs, gates)
        ctx.mark_non_differentiable(index)
        return gates, index

    @staticmethod
    @once_differentiable
    def backward(ctx, grad, _):
        probs, gates = ctx.saved_tensors
        chosen = (gates > 0).to(grad.dtype)
        # gates = p * chosen / S with S = sum(p * chosen); d gates / d p, then the softmax
        s = (probs * chosen).sum(-1, keepdim=True)
        if PLANTED:  # planted: the renormalisation's own derivative forgotten (exact when k = E)
            dp = grad * chosen / s
        else:
            dp = chosen * (grad - (grad * gates).sum(-1, keepdim=True)) / s
        return probs * (dp - (dp * probs).sum(-1, keepdim=True)), None
