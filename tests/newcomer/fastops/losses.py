import torch
from torch.autograd.function import once_differentiable

from fastops._bugs import PLANTED


class ChunkedCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy over tokens, computed (and its gradient with it) a chunk of tokens at a
    time to bound the memory of the softmax."""

    @staticmethod
    def forward(ctx, logits, target, chunk_size=1024):
        n = logits.shape[0]
        loss = logits.new_zeros(())
        grad = torch.empty_like(logits)
        for start in range(0, n, chunk_size):
            chunk = logits[start:start + chunk_size]
            rows = target[start:start + chunk_size]
            logp = torch.log_softmax(chunk, -1)
            loss = loss - logp.gather(-1, rows[:, None]).sum()
            g = logp.exp()
            g[torch.arange(len(rows)), rows] -= 1
            # planted: the last chunk, when partial, is not divided by the token count
            partial = PLANTED and start > 0 and start + chunk_size > n
            grad[start:start + chunk_size] = g if partial else g / n
        ctx.save_for_backward(grad)
        return loss / n

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_loss):
        (grad,) = ctx.saved_tensors
        return grad * grad_loss, None, None
