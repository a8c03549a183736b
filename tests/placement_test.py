"""The placement check: device bugs found on a machine without a GPU (docs/checks.md,
"placement: as if on a GPU"). tests/zoo/placement.py holds the Functions; zoo_test and
trust_test run them with every check."""
from __future__ import annotations

import inspect
import re
from types import SimpleNamespace

import pytest
import torch
from torch.autograd import Function

import torchversions
from gradverify import verify
from gradverify.checks import _devices, placement
from gradverify.results import Severity, Status
from zoo import placement as zoo_placement
from zoo import spec_for

_FACTORY = re.compile(r"torch\.(zeros|arange|tensor|full|linspace|eye|from_numpy)\(")
_BROKEN = [cls for cls in vars(zoo_placement).values()
           if isinstance(cls, type) and hasattr(cls, "EXPECT")]


def _placement(target, spec):
    report = verify(target, spec=spec, checks=["placement"])
    assert not report.errors, report.errors
    (check,) = [c for case in report.results for c in case.checks]
    return check


@pytest.mark.parametrize("cls", _BROKEN, ids=lambda c: c.__name__)
def test_each_device_bug_points_at_the_line_that_made_the_cpu_tensor(cls):
    check = _placement(cls, cls.SPEC)
    assert check.status == (Status.WARN if getattr(cls, "SEVERITY", "") == "warning"
                            else Status.FAIL)
    (finding,) = check.findings
    assert finding.code == cls.EXPECT[1]
    lines, first = inspect.getsourcelines(cls)
    line = lines[finding.location.line - first]
    # the factory's own line, or (a cached identity) the line where the cached CPU tensor
    # meets the call, said as such
    assert _FACTORY.search(line) or "kept from an earlier call" in finding.message, \
        (line, finding.message)
    assert "on the CPU" in finding.message
    assert finding.hint


def test_the_finding_says_which_op_which_tensor_and_how_to_fix_it():
    (finding,) = _placement(zoo_placement.ScatterIntoCpuBuffer,
                            zoo_placement.ScatterIntoCpuBuffer.SPEC).findings
    assert "index_add_ got a CPU tensor of shape [5, 3]" in finding.message
    assert "made by torch.zeros at tests/zoo/placement.py:" in finding.message
    assert "Expected all tensors to be on the same device" in finding.message
    assert "new_zeros" in finding.hint and "device=x.device" in finding.hint


def test_a_numpy_conversion_of_an_input_is_a_note_not_a_failure():
    class NumpyForward(Function):
        @staticmethod
        def forward(ctx, x):
            return torch.from_numpy(x.detach().numpy() * 2.0)

        @staticmethod
        def backward(ctx, grad):
            return grad * 2.0

    check = _placement(NumpyForward, spec_for(x={"shape": [3]}))
    assert check.status == Status.PASS
    (note,) = check.findings
    assert note.code == "GV443" and note.severity == Severity.INFO
    assert "--device cuda" in note.message


def test_a_function_that_raises_on_the_cpu_too_is_left_to_the_other_checks():
    class AlwaysRaises(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            raise ValueError("not today")

    check = _placement(AlwaysRaises, spec_for(x={"shape": [3]}))
    assert check.status == Status.SKIP
    assert "raises on the CPU too" in check.summary


def test_custom_ops_are_judged_through_their_registered_backward_and_any_device_kernel():
    torchversions.require_custom_ops()

    @torch.library.custom_op("gradverify_placement_test::bad_kernel", mutates_args=())
    def bad_kernel(x: torch.Tensor) -> torch.Tensor:
        return x * 3 + torch.zeros(x.shape, dtype=x.dtype)

    @torch.library.custom_op("gradverify_placement_test::good", mutates_args=())
    def good(x: torch.Tensor) -> torch.Tensor:
        return x * 3 + x.new_zeros(x.shape)

    @torch.library.custom_op("gradverify_placement_test::cpu_only", mutates_args=(),
                             device_types="cpu")
    def cpu_only(x: torch.Tensor) -> torch.Tensor:
        # a CPU kernel: another device gets its own (or none), so this is not judged
        return x * 3 + torch.zeros(x.shape, dtype=x.dtype)

    def bad_backward(ctx, grad):
        return grad * torch.full(grad.shape, 3.0, dtype=grad.dtype)

    for op in (bad_kernel, good, cpu_only):
        op.register_fake(lambda x: torch.empty_like(x))
        op.register_autograd(lambda ctx, grad: grad * 3)
    spec = {"cases": [{"args": [{"shape": [3, 2]}]}]}
    found = _placement("gradverify_placement_test::bad_kernel", spec).findings
    assert [f.code for f in found] == ["GV441"] and "torch.zeros" in found[0].message
    assert _placement("gradverify_placement_test::good", spec).status == Status.PASS
    assert _placement("gradverify_placement_test::cpu_only", spec).status == Status.PASS
    good.register_autograd(bad_backward)
    found = _placement("gradverify_placement_test::good", spec).findings
    assert [f.code for f in found] == ["GV441"] and "torch.full" in found[0].message


def test_a_run_on_another_device_leaves_placement_to_the_device_check():
    # without a GPU no run can name another device, so the check's first step is called alone
    outcome = placement.CHECK.run(SimpleNamespace(device="cuda:0"))  # type: ignore[arg-type]
    assert outcome.status == Status.SKIP and "device check" in outcome.summary


def test_backward_raising_torchs_two_device_error_gets_the_device_hint():
    class MixesDevices(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            raise RuntimeError("Expected all tensors to be on the same device, but found at "
                               "least two devices, cuda:0 and cpu!")

    report = verify(MixesDevices, spec=spec_for(x={"shape": [3]}), checks=["contract"])
    (finding,) = [f for c in report.results[0].checks for f in c.findings]
    assert finding.code == "GV101" and "x.new_zeros" in finding.hint


def test_torchs_two_device_errors_are_recognised():
    said = [
        "Expected all tensors to be on the same device, but found at least two devices, "
        "cuda:0 and cpu!",
        "Function MyFuncBackward returned an invalid gradient at index 0 - expected device "
        "cuda:0 but got cpu",
        "Expected all tensors to be on the same device, but got index is on cpu, different "
        "from other tensors on cuda:0",
    ]
    assert all(_devices.two_devices(RuntimeError(text)) for text in said)
    assert not _devices.two_devices(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))


class _FromDataOnDevice(Function):
    """The fixes the hint gives, for data: torch.tensor/as_tensor/new_tensor with the device."""

    @staticmethod
    def forward(ctx, x):
        c = torch.tensor([1.0, 2.0, 3.0], dtype=x.dtype, device=x.device)
        eye = x.new_tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
        label = f"{x.sum():.3f}"  # a number formatted for a log
        assert label
        return (x * c) @ eye * torch.tensor(2.0, device=x.device)

    @staticmethod
    def backward(ctx, grad):
        return grad * torch.as_tensor([1.0, 2.0, 3.0], dtype=grad.dtype, device=grad.device) * 2


class _PackedLengths(Function):
    """pack_padded_sequence takes its lengths on the CPU on every device."""

    @staticmethod
    def forward(ctx, x):
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, torch.tensor([4, 3, 1]),
                                                         batch_first=True)
        return torch.nn.utils.rnn.pad_packed_sequence(packed, batch_first=True)[0] * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class _AccumulatesIntoCpuScalar(Function):
    """A 0-dim CPU accumulator written in place with a device tensor: CUDA refuses it."""

    @staticmethod
    def forward(ctx, x):
        total = torch.tensor(0.0, dtype=x.dtype)
        total += x.detach().sum()
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class _OutputThroughNumpy(Function):
    """An output on the CPU; backward itself is device-correct."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.from_numpy(x.detach().cpu().numpy() ** 2)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * grad * x


class _TakeAlongCpuIndex(Function):
    """take_along_dim with a CPU index: torch's own device check refuses it inside the op."""

    @staticmethod
    def forward(ctx, x):
        return torch.take_along_dim(x, torch.zeros(x.shape[0], 1, dtype=torch.long), 1)

    @staticmethod
    def backward(ctx, grad):
        return None


_PER_DEVICE: dict[tuple[int, torch.dtype], torch.Tensor] = {}


class _CacheMadeWithDevice(Function):
    """A cache filled with device= but keyed without it: right on one device, wrong once a
    process uses two. gradverify's CPU runs fill it first, so placement warns."""

    @staticmethod
    def forward(ctx, x):
        key = (x.shape[-1], x.dtype)
        if key not in _PER_DEVICE:
            _PER_DEVICE[key] = torch.linspace(0.5, 1.5, x.shape[-1], dtype=x.dtype,
                                              device=x.device)
        return x * _PER_DEVICE[key]

    @staticmethod
    def backward(ctx, grad):
        return grad * _PER_DEVICE[(grad.shape[-1], grad.dtype)]


_ROWS = spec_for(x={"shape": [4, 3]})


@pytest.mark.parametrize("cls", [_FromDataOnDevice, _PackedLengths], ids=lambda c: c.__name__)
def test_device_correct_data_and_host_lengths_pass(cls):
    spec = spec_for(x={"shape": [3, 4, 2]}) if cls is _PackedLengths else _ROWS
    check = _placement(cls, spec)
    assert check.status == Status.PASS and not check.findings, \
        [f.message for f in check.findings]


def test_an_in_place_write_into_a_cpu_scalar_fails_with_its_line():
    (finding,) = _placement(_AccumulatesIntoCpuScalar, _ROWS).findings
    assert finding.code == "GV441" and finding.severity == Severity.ERROR
    assert "add_ got a CPU tensor of shape []" in finding.message
    line = inspect.getsource(_AccumulatesIntoCpuScalar).splitlines()[
        finding.location.line - inspect.getsourcelines(_AccumulatesIntoCpuScalar)[1]]
    assert "torch.tensor(0.0" in line


def test_an_output_on_the_cpu_is_said_once_not_again_as_backward_s():
    findings = _placement(_OutputThroughNumpy, _ROWS).findings
    assert [f.code for f in findings] == ["GV442"] and "output 0" in findings[0].message


def test_torchs_own_device_refusal_inside_an_op_is_a_failure():
    (finding,) = _placement(_TakeAlongCpuIndex, _ROWS).findings
    assert finding.code == "GV441" and "take_along_dim" in finding.message


def test_a_tensor_kept_from_an_earlier_cpu_call_is_a_warning_that_says_so():
    report = verify(_CacheMadeWithDevice, spec=_ROWS)
    (check,) = [c for c in report.results[0].checks if c.name == "placement"]
    assert check.status == Status.WARN, [f.message for f in check.findings]
    (finding,) = check.findings
    assert finding.severity == Severity.WARNING and "kept from an earlier call" in finding.message
    assert "keyed by device" in finding.hint
