import torch


@torch.library.custom_op("fastops::scaled_gelu", mutates_args=())
def scaled_gelu(x: torch.Tensor, alpha: float) -> torch.Tensor:
    return alpha * torch.nn.functional.gelu(x)


@scaled_gelu.register_fake
def _(x, alpha):
    return torch.empty_like(x)


def _scaled_gelu_setup(ctx, inputs, output):
    x, alpha = inputs
    ctx.save_for_backward(x)
    ctx.alpha = alpha


def _scaled_gelu_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    cdf = 0.5 * (1 + torch.erf(x / 2 ** 0.5))
    pdf = torch.exp(-0.5 * x * x) / (2 * torch.pi) ** 0.5
    return grad * ctx.alpha * (cdf + x * pdf), None


scaled_gelu.register_autograd(_scaled_gelu_backward, setup_context=_scaled_gelu_setup)


@torch.library.custom_op("fastops::add_rms_norm", mutates_args=())
def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                 eps: float) -> torch.Tensor:
    h = x + residual
    return h * (h.pow(2).mean(-1, keepdim=True) + eps).rsqrt() * weight


@add_rms_norm.register_fake
def _(x, residual, weight, eps):
    return torch.empty_like(x)


def _add_rms_setup(ctx, inputs, output):
    x, residual, weight, eps = inputs
    ctx.save_for_backward(x, residual, weight)
    ctx.eps = eps


def _add_rms_backward(ctx, grad):
    x, residual, weight = ctx.saved_tensors
    h = x + residual
    rstd = (h.pow(2).mean(-1, keepdim=True) + ctx.eps).rsqrt()
    g = grad * weight
    dh = rstd * (g - h * rstd.pow(2) * (g * h).mean(-1, keepdim=True))
    lead = tuple(range(grad.dim() - 1))
    return dh, dh, (grad * h * rstd).sum(lead), None


add_rms_norm.register_autograd(_add_rms_backward, setup_context=_add_rms_setup)


@torch.library.custom_op("fastops::swiglu", mutates_args=())
def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(gate) * up


@swiglu.register_fake
def _(gate, up):
    return torch.empty_like(gate)


def _swiglu_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _swiglu_backward(ctx, grad):
    gate, up = ctx.saved_tensors
    sig = torch.sigmoid(gate)
    return grad * up * sig * (1 + gate * (1 - sig)), grad * gate * sig


swiglu.register_autograd(_swiglu_backward, setup_context=_swiglu_setup)
