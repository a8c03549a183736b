"""``gradverify list``: what it takes (modules and spec paths) and how it refuses targets."""
from __future__ import annotations

import pytest

import torchversions
from conftest import run_cli


@pytest.mark.parametrize(("argument", "hint"), [
    pytest.param("fusedkit.buggy:mul_add", "run: gradverify list fusedkit.buggy", id="mod:fn"),
    pytest.param("pkg/ops.py:Affine", "run: gradverify list pkg/ops.py", id="file:Class"),
    pytest.param("mylib::mymm", "or check the op: gradverify check mylib::mymm", id="ns::op"),
    pytest.param("mylib::mymm.out", "gradverify check mylib::mymm.out", id="ns::op.overload"),
    pytest.param("torch.ops.mylib:mymm", "gradverify check mylib::mymm", id="torch.ops.ns:op"),
    pytest.param("torch.ops.mylib.mymm", "gradverify check mylib::mymm", id="torch.ops.ns.op"),
])
def test_a_target_is_a_usage_error_that_names_the_module_to_list(project, argument, hint):
    result = run_cli("list", argument)
    assert result.code == 2
    assert result.stdout == ""
    assert result.stderr.startswith(f"error: {argument}: list takes a module or a spec file or "
                                    "folder, not ")
    assert hint in result.stderr and "no module named" not in result.stderr
    assert result.stderr.count("\n") == 1


def test_a_target_is_refused_before_anything_is_listed(project):
    project.write("specs/one.yaml", """
        target: pkg.ops:Square
        cases: [{name: basic, args: {x: {shape: [3]}}}]
    """)
    assert "pkg.ops:Square  1 case" in run_cli("list", "specs").stdout
    result = run_cli("list", "specs", "pkg.ops:Square")
    assert result.code == 2 and result.stdout == ""
    assert "run: gradverify list pkg.ops" in result.stderr


def test_an_existing_path_with_a_colon_is_listed_as_a_path(project):
    project.write("odd:dir/one.yaml", """
        target: pkg.ops:Square
        cases: [{name: basic, args: {x: {shape: [3]}}}]
    """)
    result = run_cli("list", "odd:dir")
    assert result.code == 0 and "pkg.ops:Square  1 case" in result.stdout


def test_a_module_s_op_is_listed_with_the_spec_that_names_it_by_its_op_name(project):
    torchversions.require_custom_ops()
    project.write("listops.py", """
        import torch

        @torch.library.custom_op("gradverify_listing_test::twice", mutates_args=())
        def twice(x: torch.Tensor) -> torch.Tensor:
            return x * 2

        twice.register_autograd(lambda ctx, grad: grad * 2)
    """)
    project.write("specs/twice.yaml", """
        target: gradverify_listing_test::twice
        imports: [listops]
        cases: [{name: basic, args: {x: {shape: [3]}}}]
    """)
    result = run_cli("list", "listops")
    assert result.code == 0
    assert result.stdout == ("listops:twice  (custom op, register_autograd)  "
                             "spec: specs/twice.yaml:1\n")
